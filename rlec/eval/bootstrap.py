"""Question-level bootstrap confidence intervals for the headline figures.

The unit of resampling is the question: all of a question's records (every target and sample)
stay together, because the targets of one question are strongly dependent (Efron & Tibshirani
1993, "An Introduction to the Bootstrap", Ch. 13, percentile intervals). With several sources the
resampling is stratified: each source's questions are resampled within the source, so a replicate
keeps the evaluation set's mix. A replicate is drawn as multiplicity weights per question, and the
headline figures are recomputed from the weighted counts (``rlec.eval.selective.headlines``).

Seeded: the same counts, seed and group name give the same intervals, whatever other groups exist.
"""

from __future__ import annotations

import hashlib
from typing import Sequence

import numpy as np

from rlec.eval.selective import HEADLINE_NAMES, headlines


def _rng(seed: int, group: str) -> np.random.Generator:
    salt = int.from_bytes(hashlib.sha256(group.encode()).digest()[:8], "little")
    return np.random.default_rng([int(seed), salt])


def replicate_weights(strata: np.ndarray, n_boot: int, rng: np.random.Generator) -> np.ndarray:
    """Multiplicity weights of ``n_boot`` stratified bootstrap replicates.

    Args:
        strata: int array (Q,): the stratum (source) of each question.
        n_boot: number of replicates B >= 1.
        rng: the random generator.

    Returns:
        float array (B, Q): how many times each question is drawn; each row sums, per stratum,
        to the stratum's size.
    """
    strata = np.asarray(strata)
    weights = np.zeros((n_boot, len(strata)))
    for s in np.unique(strata):
        idx = np.flatnonzero(strata == s)
        m = len(idx)
        draws = rng.integers(0, m, size=(n_boot, m)) + (np.arange(n_boot) * m)[:, None]
        weights[:, idx] = np.bincount(draws.ravel(), minlength=n_boot * m).reshape(n_boot, m)
    return weights


def bootstrap_headlines(
    per_question: np.ndarray,
    strata: np.ndarray,
    target_p: Sequence[float | None],
    *,
    n_boot: int = 1000,
    ci: float = 0.95,
    seed: int = 0,
    group: str = "all",
    chunk: int = 250,
) -> dict[str, tuple[float | None, float | None]]:
    """Percentile bootstrap intervals of ``HEADLINE_NAMES``.

    Args:
        per_question: float array (Q, T, 5): each question's counts per target
            (``rlec.eval.selective.COUNT_FIELDS``).
        strata: int array (Q,): stratum of each question (resampled within strata).
        target_p: T targets (None = the binary prompt).
        n_boot: replicates B (>= 1; 0 disables and returns (None, None) everywhere).
        ci: interval mass in (0, 1).
        seed: base seed; with ``group`` it seeds the generator.
        group: the group's name (so each group has its own, stable stream).
        chunk: replicates computed at once (bounds memory to chunk x Q weights).

    Returns:
        name -> (low, high); (None, None) where every replicate is undefined.

    Raises:
        ValueError: ``ci`` outside (0, 1) or negative ``n_boot``, or mismatched shapes.
    """
    if not 0 < ci < 1:
        raise ValueError(f"ci must be in (0, 1), got {ci!r}")
    if n_boot < 0:
        raise ValueError(f"n_boot must be >= 0, got {n_boot}")
    per_question = np.asarray(per_question, dtype=np.float64)
    if per_question.ndim != 3 or per_question.shape[0] != len(strata) or per_question.shape[1] != len(target_p):
        raise ValueError(f"per_question must be (Q={len(strata)}, T={len(target_p)}, 5), got {per_question.shape}")
    if n_boot == 0 or per_question.shape[0] == 0:
        return {name: (None, None) for name in HEADLINE_NAMES}
    rng = _rng(seed, group)
    samples: dict[str, list[np.ndarray]] = {name: [] for name in HEADLINE_NAMES}
    for start in range(0, n_boot, chunk):
        w = replicate_weights(strata, min(chunk, n_boot - start), rng)
        counts = np.einsum("bq,qtk->btk", w, per_question)
        for name, values in headlines(counts, target_p).items():
            samples[name].append(values)
    lo_q, hi_q = 100 * (1 - ci) / 2, 100 * (1 + ci) / 2
    out: dict[str, tuple[float | None, float | None]] = {}
    for name in HEADLINE_NAMES:
        values = np.concatenate(samples[name])
        values = values[~np.isnan(values)]
        out[name] = (float(np.percentile(values, lo_q)), float(np.percentile(values, hi_q))) if len(values) else (None, None)
    return out
