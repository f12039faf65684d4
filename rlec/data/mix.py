"""Selection, the held-out math slice, repeats, targets and the binary / RLEC objective split.

All randomness comes from named streams of one seed (:func:`stream`), so changing, say, the
number of repeats does not change which questions were selected.

Training set (defaults in :class:`MixConfig`)::

    for each source: select min(train_size, available) questions            (stream "select/<src>")
    for r in 0 .. repeats-1, for each source separately:
        exactly round(binary_fraction * n) questions get the binary objective (p = 0, no target
        in the prompt); the others get the RLEC objective with p uniform on the 0.01 grid of
        [target_min, target_max] without 0 (0.01 .. 0.90 by default)        (stream "targets/<src>/<r>")

The grid is what the prompt can state (it shows p with 2 decimals), so prompt and reward use the
same p, every stated value is equally likely, and p = 0 stays reserved for the binary objective
(``build_messages(task_text, target_p or None)`` renders every row's prompt).
    shuffle all rows                                                         (stream "shuffle")

Evaluation set: every question once, binary prompt (objective "binary", p = 0.0, repeat 0); the
evaluator expands the target grid from ``task_text``.
"""

from __future__ import annotations

import math
import random
import zlib
from dataclasses import dataclass
from typing import Sequence, TypeVar, overload

import numpy as np

from rlec.reward.formula import check_target

T = TypeVar("T")
BINARY, RLEC = "binary", "rlec"
TARGET_GRID = 100  # targets are multiples of 1/100
# every target the evaluator may state (0, 0.01, ..., 0.99): test prompts must fit at each of them
EVAL_TARGET_GRID: tuple[float, ...] = tuple(i / TARGET_GRID for i in range(TARGET_GRID))


@dataclass(frozen=True)
class MixConfig:
    """Counts and ratios of the mix (the command's options; defaults are the paper setting).

    Attributes:
        math_train_size, hotpot_train_size: questions selected for training from each source
            (all of them, with a warning, when a source has fewer).
        repeats: copies of each training question, each with freshly drawn targets.
        binary_fraction: share of training rows per source and repeat with the binary objective.
        target_min, target_max: range of the target p of RLEC rows, 0 <= min <= max < 1 (p is
            uniform on its 0.01 grid, 0 excluded: see :func:`target_grid`).
        math_test_size: held-out math questions, at most ``math_test_max_fraction`` of the pool.
        hotpot_test_size: HotpotQA test questions kept (None: all of the test file).
        seed: the one seed of every random choice.
    """

    math_train_size: int = 15_000
    hotpot_train_size: int = 15_000
    repeats: int = 5
    binary_fraction: float = 0.1
    target_min: float = 0.0
    target_max: float = 0.9
    math_test_size: int = 500
    math_test_max_fraction: float = 0.2
    hotpot_test_size: int | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        if min(self.math_train_size, self.hotpot_train_size, self.math_test_size) < 0 or self.repeats < 1:
            raise ValueError(f"sizes must be >= 0 and repeats >= 1, got {self}")
        if self.hotpot_test_size is not None and self.hotpot_test_size < 0:
            raise ValueError(f"hotpot_test_size must be >= 0, got {self.hotpot_test_size}")
        for name in ("binary_fraction", "math_test_max_fraction"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {getattr(self, name)}")
        check_target(self.target_min)
        check_target(self.target_max)
        if self.target_min > self.target_max:
            raise ValueError(f"target_min {self.target_min} > target_max {self.target_max}")
        lo, hi = target_grid(self.target_min, self.target_max)
        if lo > hi and self.binary_fraction < 1.0:
            raise ValueError(f"no target other than 0 on the 0.01 grid of [{self.target_min}, {self.target_max}]")


@dataclass(frozen=True, slots=True)
class Question:
    """A question ready for prompting: task text (rlec.prompts), gold, paragraph-drop record."""

    source: str
    question_id: str
    task_text: str
    gold: str
    drop_scheme: str = ""
    dropped_titles: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Sample:
    """One output row before rendering: a question with its split, repeat, objective and p."""

    question: Question
    split: str
    repeat: int
    objective: str
    target_p: float

    @property
    def prompt_target(self) -> float | None:
        """The target as passed to ``build_messages``: None for the binary objective."""
        return None if self.objective == BINARY else self.target_p


def stream(seed: int, name: str) -> np.random.Generator:
    """An independent RNG for one named purpose of a run (seed and name fix it)."""
    return np.random.default_rng([seed, zlib.crc32(name.encode())])


def draw_without_replacement(items: Sequence[T], n: int, rng: np.random.Generator) -> list[T]:
    """``min(n, len(items))`` items drawn without replacement, in drawn order."""
    order = rng.permutation(len(items))[: min(n, len(items))]
    return [items[i] for i in order]


def math_test_count(pool_size: int, size: int, max_fraction: float) -> int:
    """Held-out math questions: ``min(size, floor(max_fraction * pool_size))``.

    With the defaults (500, 0.2): 8 of the 42 shipped sample problems (34 left for training);
    500 of DAPO-Math-17k's ~17k unique problems (leaving ~16.5k for the 15,000 training questions).
    """
    return min(size, math.floor(max_fraction * pool_size))


def split_held_out(items: Sequence[T], n_test: int, rng: np.random.Generator) -> tuple[list[T], list[T]]:
    """Split ``items`` into (train pool, held-out) with ``n_test`` held out, both in input order."""
    held = set(rng.permutation(len(items))[:n_test].tolist())
    return [it for i, it in enumerate(items) if i not in held], [it for i, it in enumerate(items) if i in held]


def target_grid(lo: float, hi: float) -> tuple[int, int]:
    """The RLEC targets allowed in [lo, hi], as a range of hundredths ``(first, last)``, 0 excluded.

    ``first > last`` means there is none (e.g. lo = hi = 0).
    """
    return max(1, math.ceil(round(lo * TARGET_GRID, 6))), math.floor(round(hi * TARGET_GRID, 6))


@overload
def draw_targets(rng: random.Random, lo: float, hi: float) -> float: ...
@overload
def draw_targets(rng: np.random.Generator, lo: float, hi: float, size: int) -> np.ndarray: ...


def draw_targets(rng: random.Random | np.random.Generator, lo: float, hi: float, size: int | None = None) -> float | np.ndarray:
    """Target p uniform on the 0.01 grid of [lo, hi] without 0 (:func:`target_grid`): the one draw of an RLEC row's p.

    The caller's generator draws the grid index, so each caller's stream stays its own: numpy's
    ``Generator.integers`` for ``size`` draws at once (data preparation, :func:`draw_objectives`), Python's
    ``random.Random.randint`` for one (RLVE's per-row generators, :class:`rlec.environments.EnvironmentSource`).

    Args:
        rng: the generator.
        lo, hi: the range of p, 0 <= lo <= hi < 1 (checked with the settings that hold them).
        size: the number of draws (numpy only); None: one draw from a ``random.Random``.

    Returns:
        One p (a float) without ``size``, else a float array (size,); 0.0 when the grid is empty (lo = hi = 0).

    Raises:
        TypeError: ``size`` with a ``random.Random``, or no ``size`` with a numpy generator.
    """
    first, last = target_grid(lo, hi)
    if isinstance(rng, np.random.Generator):
        if size is None:
            raise TypeError("draw_targets: a numpy generator draws size targets at once; pass size")
        return rng.integers(first, last + 1, size=size) / TARGET_GRID if first <= last else np.zeros(size)
    if size is not None:
        raise TypeError(f"draw_targets: size={size} needs a numpy generator, got {type(rng).__name__}")
    return rng.randint(first, last) / TARGET_GRID if first <= last else 0.0


def draw_objectives(n: int, binary_fraction: float, lo: float, hi: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Objectives and targets for ``n`` rows of one source and repeat.

    Returns:
        (is_binary: bool array (n,), exactly ``floor(binary_fraction * n + 0.5)`` True;
         target_p: float array (n,), 0.0 where binary, else :func:`draw_targets`).
    """
    n_binary = math.floor(binary_fraction * n + 0.5)
    is_binary = np.zeros(n, dtype=bool)
    is_binary[rng.permutation(n)[:n_binary]] = True
    p = draw_targets(rng, lo, hi, size=n)
    p[is_binary] = 0.0
    return is_binary, p


def training_samples(questions: dict[str, list[Question]], cfg: MixConfig) -> list[Sample]:
    """Expand the selected questions into repeats x objectives, then shuffle.

    Args:
        questions: selected training questions per source (source name -> questions).
        cfg: the mix settings.

    Returns:
        ``repeats * sum(len(q))`` samples in shuffled order.
    """
    samples: list[Sample] = []
    for src in sorted(questions):
        qs = questions[src]
        for r in range(cfg.repeats):
            is_binary, p = draw_objectives(len(qs), cfg.binary_fraction, cfg.target_min, cfg.target_max, stream(cfg.seed, f"targets/{src}/{r}"))
            samples.extend(
                Sample(q, "train", r, BINARY if b else RLEC, float(pv)) for q, b, pv in zip(qs, is_binary.tolist(), p.tolist())
            )
    order = stream(cfg.seed, "shuffle").permutation(len(samples))
    return [samples[i] for i in order]


def evaluation_samples(questions: Sequence[Question]) -> list[Sample]:
    """One binary sample per evaluation question, in the given order."""
    return [Sample(q, "test", 0, BINARY, 0.0) for q in questions]
