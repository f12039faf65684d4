"""E3's temperature scheduler (arXiv 2505.18573, Fig. 1 / Table 2): GRPO at a fixed T vs the scheduler vs scheduler + annealing.

The paper: under GRPO the policy entropy declines; the scheduler holds it near its target (the
first steps' mean entropy); annealing lowers the target after the anneal start; pass@16 is higher
with the scheduler. Here: entropy and temperature per step, held-out pass@1/4/8 (8 samples at
T = 1). E3's other parts (dynamic budget, length bias) are off in every arm, so only the temperature
differs. The target is the first step's entropy (``init_steps`` 1, the paper's "initial entropy"
measured on one step so a short run schedules from step 3 on).
"""

from __future__ import annotations

from rlec.experiments import keys as K
from rlec.experiments.spec import Arm, Experiment, HeldOut, metric_curve, pass_at, shared_settings

_E3_ONLY_TEMPERATURE = (f"{K.OVERLAY}=e3", f"{K.E3_BUDGET}=false", f"{K.E3_LENGTH_BIAS}=false", f"{K.E3}.temperature.init_steps=1")

EXPERIMENT = Experiment(
    name="e3",
    claim="the temperature scheduler holds the policy entropy up where GRPO lets it fall, and raises held-out pass@k",
    paper="E3, arXiv 2505.18573: Fig. 1 (entropy per step), Table 2 (pass@16)",
    arms=(
        Arm("grpo", "GRPO at fixed T = 1.0 (no E3)", ()),
        Arm("scheduler", "E3 temperature scheduler, no annealing", (*_E3_ONLY_TEMPERATURE, f"{K.E3_ANNEAL}=false")),
        Arm("scheduler_anneal", "E3 temperature scheduler + annealing (start 0.6, final factor 0.9)",
            (*_E3_ONLY_TEMPERATURE, f"{K.E3_ANNEAL}=true")),
    ),
    settings=shared_settings(),
    data="binary",
    curves=(metric_curve(K.M_ENTROPY, "policy entropy (nats, actor/entropy)"),
            metric_curve(K.M_TEMPERATURE, "rollout temperature (e3/temperature)")),
    heldout=HeldOut(targets=(None,), n_samples=8, temperature=1.0,
                    figures={"pass@1": pass_at(1), "pass@4": pass_at(4), "pass@8": pass_at(8)}),
    steps=20,
    quick_steps=3,
)
