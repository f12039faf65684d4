"""Pass@k Training (arXiv 2508.10751, Fig. 7 / Table 1): pass@1 vs pass@k (k = 4) vs pass@k then pass@1.

The paper: under pass@1 training entropy collapses and pass@k stalls; pass@k training keeps entropy
high and raises pass@k; pass@k then pass@1 gives the best pass@1. Here: entropy per step, held-out
pass@1 / pass@4 (8 samples at T = 1). The switch arm trains pass@k for the first half of the steps,
then pass@1 from those weights for the rest (two launches; the optimizer state restarts at the switch,
the one difference from the other arms, because rlec refuses a resume that changes the advantage).
"""

from __future__ import annotations

from rlec.experiments import keys as K
from rlec.experiments.spec import Arm, Curve, Experiment, HeldOut, metric_curve, pass_at, shared_settings

_PASSK = (f"{K.OVERLAY}=passk", f"{K.PASSK_K}=4")

EXPERIMENT = Experiment(
    name="passk",
    claim="pass@k training keeps entropy and held-out pass@k up; pass@k then pass@1 gives the best pass@1",
    paper="Pass@k Training, arXiv 2508.10751: Fig. 7 (entropy, pass@k per step), Table 1",
    arms=(
        Arm("pass1", "pass@1: RLEC's mean-only GRPO advantage", ()),
        Arm("passk", "pass@k advantage, k = 4 (rlec_passk)", _PASSK),
        Arm("passk_then_pass1", "pass@k (k = 4) for the first half, then pass@1", _PASSK, then=(), switch_fraction=0.5),
    ),
    settings=shared_settings(),
    data="binary",
    curves=(metric_curve(K.M_ENTROPY, "policy entropy (nats, actor/entropy)"),
            Curve("passk/active_k", "k of the advantage (passk/active_k; pass@1 = 1)",
                  lambda run: [float(row.get(K.M_ACTIVE_K, 1.0)) for row in run.metrics])),
    heldout=HeldOut(targets=(None,), n_samples=8, temperature=1.0, figures={"pass@1": pass_at(1), "pass@4": pass_at(4)}),
    steps=20,
    quick_steps=4,  # 2 + 2 in the switch arm
)
