"""Question-level bootstrap confidence intervals for the headline figures.

The unit of resampling is the question: all of a question's records (every target and sample)
stay together, because the targets of one question are strongly dependent (Efron & Tibshirani
1993, "An Introduction to the Bootstrap", Ch. 13, percentile intervals). With several sources the
resampling is stratified: each source's questions are resampled within the source, so a replicate
keeps the evaluation set's mix. A replicate is drawn as multiplicity weights per question, and the
headline figures are recomputed from the weighted counts (``rlec.eval.selective.headlines``);
pass@k per question (``rlec.eval.selective.pass_at_k_by_question``) is averaged with the same
weights (:func:`pass_at_k_figures`). This module reads :mod:`rlec.eval.selective`, never the reverse.

Seeded: the same counts, seed and group name give the same intervals, whatever other groups exist.
"""

from __future__ import annotations

import hashlib
import warnings
from typing import Sequence

import numpy as np

from rlec.eval.selective import HEADLINE_NAMES, ratio_or_nan, headlines, pass_at_k_by_question


def group_rng(seed: int, group: str) -> np.random.Generator:
    """The random stream of one group's replicates: seeded by ``seed`` and salted by the first 8 bytes of
    ``sha256(group)``, so a group's intervals do not depend on which other groups are drawn."""
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
    rng = group_rng(seed, group)
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


def _weighted_nanmean(values: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Mean over questions of (Q, T, K) values with (B, Q) weights, ignoring NaN -> (B, T, K)."""
    have = ~np.isnan(values)
    num = np.einsum("bq,qtk->btk", weights, np.where(have, values, 0.0))
    den = np.einsum("bq,qtk->btk", weights, have.astype(np.float64))
    return ratio_or_nan(num, den)


def pass_at_k_figures(
    per_question: np.ndarray,
    strata: np.ndarray,
    target_p: Sequence[float | None],
    ks: Sequence[int],
    *,
    n_boot: int = 1000,
    ci: float = 0.95,
    seed: int = 0,
    group: str = "all",
) -> list[dict]:
    """pass@k of a group of questions per target and k, with percentile bootstrap intervals.

    Resampling as in :func:`bootstrap_headlines` (questions within strata), with its own seeded
    stream per group (so adding pass@k leaves the headline intervals unchanged).

    Args:
        per_question: float array (Q, T, 5) over ``COUNT_FIELDS``.
        strata: int array (Q,): each question's stratum (source).
        target_p: T targets (None = the binary prompt).
        ks: values of k.
        n_boot: bootstrap replicates (0: no intervals).
        ci: interval mass in (0, 1).
        seed: base seed.
        group: the group's name (salts the random stream).

    Returns:
        One dict per (target, k): ``{"target_p", "k", "value", "ci_low", "ci_high", "n_questions"}``
        (``n_questions`` = questions with at least k samples; value None when there are none).
    """
    values = pass_at_k_by_question(per_question, ks)
    q = values.shape[0]
    point = _weighted_nanmean(values, np.ones((1, q)))[0]
    lo = hi = np.full_like(point, np.nan)
    if n_boot > 0 and q > 0:
        boots = _weighted_nanmean(values, replicate_weights(strata, n_boot, group_rng(seed, f"{group}/pass@k")))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # cells undefined in every replicate stay NaN
            lo = np.nanpercentile(boots, 100 * (1 - ci) / 2, axis=0)
            hi = np.nanpercentile(boots, 100 * (1 + ci) / 2, axis=0)
    have = (~np.isnan(values)).sum(axis=0)

    def num(x: float) -> float | None:
        return None if np.isnan(x) else float(x)

    return [
        {"target_p": t, "k": int(k), "value": num(point[i, j]), "ci_low": num(lo[i, j]), "ci_high": num(hi[i, j]),
         "n_questions": int(have[i, j])}
        for i, t in enumerate(target_p) for j, k in enumerate(ks)
    ]
