"""RLEC's own claims (issue 33, item 4): the b schedule vs fixed b, and the mean-only vs std-normalised advantage.

1. The seed says the linear b schedule (0 -> 1) "improves training stability": the spread across seeds
   of the grad norm and of the reward, per arm, against fixed b = 0 and fixed b = 1.
2. The seed says dividing the GRPO advantage by the group's std erases the target-dependent gaps: the
   held-out coverage gap between p = 0.1 and p = 0.8 (greedy, as ``make demo``) with the mean-only
   advantage (the schedule arm) against the std-normalised one.
Data: the demo's additions at targets 0.1 / 0.8 (RLEC's reward R_p^(b)).
"""

from __future__ import annotations

from rlec.experiments import keys as K
from rlec.experiments.spec import Arm, Experiment, HeldOut, coverage_at, coverage_gap, metric_curve, shared_settings

EXPERIMENT = Experiment(
    name="rlec",
    claim="the b schedule is more stable across seeds than fixed b; the mean-only advantage keeps the coverage gap",
    paper="RLEC (this project's seed): the b schedule and the mean-only advantage (README, 'The algorithm')",
    arms=(
        Arm("schedule", "b linear 0 -> 1, mean-only GRPO advantage (RLEC's recipe)", ()),
        Arm("b0", "b fixed at 0", (f"{K.B_START}=0.0", f"{K.B_END}=0.0")),
        Arm("b1", "b fixed at 1", (f"{K.B_START}=1.0", f"{K.B_END}=1.0")),
        Arm("std_norm", "b schedule, advantage divided by the group's std", (f"{K.NORM_BY_STD}=true",)),
    ),
    settings=shared_settings(),
    data="targets",
    curves=(metric_curve(K.M_REWARD, "reward (critic/score/mean)"), metric_curve(K.M_GRAD_NORM, "grad norm (actor/grad_norm)")),
    heldout=HeldOut(targets=(0.1, 0.8), n_samples=1, temperature=0.0,
                    figures={"coverage p=0.1": coverage_at(0), "coverage p=0.8": coverage_at(1), "coverage gap": coverage_gap(0, 1)}),
    seed_spread=(K.M_GRAD_NORM, K.M_REWARD),
    steps=16,
    quick_steps=2,
)
