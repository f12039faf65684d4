"""Selective-prediction metrics of a target sweep: coverage, selective accuracy, RLEC score, AURC/AOC.

Definitions (``docs/metrics.md`` has them with worked examples). For one group of records (a
source, or all) at one target p, with n records, c correct, w incorrect, a abstentions:

    coverage            = (c + w) / n          (El-Yaniv & Wiener 2010: coverage)
    selective accuracy  = c / (c + w)          (1 - selective risk, ibid.; undefined at coverage 0)
    accuracy            = c / n
    abstention rate     = a / n
    reward              = mean of R_p^(1)(outcome) = ((1-p) c - p w) / n   (rlec.reward.formula, b = 1)
    compliance          = selective accuracy - p
    hallucination rate  = w / n                (wrong answers among all records; Behaviorally Calibrated RL, arXiv 2512.19920)
    hallucination / abstention = w / a;  accuracy / hallucination = c / w   (undefined at a = 0 / w = 0)
    RiskEval utility    = (c - lambda w) / n, lambda = p / (1 - p)   (arXiv 2601.07767; = the RLEC reward at b = 0)

Headlines: accuracy on the binary prompt; RLEC score = mean over the targets with a stated p of
the per-target reward; AURC = trapezoidal area under the risk-coverage curve traced by the
target sweep (Geifman & El-Yaniv 2017 trace one operating point per confidence threshold; here
there is one per target; AURC as a named figure: Geifman, Uziel & El-Yaniv 2019), closed as
described in :func:`risk_coverage_curve`; AOC = 1 - AURC.

Everything works on count arrays whose last axis is ``COUNT_FIELDS`` (n, correct, incorrect,
abstain, reward sum), so the same code serves point estimates and bootstrap replicates
(leading axes broadcast). Undefined values are NaN here and null in JSON.

pass@k (records drawn with ``--n-samples N``): for a question with n samples at a target, c of
them correct, the unbiased estimate 1 - C(n - c, k) / C(n, k) (Chen et al. 2021, Eq. 1;
:func:`rlec.algorithms.passk.pass_at_k`), averaged over the questions with n >= k. Abstentions
are not correct. :func:`rlec.eval.bootstrap.pass_at_k_figures` adds question-level bootstrap intervals.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from rlec.algorithms.passk import pass_at_k_array

COUNT_FIELDS = ("n", "correct", "incorrect", "abstain", "reward_sum")
N, C, W, A, R = range(5)
RATE_NAMES = ("coverage", "selective_accuracy", "accuracy", "abstention_rate", "reward", "compliance", "hallucination_rate",
              "hallucination_to_abstention", "accuracy_to_hallucination", "riskeval_utility")
HEADLINE_NAMES = ("accuracy", "rlec_score", "aoc", "aurc")


def ratio_or_nan(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """``num / den`` elementwise (arrays broadcast), NaN where ``den <= 0`` (an undefined rate)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)


def rates(counts: np.ndarray, target_p: Sequence[float | None]) -> dict[str, np.ndarray]:
    """Per-target rates from counts.

    Args:
        counts: float array (..., T, 5) over ``COUNT_FIELDS``.
        target_p: T targets (None = the binary prompt, taken as p = 0 for compliance).

    Returns:
        ``RATE_NAMES`` -> arrays (..., T); NaN where undefined (no records, or nothing answered
        for selective accuracy and compliance).
    """
    counts = np.asarray(counts, dtype=np.float64)
    n, c, w, a, r = (counts[..., k] for k in range(5))
    p = np.array([0.0 if t is None else float(t) for t in target_p])
    sel = ratio_or_nan(c, c + w)
    return {
        "coverage": ratio_or_nan(c + w, n),
        "selective_accuracy": sel,
        "accuracy": ratio_or_nan(c, n),
        "abstention_rate": ratio_or_nan(a, n),
        "reward": ratio_or_nan(r, n),
        "compliance": sel - p,
        "hallucination_rate": ratio_or_nan(w, n),
        "hallucination_to_abstention": ratio_or_nan(w, a),
        "accuracy_to_hallucination": ratio_or_nan(c, w),
        "riskeval_utility": ratio_or_nan(c - (p / (1.0 - p)) * w, n),
    }


def risk_coverage_curve(coverage: np.ndarray, selective_risk: np.ndarray, accuracy: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The closed risk-coverage curve of a target sweep, as (coverage, risk) points for the trapezoid.

    Args:
        coverage, selective_risk, accuracy: 1-D arrays over the swept targets (one entry per
            target with a stated p; NaN coverage = no records at that target, ignored).

    Returns:
        (x, y): coverage ascending from 0 to 1, risk at each. Construction:

        1. one point (coverage, 1 - selective accuracy) per target with coverage > 0;
           targets with equal coverage merge into one point at the mean of their risks;
        2. right end: (1, 1 - accuracy) of the target with the largest coverage (mean over
           ties): abstentions at the least selective operating point count as errors when the
           curve is closed at full coverage; when that coverage is 1 this is the last point;
        3. left end: (0, risk of the lowest-coverage point) (the curve is flat below it).

        With no target answered at all the curve is flat at risk 1. With no targets at all,
        both arrays are empty.
    """
    cov = np.asarray(coverage, dtype=np.float64)
    valid = ~np.isnan(cov)
    if not valid.any():
        return np.array([]), np.array([])
    cov, risk, acc = cov[valid], np.asarray(selective_risk, dtype=np.float64)[valid], np.asarray(accuracy, dtype=np.float64)[valid]
    end_risk = 1.0 - float(np.mean(acc[cov == cov.max()]))
    answered = cov > 0
    xs, inverse = np.unique(cov[answered], return_inverse=True)
    ys = np.bincount(inverse, weights=risk[answered], minlength=len(xs)) / np.maximum(np.bincount(inverse, minlength=len(xs)), 1)
    if len(xs) == 0 or xs[-1] < 1.0:
        xs, ys = np.append(xs, 1.0), np.append(ys, end_risk)
    return np.insert(xs, 0, 0.0), np.insert(ys, 0, ys[0])


def aurc(coverage: np.ndarray, selective_risk: np.ndarray, accuracy: np.ndarray) -> float:
    """Area under the closed risk-coverage curve of :func:`risk_coverage_curve` (trapezoidal).

    Returns:
        AURC in [0, 1] (lower is better; 1 - accuracy for a model that always answers; 1 for one
        that never answers); NaN when there are no targets with records.
    """
    x, y = risk_coverage_curve(coverage, selective_risk, accuracy)
    return float(np.trapezoid(y, x)) if len(x) else float("nan")


def headlines(counts: np.ndarray, target_p: Sequence[float | None]) -> dict[str, np.ndarray]:
    """Headline figures from per-target counts.

    Args:
        counts: float array (..., T, 5) over ``COUNT_FIELDS``.
        target_p: T targets; None = the binary prompt (at most one).

    Returns:
        ``HEADLINE_NAMES`` -> arrays (...,): ``accuracy`` (binary prompt; NaN without one),
        ``rlec_score`` (mean reward over the targets with a stated p that have records; NaN
        without any), ``aurc`` and ``aoc = 1 - aurc``.
    """
    counts = np.asarray(counts, dtype=np.float64)
    r = rates(counts, target_p)
    binary = [i for i, t in enumerate(target_p) if t is None]
    swept = [i for i, t in enumerate(target_p) if t is not None]
    lead = counts.shape[:-2]
    accuracy = r["accuracy"][..., binary[0]] if binary else np.full(lead, np.nan)
    if swept:
        rewards = r["reward"][..., swept]
        with np.errstate(invalid="ignore"):
            have = ~np.isnan(rewards)
            score = np.where(have.any(-1), np.nansum(rewards, -1) / np.maximum(have.sum(-1), 1), np.nan)
        cov = r["coverage"][..., swept].reshape(-1, len(swept))
        risk = 1.0 - r["selective_accuracy"][..., swept].reshape(-1, len(swept))
        acc = r["accuracy"][..., swept].reshape(-1, len(swept))
        area = np.array([aurc(cov[i], risk[i], acc[i]) for i in range(cov.shape[0])]).reshape(lead)
    else:
        score = area = np.full(lead, np.nan)
    return {"accuracy": accuracy, "rlec_score": score, "aoc": 1.0 - area, "aurc": area}


def default_ks(max_samples: int) -> list[int]:
    """k = 1, 2, 4, ... up to ``max_samples``, plus ``max_samples`` itself (empty for 0 samples)."""
    ks = [k for k in (2**i for i in range(max(int(max_samples), 1).bit_length())) if k <= max_samples]
    return ks + ([int(max_samples)] if max_samples >= 1 and ks[-1:] != [int(max_samples)] else [])


def pass_at_k_by_question(per_question: np.ndarray, ks: Sequence[int]) -> np.ndarray:
    """Each question's unbiased pass@k per target.

    Args:
        per_question: float array (Q, T, 5) over ``COUNT_FIELDS`` (n = samples, correct).
        ks: the K values of k (>= 1).

    Returns:
        float array (Q, T, K); NaN where the question has fewer than k samples at that target.
    """
    counts = np.asarray(per_question, dtype=np.float64)
    return np.stack([pass_at_k_array(counts[..., N], counts[..., C], int(k)) for k in ks], axis=-1)
