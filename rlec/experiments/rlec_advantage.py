"""RLEC's own claim (i): the mean-only GRPO advantage vs the std-normalised one (issue 57 item 8).

The seed says dividing the GRPO advantage by the group's std erases the target-dependent gaps. Primary metric: the
per-question agreement with the ideal rule "answer iff q > p" (the calibration issue's
:func:`rlec.eval.calibration.decision_agreement`), held out at the two training targets 0.1 and 0.8; higher with the
mean-only advantage. Each held-out question is sampled :data:`HELDOUT_SAMPLES` times at T = 1 (the training
sampling) at p = 0.1, at p = 0.8 and at the binary prompt (no target): q_i is its accuracy over the answered binary
samples (the calibration module's q_i), a_i(p) its answered share at p, and its agreement the mean over the two
targets of a_i(p) where q_i > p and 1 - a_i(p) where not (the probability that one draw follows the rule). Secondary:
the held-out coverage gap between the training targets (coverage at 0.1 - coverage at 0.8), paired the same way.
Data: the demo's additions at targets 0.1 / 0.8, the b schedule of RLEC's recipe in both arms. No premise gate.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from rlec.experiments import keys as K
from rlec.experiments.spec import (Arm, Experiment, HeldOut, PaperSetting, Primary, Secondary, common_paper_settings,
                                   coverage_at, coverage_gap, heldout_mean, metric_curve, shared_settings)

AGREEMENT = "agreement"  # held-out figure: per question, agreement with "answer iff q > p" (rlec.eval.calibration)
COVERAGE_GAP = "coverage gap"
TARGETS = (0.1, 0.8)  # the training targets, where the held-out decisions are read
HELDOUT_SAMPLES = 16  # per question and prompt, at T = 1: q_i needs >= 2 binary-prompt samples (calibration issue)
STEPS = 200


def agreement(target_indices: Sequence[int], binary_index: int, grid: Sequence[float]) -> Callable[[np.ndarray, Sequence, Sequence], np.ndarray]:
    """Held-out figure: each question's agreement with "answer iff q_i > p", averaged over the targets ``grid``.

    Args:
        target_indices: the columns of the held-out count array (``HeldOut.targets`` order) of the targets ``grid``.
        binary_index: the column of the binary prompt, whose answered samples give q_i (correct / answered).
        grid: the targets p, in the order of ``target_indices``.

    Returns:
        ``figure(per_question, keys, records)`` -> array (Q,) in [0, 1]: the mean over the targets of
        :func:`rlec.eval.calibration.decision_agreement` (a_i(p) where q_i > p, else 1 - a_i(p)); NaN for a question
        with no answered binary sample (q_i undefined) or no record at a target.
    """
    def figure(per_question: np.ndarray, keys: Sequence, records: Sequence) -> np.ndarray:
        from rlec.eval.calibration import decision_agreement
        from rlec.eval.selective import C, N, W, ratio_or_nan

        pq = np.asarray(per_question, dtype=float)
        binary = pq[:, binary_index]
        q = ratio_or_nan(binary[:, C], binary[:, C] + binary[:, W])  # correct / answered
        sweep = pq[:, list(target_indices)]
        answer_rate = ratio_or_nan(sweep[..., C] + sweep[..., W], sweep[..., N])
        return decision_agreement(answer_rate, q, grid).mean(axis=1)  # NaN stays NaN
    return figure


def _heldout() -> HeldOut:
    """Sampled at T = 1 at both targets and the binary prompt (the binary prompt last, so coverage_at(0 / 1) reads the
    targets)."""
    targets: tuple[Any, ...] = (*TARGETS, None)
    return HeldOut(targets=targets, n_samples=HELDOUT_SAMPLES, temperature=1.0,
                   figures={AGREEMENT: agreement((0, 1), 2, TARGETS), "coverage p=0.1": coverage_at(0),
                            "coverage p=0.8": coverage_at(1), COVERAGE_GAP: coverage_gap(0, 1)})

# what both of RLEC's claims record (rlec_schedule too): training coverage at each target, reward, grad norm per step;
# held-out greedy coverage at the two training targets and its gap
TARGET_CURVES = (metric_curve(K.M_COVERAGE_LOW, "training coverage at p = 0.1"),
                 metric_curve(K.M_COVERAGE_HIGH, "training coverage at p = 0.8"),
                 metric_curve(K.M_REWARD, "reward (critic/score/mean)"),
                 metric_curve(K.M_GRAD_NORM, "grad norm (actor/grad_norm)"))
TARGET_HELDOUT = HeldOut(targets=(0.1, 0.8), n_samples=1, temperature=0.0,
                         figures={"coverage p=0.1": coverage_at(0), "coverage p=0.8": coverage_at(1),
                                  "coverage gap": coverage_gap(0, 1)})

EXPERIMENT = Experiment(
    name="rlec_advantage",
    claim="the mean-only advantage keeps the target-dependent behaviour that std normalisation erases",
    paper="RLEC (this project's seed): the mean-only advantage (README, 'The algorithm')",
    arms=(
        Arm("std_norm", "b schedule, advantage divided by the group's std", ()),
        Arm("mean_only", "b schedule, mean-only GRPO advantage (RLEC's recipe)", (f"{K.NORM_BY_STD}=false",)),
    ),
    # 200 steps x 16 prompts over the 2,000 training rows: 2 passes (verl ends its loop after trainer.total_epochs)
    settings=shared_settings(**{K.NORM_BY_STD: True, "trainer.total_epochs": 2}),
    data="targets",
    curves=TARGET_CURVES,
    heldout=_heldout(),
    steps=STEPS,
    quick_steps=2,
    baseline="std_norm",
    primary=Primary("per-question agreement with 'answer iff q > p' at targets 0.1 and 0.8 (held out, "
                    f"{HELDOUT_SAMPLES} samples at T = 1 per prompt, q from the binary prompt)",
                    heldout_mean(AGREEMENT), +1, requires=(f"held-out {AGREEMENT}",), effect=0.05,
                    sd_source="none measured (the calibration issue's metric is new)"),
    secondary=(Secondary("held-out coverage gap, p = 0.1 - p = 0.8 (sampled)", heldout_mean(COVERAGE_GAP)),),
    seeds=5,
    paper_settings=(
        *common_paper_settings("RLEC's recipe"),
        PaperSetting("baseline's advantage divided by the group's std", "yes (the std-normalised arm)", "True", (K.NORM_BY_STD,)),
        PaperSetting("steps", "80 and 200 (LAB.md)", str(STEPS), note="make demo reaches a coverage gap of 0.32 at 80 x 16 x 8"),
        PaperSetting("held-out decisions and q_i", "the calibration issue (56): q_i from N >= 2 binary-prompt samples, "
                     "the decisions at each target", f"{HELDOUT_SAMPLES} samples at T = 1 at p = 0.1, p = 0.8 and the binary prompt",
                     note="sampled as trained (the old design read greedy decisions): the agreement is the chance one "
                          "draw follows the rule"),
    ),
)
