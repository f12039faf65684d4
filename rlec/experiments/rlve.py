"""RLVE's adaptive difficulty (arXiv 2511.07317, Sec. 2.2 / Fig. 4): adaptive vs a low static vs a wide static range.

The paper: adaptive difficulty beats every static range, and the effective prompt ratio (the share of
prompts whose group rewards are not all equal) falls to 0 under a low static cap while adaptive
difficulty keeps it highest. Here, on rlec's ``addition`` environment (the warm start's own additions in
its own phrasing, ``What is a + b?``; difficulty d = operands of d + 1 digits), environment rows only,
every prompt at target p = 0.01: R_0.01 is plain correctness but for a hundredth (correct ~1, wrong -0.01,
``I don't know`` 0). Why not the binary prompt (no target), as the paper's plain RLVR: the warm start saw
it in 10% of its data and answers it poorly (sampled, top-k 5: one-digit sums 0.72 right, two-digit
0.03), while at a stated target it is right on 0.75 of the one-digit and 0.47 of the two-digit sums and
on none of three digits: the spread RLVE's controller needs (measured on the shipped warm start, 64
problems a cell). The three arms share the controller's window (4): difficulty ~ U[max(0, h - 3), h];
adaptive starts at h = 0 and raises h when accuracy at h reaches 0.9; low static pins h = 0 (d = 0 only:
one-digit sums); wide static pins h = 3 (d uniform on 0..3: one- to four-digit sums). Held-out: accuracy
per difficulty on the fixed environment test set (16 problems per d, odd seeds), sampled (16 per problem, T = 1, the
training sampling), at the same target 0.01.

The new design (issue 57): baseline the low static arm; premise gate: its effective prompt ratio falls by >= 30%
(the saturation adaptive difficulty counters); primary metric: held-out accuracy at d = 1, the level above the low
static arm's range (:data:`PRIMARY_LEVEL` = :data:`LOW_STATIC_H` + 1; higher with adaptive difficulty). The problem stream follows the seed (``rlec.rlve.seed`` =
``data.seed``: before, every seed drew the same problems). Held-out gains need a warm start with graded accuracy
across levels (~0.95 / 0.6 / 0.2 / 0.03 at d = 0-3, LAB.md); the demo's is 0 at d >= 2. ``python -m
rlec.experiments.warm_levels`` measures candidate warm starts per level as this held-out evaluation samples them and
selects the one nearest that profile (``docs/results/rlve_warm_start.json``); a selected candidate other than the
demo's becomes this experiment's ``warm_start``.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from rlec.demo.verl_run import SEED
from rlec.experiments import keys as K
from rlec.experiments.core import ENVIRONMENTS
from rlec.experiments.spec import (Arm, Curve, Experiment, HeldOut, PaperSetting, Premise, Primary, common_paper_settings,
                                   effective_prompt_ratio, falls_by, heldout_mean, metric_curve, shared_settings)

ENV = ENVIRONMENTS[0]
LEVELS = (0, 1, 2, 3)
LOW_STATIC_H = 0  # the low static arm's pinned h: its range is d = 0 .. LOW_STATIC_H
PRIMARY_LEVEL = LOW_STATIC_H + 1  # the primary metric's level: the one above the low static arm's range
TARGET = 0.01  # every prompt's target p (module docstring: why not the binary prompt)
_RLVE = (f"{K.OVERLAY}=rlve", f"{K.RLVE_ENVIRONMENTS}=[{ENV}]", f"{K.TRAIN_FILES}=[]",
         f"{K.RLVE_WINDOW}=4",
         f"{K.RLVE_BINARY_FRACTION}=0.0", f"{K.RLVE_TARGET_MIN}={TARGET}", f"{K.RLVE_TARGET_MAX}={TARGET}",
         f"{K.RLVE_SEED}=${{{SEED}}}")  # the problem stream follows the seed (Hydra interpolation, resolved per launch)


# the arm's setting: the controller's difficulty entry, and the dataset's copy of it (data.rlve = ${rlec.rlve})
_DIFFICULTY = (K.RLVE_DIFFICULTY, f"data.rlve.{K.RLVE_DIFFICULTY.rpartition('.')[2]}")


def _pinned(level: int) -> str:
    # ++: the overlay's difficulty is {} (no environment named), so the entry is added, not overridden
    return f"++{K.RLVE_DIFFICULTY}.{ENV}={{initial:{level},maximum:{level}}}"


def accuracy_at(level: int):
    """Held-out figure: each question's accuracy when it is at difficulty ``level`` (NaN for the others)."""
    def figure(per_question: np.ndarray, keys: Sequence[tuple[str, str]], records: Sequence[Any]) -> np.ndarray:
        from rlec.eval.selective import C, N

        cell = per_question[:, 0]
        at = np.array([source.endswith(f"/d{level}") for source, _ in keys])
        return np.where(at & (cell[:, N] > 0), cell[:, C] / np.maximum(cell[:, N], 1), np.nan)
    return figure


STEPS = 1000

EXPERIMENT = Experiment(
    name="rlve",
    claim="adaptive difficulty keeps the effective prompt ratio highest and beats a low static range on the level above it",
    paper="RLVE, arXiv 2511.07317: Sec. 2.2 (the controller), Fig. 4 (effective prompt ratio, static vs adaptive), sec. 4.1",
    arms=(
        Arm("low_static", f"h pinned at {LOW_STATIC_H}: d = 0 only (one-digit sums)", (*_RLVE, _pinned(LOW_STATIC_H)),
            keys=_DIFFICULTY),
        Arm("adaptive", "difficulty h from 0, raised at accuracy >= 0.9 (window 4)", _RLVE, keys=_DIFFICULTY),
        Arm("wide_static", "h pinned at 3: d uniform on 0..3 (one- to four-digit sums)", (*_RLVE, _pinned(3)), keys=_DIFFICULTY),
    ),
    settings=shared_settings(),
    data="environments",
    curves=(Curve("effective_prompt_ratio", "effective prompt ratio (groups with a right and a not-right response)", effective_prompt_ratio),
            metric_curve(K.rlve_difficulty_metric(ENV), f"difficulty h ({K.rlve_difficulty_metric(ENV)})"),
            metric_curve(K.M_CLIPFRAC, "clipped share (actor/pg_clipfrac)")),
    heldout=HeldOut(targets=(TARGET,), n_samples=16, temperature=1.0, figures={f"accuracy d={d}": accuracy_at(d) for d in LEVELS},
                    data="environments"),
    steps=STEPS,
    quick_steps=2,
    baseline="low_static",
    primary=Primary(f"held-out sampled accuracy at d = {PRIMARY_LEVEL} (16 samples at T = 1, mean over problems)",
                    heldout_mean(f"accuracy d={PRIMARY_LEVEL}"), +1, requires=(f"held-out accuracy d={PRIMARY_LEVEL}",), effect=0.10,
                    sd_source="none measured for this metric; the effective ratio's paired SD was 0.042 (docs/results/rlve.json)"),
    premise=Premise("the low static arm's effective prompt ratio falls by >= 30% (step 1 to the last 20% of steps)",
                    falls_by(effective_prompt_ratio, 0.3, "effective prompt ratio")),
    comparisons=(("adaptive", "low_static"), ("adaptive", "wide_static")),
    seeds=6,  # LAB.md: 6 per arm for the effective ratio at effect 0.10 (SD 0.042)
    paper_settings=(
        *common_paper_settings("RLVE (sec. 4.1)"),
        PaperSetting("clip ratio low / high", "0.2 / 0.2 (verl default)", "0.2 / 0.2", (K.CLIP_LOW, K.CLIP_HIGH)),
        PaperSetting("advantage divided by the group's std", "yes (GRPO)", "True", (K.NORM_BY_STD,)),
        PaperSetting("static ranges", "d ~ [0, 1], [0, 20], [0, 100]", "h pinned at 0 and at 3 (window 4)"),
        PaperSetting("model", "Qwen2.5-7B-Base on Sorting and Multiplication",
                     "the demo's warm start on addition: 0.74 / 0.54 / 0 / 0 at d = 0-3 sampled at p = 0.01, T = 1 "
                     "(docs/results/rlve_warm_start.json; LAB.md asks ~0.95 / 0.6 / 0.2 / 0.03)",
                     note="held-out gains need a model RL can move one level up: candidates are measured and selected by "
                          "python -m rlec.experiments.warm_levels"),
        PaperSetting("steps", "hundreds to thousands", str(STEPS)),
    ),
)
