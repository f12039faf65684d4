"""E3's dynamic rollout budget (arXiv 2505.18573, Sec. 3.2): fixed n vs per-prompt n by difficulty, same total rollouts.

The paper (and rlec's README): harder prompts get more rollouts (the sum stays n x prompts), which lowers the
share of groups with no correct response. The budget ranks prompts by their own past accuracy and gives an unseen
prompt rollout.n, so the pool is small and revisited: 64 rows (from the pilot: half hard-but-solvable, base q in
[0.05, 0.35], half easy, q >= 0.8), 16 per step, each prompt back every 4 steps. Premise gate: under fixed n, prompts
solved before come back all wrong (>= 10% of their groups over the second half): what more rollouts can turn.
Primary metric: that share (all-wrong groups among prompts solved at least once before), lower with the budget.
The temperature scheduler and length bias are off in both arms.
"""

from __future__ import annotations

from rlec.experiments import keys as K
from rlec.experiments.spec import (Arm, Curve, Experiment, PaperSetting, Premise, Primary, all_wrong_after_solved,
                                   all_wrong_share, at_least, common_paper_settings, metric_curve, pilot_command,
                                   shared_settings, window_mean)

_E3_ONLY_BUDGET = (f"{K.OVERLAY}=e3", f"{K.E3_TEMPERATURE}=false", f"{K.E3_LENGTH_BIAS}=false")
STEPS = 300

EXPERIMENT = Experiment(
    name="e3_budget",
    claim="the dynamic budget lowers the share of all-wrong groups at the same total rollouts",
    paper="E3, arXiv 2505.18573: Sec. 3.2 (dynamic rollout budget)",
    arms=(
        Arm("fixed_n", "every prompt gets rollout.n = 8", (*_E3_ONLY_BUDGET, f"{K.E3_BUDGET}=false")),
        Arm("dynamic", "per-prompt n in [4, 16] by difficulty rank, sum = 8 x prompts",
            (*_E3_ONLY_BUDGET, f"{K.E3_BUDGET}=true", f"{K.E3_N_MIN}=4", f"{K.E3_N_MAX}=16")),
    ),
    # 64 rows are 4 steps of 16 prompts: verl's loop ends after trainer.total_epochs passes over the data whatever
    # trainer.total_training_steps says, so 75 passes cover the 300 steps
    settings=shared_settings(**{"trainer.total_epochs": 75}),
    data="binary",
    curves=(Curve("all_wrong_after_solved", "all-wrong share among prompts solved before (rollout dump)", all_wrong_after_solved),
            Curve("all_wrong_share", "share of all-wrong groups (rollout dump)", all_wrong_share),
            metric_curve(K.M_ROLLOUT_N_MAX, "largest per-prompt n (e3/rollout_n/max)")),
    steps=STEPS,
    train_rows=64,
    # --quick: 4 rows of 4 prompts a step, so every prompt comes back at step 2 and the budget acts at steps 2-3
    quick_steps=3,
    quick_train_rows=4,
    baseline="fixed_n",
    primary=Primary("all-wrong share among prompts solved at least once before, steps after the first revisit",
                    lambda run: window_mean(all_wrong_after_solved(run), 0.0, 1.0), -1,
                    requires=("rollout dump with prompt texts",), sd=0.018, effect=0.0375,
                    sd_source="docs/results/e3_budget.json: paired per-seed SD of the all-wrong share (last quarter)"),
    premise=Premise("under fixed n, prompts solved before come back all wrong in >= 10% of their groups (second half)",
                    at_least(all_wrong_after_solved, 0.10, "all-wrong after solved")),
    seeds=5,
    pilot=pilot_command("<out>/shared/data/candidates.parquet", "<out>/shared/pilot/records.jsonl"),
    paper_settings=(
        *common_paper_settings("E3 (scripts/train_1_5b.sh)"),
        PaperSetting("clip ratio low / high", "0.2 / 0.2 (verl default)", "0.2 / 0.2", (K.CLIP_LOW, K.CLIP_HIGH)),
        PaperSetting("advantage divided by the group's std", "yes (GRPO)", "True", (K.NORM_BY_STD,)),
        PaperSetting("per-prompt n", "[n_min, n_max] around n, same total", "[4, 16] around 8"),
        PaperSetting("pool", "a math set a 7B model solves sometimes", "64 rows: 32 with base q in [0.05, 0.35], 32 with q >= 0.8",
                     note="offline check first: sum (1 - q_i)^{n_i} under both allocations (LAB.md: 0.124 -> 0.090)"),
        PaperSetting("steps", "hundreds", str(STEPS)),
    ),
)
