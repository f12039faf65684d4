"""RLEC's own claim (ii): the linear b schedule vs fixed b = 0 and fixed b = 1 (issue 57 item 8).

The seed says the b schedule (0 -> 1) "improves training stability". Measured as collapse events: a run of >= 20
steps in which the training coverage is below 0.05 at both targets, or above 0.95 at both (the policy answers
nothing, or everything, whatever the target); fewer with the schedule than with either fixed b (paired per seed).
Secondary: the spread of the final score over seeds: per arm the SD over seeds of each seed's final reward
(``critic/score/mean`` over the last 20% of the steps), and per comparison the ratio of the two SDs with the
Pitman-Morgan test for paired samples (:func:`rlec.experiments.report.spread_ratio`: the arms share seeds). Data: the demo's additions at targets 0.1 / 0.8
(RLEC's reward R_p^(b)), the mean-only advantage of RLEC's recipe in every arm. No premise gate: the claim is
RLEC's own, and zero collapse events in every arm is a result (not reproduced).
"""

from __future__ import annotations

from rlec.experiments import keys as K
from rlec.experiments.rlec_advantage import TARGET_CURVES, TARGET_HELDOUT
from rlec.experiments.spec import Arm, Experiment, PaperSetting, Primary, collapse_events, common_paper_settings, shared_settings

STEPS = 300
_B_KEYS = ("rlec.schedule",)  # start_value / end_value: the b of R_p^(b)

EXPERIMENT = Experiment(
    name="rlec_schedule",
    claim="the b schedule has fewer collapse events than fixed b = 0 or b = 1",
    paper="RLEC (this project's seed): the b schedule (README, 'The algorithm')",
    arms=(
        Arm("schedule", "b linear 0 -> 1, mean-only GRPO advantage (RLEC's recipe)", ()),
        Arm("b0", "b fixed at 0", (f"{K.B_START}=0.0", f"{K.B_END}=0.0"), keys=_B_KEYS),
        Arm("b1", "b fixed at 1", (f"{K.B_START}=1.0", f"{K.B_END}=1.0"), keys=_B_KEYS),
    ),
    # RLEC's recipe: the mean-only advantage (not the papers' std-normalised GRPO of the other experiments)
    # 300 steps x 16 prompts over the 2,000 training rows: 3 passes (verl ends its loop after trainer.total_epochs)
    settings=shared_settings(**{K.NORM_BY_STD: False, "trainer.total_epochs": 3}),
    data="targets",
    curves=TARGET_CURVES,
    heldout=TARGET_HELDOUT,
    seed_spread=(K.M_REWARD,),
    steps=STEPS,
    quick_steps=2,
    baseline="b0",
    comparisons=(("schedule", "b0"), ("schedule", "b1")),
    primary=Primary("collapse events (>= 20 steps with training coverage < 0.05 or > 0.95 at both targets)",
                    collapse_events(K.M_COVERAGE_LOW, K.M_COVERAGE_HIGH), -1,
                    requires=(K.M_COVERAGE_LOW, K.M_COVERAGE_HIGH), effect=1.0,
                    sd_source="none measured (16-step runs cannot hold a 20-step event); the final-score spread's F-test "
                              "needs 6 seeds for a 4x SD ratio at 80% power (LAB.md)"),
    seeds=6,
    paper_settings=(
        *common_paper_settings("RLEC's recipe (greedy evaluation)"),
        PaperSetting("advantage divided by the group's std", "no: mean-only (RLEC's recipe)", "False", (K.NORM_BY_STD,)),
        PaperSetting("learning rate", "1e-4 and 3e-4 (LAB.md: both)", "0.0001", (K.LR,), "rerun with --lr 3e-4 as a second experiment"),
        PaperSetting("steps", "300 (LAB.md)", str(STEPS)),
    ),
)
