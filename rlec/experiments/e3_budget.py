"""E3's dynamic rollout budget (arXiv 2505.18573, Sec. 3.2): fixed n vs per-prompt n by difficulty, same total rollouts.

The paper (and rlec's README): harder prompts get more rollouts (the sum stays n x prompts), which lowers the
share of groups with no correct response. The budget ranks prompts by their own past accuracy and gives an unseen
prompt rollout.n, so the pool is small and revisited: 64 rows (from the pilot: half hard-but-solvable, base q in
[0.05, 0.35], half easy, q >= 0.7), 16 per step, each prompt back every 4 steps. Premise gate: under fixed n, prompts
solved before come back all wrong (>= 10% of their groups over the second half): what more rollouts can turn.
Primary metric: that share (all-wrong groups among prompts solved at least once before), lower with the budget.
The temperature scheduler and length bias are off in both arms.

The pool comes from the pilot (``python -m rlec.experiments.pilot e3_budget`` -> ``docs/results/pilot_e3_budget.json``:
e3's 320 candidates on the demo's warm start, 32 samples at T = 1): :data:`HARD` and :data:`EASY`, 32 prompts each.
LAB.md's easy half was q >= 0.8; e3's pilot (the same candidates and warm start) measured only 11 such prompts (the warm
start's "I don't know" coin caps one-digit sums near q 0.75), so the easy band starts at 0.7, the highest edge with 32.
The pilot file also holds the offline prediction (:func:`predicted_all_wrong`).
"""

from __future__ import annotations

from typing import Any, Sequence

from rlec.experiments import keys as K
from rlec.experiments.spec import (Arm, Band, Curve, Experiment, PaperSetting, Premise, Primary, all_wrong_after_solved,
                                   all_wrong_share, at_least, common_paper_settings, metric_curve, shared_settings,
                                   window_mean)

_E3_ONLY_BUDGET = (f"{K.OVERLAY}=e3", f"{K.E3_TEMPERATURE}=false", f"{K.E3_LENGTH_BIAS}=false")
STEPS = 300
# 64 rows are 4 steps of 16 prompts: verl's loop ends after trainer.total_epochs passes over the data whatever
# trainer.total_training_steps says, so 75 passes cover the 300 steps
SETTINGS = shared_settings(**{"trainer.total_epochs": 75})
N = int(SETTINGS[K.ROLLOUT_N])  # fixed n: the shared rollout.n (one home; the arms' texts and the pilot's prediction)
N_MIN, N_MAX = 4, 16  # the dynamic arm's bounds
HARD = Band("hard", 0.05, 0.35, 32)  # hard but solvable (LAB.md)
EASY = Band("easy", 0.7, 1.0, 32)  # LAB.md: q >= 0.8; 11 candidates reach it (module docstring)


def predicted_all_wrong(kept: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The offline prediction (LAB.md: "plug the pilot's q's into sum (1 - q_i)^{n_i} under both allocations").

    A group of n_i independent samples of a prompt of base q_i is all wrong with chance (1 - q_i)^{n_i}; the mean over the
    kept prompts under fixed n = :data:`N`, and under the dynamic budget's allocation
    (:func:`rlec.algorithms.e3.budget.allocate_rollouts`, n in [:data:`N_MIN`, :data:`N_MAX`], the same total) with each
    prompt's rank from its pilot q (:class:`rlec.algorithms.e3.budget.PromptHistory`: the budget once it has seen every
    prompt at its base q, all prompts in one batch); also the mean over the hard band (q <= :data:`HARD` ``.hi``).
    Before any training: the policy's q moves as it trains.
    """
    import numpy as np

    from rlec.algorithms.e3.budget import PromptHistory, allocate_rollouts

    history = PromptHistory()
    for c in kept:  # each prompt's pilot responses, round(q n) of its n right, through the history's own update
        right = round(c["q"] * c["n"])
        history.update([c["question_id"]] * c["n"], [True] * right + [False] * (c["n"] - right))
    n_dyn = allocate_rollouts(history.ranks([c["question_id"] for c in kept]), N, N_MIN, N_MAX)
    q = np.array([c["q"] for c in kept])
    hard = q <= HARD.hi
    fixed, dynamic = (1 - q) ** N, (1 - q) ** np.array(n_dyn)
    return {"all-wrong, fixed n": float(fixed.mean()), "all-wrong, dynamic": float(dynamic.mean()),
            "all-wrong among hard, fixed n": float(fixed[hard].mean()), "all-wrong among hard, dynamic": float(dynamic[hard].mean()),
            "n per prompt, dynamic": [int(x) for x in n_dyn], "rollouts": int(sum(n_dyn)),
            "note": "offline, from the pilot's base q (32 samples each) with every prompt in one batch; not a result of training"}

EXPERIMENT = Experiment(
    name="e3_budget",
    claim="the dynamic budget lowers the share of all-wrong groups at the same total rollouts",
    paper="E3, arXiv 2505.18573: Sec. 3.2 (dynamic rollout budget)",
    arms=(
        Arm("fixed_n", f"every prompt gets rollout.n = {N}", (*_E3_ONLY_BUDGET, f"{K.E3_BUDGET}=false")),
        Arm("dynamic", f"per-prompt n in [{N_MIN}, {N_MAX}] by difficulty rank, sum = {N} x prompts",
            (*_E3_ONLY_BUDGET, f"{K.E3_BUDGET}=true", f"{K.E3_N_MIN}={N_MIN}", f"{K.E3_N_MAX}={N_MAX}")),
    ),
    settings=SETTINGS,
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
    pilot="python -m rlec.experiments.pilot e3_budget  # -> docs/results/pilot_e3_budget.json: 32 hard + 32 easy prompts",
    pilot_bands=(HARD, EASY),
    pilot_figures=predicted_all_wrong,
    paper_settings=(
        *common_paper_settings("E3 (scripts/train_1_5b.sh)"),
        PaperSetting("clip ratio low / high", "0.2 / 0.2 (verl default)", "0.2 / 0.2", (K.CLIP_LOW, K.CLIP_HIGH)),
        PaperSetting("advantage divided by the group's std", "yes (GRPO)", "True", (K.NORM_BY_STD,)),
        PaperSetting("per-prompt n", "[n_min, n_max] around n, same total", "[4, 16] around 8"),
        PaperSetting("pool", "a math set a 7B model solves sometimes",
                     f"64 rows: 32 with base q in [{HARD.lo}, {HARD.hi}], 32 with q >= {EASY.lo} (the pilot's)",
                     note="LAB.md's easy q >= 0.8 holds 11 of 320 candidates; the pilot file holds the offline prediction "
                          "sum (1 - q_i)^{n_i} under both allocations"),
        PaperSetting("steps", "hundreds", str(STEPS)),
    ),
)
