"""E3's dynamic rollout budget (arXiv 2505.18573, Sec. 3.2): fixed n vs per-prompt n by difficulty, same total rollouts.

The paper (and rlec's README): harder prompts get more rollouts (the sum stays n x prompts), which
lowers the share of groups with no correct response. Here: that share per step, from verl's rollout
dump. The temperature scheduler and length bias are off in both arms. The budget ranks prompts by
their own past accuracy and gives an unseen prompt rollout.n, so both arms train on 32 addition rows
(8 per step: each prompt comes back every 4 steps) instead of 2,000, which a 20-step run would see
once each (the budget would never act).
"""

from __future__ import annotations

from rlec.experiments import keys as K
from rlec.experiments.spec import Arm, Curve, Experiment, all_wrong_share, metric_curve, shared_settings

_E3_ONLY_BUDGET = (f"{K.OVERLAY}=e3", f"{K.E3_TEMPERATURE}=false", f"{K.E3_LENGTH_BIAS}=false")

EXPERIMENT = Experiment(
    name="e3_budget",
    claim="the dynamic budget lowers the share of all-wrong groups at the same total rollouts",
    paper="E3, arXiv 2505.18573: Sec. 3.2 (dynamic rollout budget)",
    arms=(
        Arm("fixed_n", "every prompt gets rollout.n = 8", (*_E3_ONLY_BUDGET, f"{K.E3_BUDGET}=false")),
        Arm("dynamic", "per-prompt n in [4, 16] by difficulty rank, sum = 8 x prompts",
            (*_E3_ONLY_BUDGET, f"{K.E3_BUDGET}=true", f"{K.E3_N_MIN}=4", f"{K.E3_N_MAX}=16")),
    ),
    # 32 rows are 4 steps of 8 prompts: verl's loop ends after trainer.total_epochs passes over the data whatever
    # trainer.total_training_steps says (a 1-epoch run stopped at step 4), so 5 epochs cover the 20 steps
    settings=shared_settings(**{"trainer.total_epochs": 5}),
    data="binary",
    curves=(Curve("all_wrong_share", "share of all-wrong groups (rollout dump)", all_wrong_share),
            metric_curve(K.M_ROLLOUT_N_MAX, "largest per-prompt n (e3/rollout_n/max)")),
    steps=20,
    train_rows=32,
    # --quick: 4 rows of 4 prompts a step, so every prompt comes back at step 2 and the budget acts at steps 2-3
    quick_steps=3,
    quick_train_rows=4,
)
