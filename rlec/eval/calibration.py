"""Per-question calibration of a target sweep: q_i, c_i, smECE / ECE / Brier / AUROC, decisions against "answer iff q > p".

RLEC claims the model answers exactly when its probability of being right exceeds the stated
target p. The figures here test that per question (definitions and sources: ``docs/metrics.md``,
section 3, "Per-question calibration"):

- **q_i**, question i's probability of being right: k_i correct of n_i >= 2 samples at the binary
  prompt (no target), point estimate k_i / n_i, Wilson score interval (:func:`wilson_interval`).
- **c_i**, the confidence the model's decisions imply (:func:`implied_confidence`): one decision
  per target (greedy), the largest grid p at which it still answers (0 if it never does);
  several (sampled), the area under its answer rate a_i(p) over p,
  sum_k a_i(p_k) (p_k - p_{k-1}) with p_{-1} = 0, which equals the greedy rule when the
  decisions are 0/1 and monotone. An exact threshold follower (answers iff q_i > p) has c_i = q_i
  up to the grid step (c_i is the largest grid p below q_i).
- **calibration of c against correctness** (:func:`calibration_scores`): smECE (Blasiok &
  Nakkiran 2024, ``relplot``), ECE with 10 equal-width bins (Guo et al. 2017), Brier score (Brier
  1950), AUROC (Mann-Whitney, ties count 1/2). Observations are (c_i, correct) pairs, one per
  binary-prompt record, weighted by counts so the same code serves bootstrap replicates.
- **decisions per target p** (:func:`decision_agreement`, :func:`decision_regret`,
  :func:`monotonicity_violations`): agreement with the ideal rule "answer iff q_i > p", the regret
  at b = 1 max(q_i - p, 0) - (q_i - p) a_i(p) (the RLEC reward at b = 1 pays q - p in
  expectation for answering, ``rlec.reward.formula``), and monotonicity violations
  max_{p' > p} (a_i(p') - a_i(p))^+ (answered at a higher target, abstained at a lower one).

Everything is numpy on per-question arrays (questions on the first axis); relplot is imported only
by :func:`smooth_ece`.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

ECE_BINS = 10
Q_BINS = (0.0, 0.25, 0.5, 0.75, 1.0)  # the q_i strata: [0, 0.25), [0.25, 0.5), [0.5, 0.75), [0.75, 1]
_ADDITION_ID = re.compile(r"^add-(\d+)\+(\d+)$")  # question ids of rlec.demo.data / the addition environment


def wilson_interval(correct: np.ndarray, n: np.ndarray, ci: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """Wilson score interval of a binomial proportion k / n (Wilson 1927; Brown, Cai & DasGupta 2001).

    Chosen over the Jeffreys interval because it is closed-form (numpy, no beta quantiles) with the
    same small-n coverage (Brown, Cai & DasGupta recommend either for n <= 40) and, unlike the Wald
    interval, it stays inside [0, 1] and has positive width at k = 0 and k = n, which is where most
    q_i of a model that has mastered or failed a question lie.

    Args:
        correct: k, array (Q,) of correct counts.
        n: array (Q,) of sample counts (>= 1).
        ci: interval mass in (0, 1).

    Returns:
        (low, high), arrays (Q,) in [0, 1].
    """
    from statistics import NormalDist

    k, n = np.asarray(correct, dtype=np.float64), np.asarray(n, dtype=np.float64)
    z = NormalDist().inv_cdf(0.5 + ci / 2)
    phat = k / n
    denom = 1 + z * z / n
    centre = (phat + z * z / (2 * n)) / denom
    half = z * np.sqrt(phat * (1 - phat) / n + z * z / (4 * n * n)) / denom
    return np.clip(centre - half, 0.0, 1.0), np.clip(centre + half, 0.0, 1.0)


def implied_confidence(answer_rate: np.ndarray, grid: Sequence[float], *, sampled: bool) -> np.ndarray:
    """c_i, the confidence a question's decisions over the target sweep imply.

    Args:
        answer_rate: array (Q, T) of a_i(p_k) in [0, 1] (share of question i's records at target
            p_k that answer), over the stated targets ``grid`` (ascending).
        grid: T stated targets, strictly ascending, in [0, 1).
        sampled: False (one decision per target): the largest p_k with a_i(p_k) > 0, 0 when none;
            True: the area sum_k a_i(p_k) (p_k - p_{k-1}), p_{-1} = 0.

    Returns:
        array (Q,) in [0, max(grid)].

    Raises:
        ValueError: an empty or non-ascending grid, or a shape that does not match it.
    """
    p = np.asarray(grid, dtype=np.float64)
    a = np.asarray(answer_rate, dtype=np.float64)
    if p.ndim != 1 or not len(p) or np.any(np.diff(p) <= 0):
        raise ValueError(f"grid must hold ascending stated targets, got {list(grid)}")
    if a.ndim != 2 or a.shape[1] != len(p):
        raise ValueError(f"answer_rate must be (Q, {len(p)}), got {a.shape}")
    if sampled:
        return a @ np.diff(p, prepend=0.0)
    answered = a > 0
    last = np.where(answered.any(axis=1), len(p) - 1 - np.argmax(answered[:, ::-1], axis=1), -1)
    return np.where(last >= 0, p[np.maximum(last, 0)], 0.0)


def decision_agreement(answer_rate: np.ndarray, q: np.ndarray, grid: Sequence[float]) -> np.ndarray:
    """Per-question agreement with the ideal rule "answer iff q_i > p" at each target.

    With one decision per target the value is 1 (the decision is the ideal one) or 0; with a
    sampled answer rate a it is the probability that one draw agrees: a where the ideal answers,
    1 - a where it abstains. At q_i = p the ideal abstains (answering earns q - p = 0 in
    expectation: both are optimal, and the strict rule is the one the issue states).

    Args:
        answer_rate: array (Q, T) in [0, 1].
        q: array (Q,) of q_i in [0, 1].
        grid: T targets p.

    Returns:
        array (Q, T) in [0, 1]; NaN rows where q_i is NaN (no answered sample).
    """
    a = np.asarray(answer_rate, dtype=np.float64)
    q = np.asarray(q, dtype=np.float64)[:, None]
    ideal = q > np.asarray(grid, dtype=np.float64)[None, :]
    return np.where(np.isnan(q), np.nan, np.where(ideal, a, 1.0 - a))


def decision_regret(answer_rate: np.ndarray, q: np.ndarray, grid: Sequence[float]) -> np.ndarray:
    """Per-question regret at b = 1: max(q_i - p, 0) - (q_i - p) a_i(p), in expected reward.

    The RLEC reward at b = 1 pays 1 - p / -p / 0 (right / wrong / abstain), so answering earns
    q - p in expectation; the ideal rule earns max(q - p, 0).

    Returns:
        array (Q, T) in [0, 1]; 0 for the ideal decision (and for either decision at q_i = p); NaN where q_i is NaN.
    """
    a = np.asarray(answer_rate, dtype=np.float64)
    gain = np.asarray(q, dtype=np.float64)[:, None] - np.asarray(grid, dtype=np.float64)[None, :]
    return np.maximum(gain, 0.0) - gain * a


def monotonicity_violations(answer_rate: np.ndarray) -> np.ndarray:
    """Per question and target, how far it answers more at a higher target: max_{k' > k} (a_{k'} - a_k)^+.

    With 0/1 decisions: 1 where the question is abstained at p_k but answered at some higher
    target, else 0. A question's overall violation is the maximum over its targets.

    Args:
        answer_rate: array (Q, T) over ascending targets.

    Returns:
        array (Q, T) in [0, 1] (the last target is always 0).
    """
    a = np.asarray(answer_rate, dtype=np.float64)
    later = np.full_like(a, -np.inf)
    if a.shape[1] > 1:
        later[:, :-1] = np.maximum.accumulate(a[:, ::-1], axis=1)[:, ::-1][:, 1:]
    return np.maximum(later - a, 0.0)


def observations(confidence: np.ndarray, correct: np.ndarray, n: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(confidence, label, count, question) rows: per question, its correct and its wrong records.

    Args:
        confidence: c_i, array (Q,).
        correct: correct binary-prompt records k_i, array (Q,).
        n: binary-prompt records n_i, array (Q,).

    Returns:
        four arrays (2Q,): confidence, label (1 / 0), count (k_i / n_i - k_i), question index.
    """
    c = np.asarray(confidence, dtype=np.float64)
    k, n = np.asarray(correct, dtype=np.float64), np.asarray(n, dtype=np.float64)
    q = np.arange(len(c))
    return np.concatenate([c, c]), np.concatenate([np.ones_like(c), np.zeros_like(c)]), np.concatenate([k, n - k]), np.concatenate([q, q])


def expected_calibration_error(conf: np.ndarray, label: np.ndarray, weight: np.ndarray, n_bins: int = ECE_BINS) -> np.ndarray:
    """ECE with ``n_bins`` equal-width bins on [0, 1] (bin b holds [b/n, (b+1)/n), the last also 1).

    ECE = sum_b (W_b / W) |mean confidence_b - accuracy_b| (Guo et al. 2017, Eq. 3; Naeini et al.
    2015), weighted by ``weight``.

    Args:
        conf, label: arrays (M,) of confidences in [0, 1] and 0/1 labels.
        weight: array (..., M) of non-negative weights (leading axes: bootstrap replicates).

    Returns:
        array (...); NaN where the total weight is 0.
    """
    conf = np.asarray(conf, dtype=np.float64)
    bins = np.minimum(np.floor(conf * n_bins + 1e-9), n_bins - 1).astype(int)
    onehot = np.zeros((len(conf), n_bins))
    onehot[np.arange(len(conf)), bins] = 1.0
    w = np.asarray(weight, dtype=np.float64)
    gap = (w * (conf - np.asarray(label, dtype=np.float64))) @ onehot  # (..., bins): sum of (c - y) per bin
    total = w.sum(axis=-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(total > 0, np.abs(gap).sum(axis=-1) / np.where(total > 0, total, 1.0), np.nan)


def brier_score(conf: np.ndarray, label: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """Weighted mean of (confidence - label)^2 (Brier 1950); NaN where the total weight is 0."""
    w = np.asarray(weight, dtype=np.float64)
    sq = (np.asarray(conf, dtype=np.float64) - np.asarray(label, dtype=np.float64)) ** 2
    total = w.sum(axis=-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(total > 0, (w * sq).sum(axis=-1) / np.where(total > 0, total, 1.0), np.nan)


def auroc(conf: np.ndarray, label: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """Area under the ROC curve of ``conf`` for ``label``: P(c of a right answer > c of a wrong one), ties 1/2.

    The Mann-Whitney form (Hanley & McNeil 1982), weighted: sum over positive i, negative j of
    w_i w_j [1(c_i > c_j) + 1/2 1(c_i = c_j)] / (W_pos W_neg).

    Returns:
        array (...) over the leading axes of ``weight``; NaN where either class has no weight
        (e.g. a stratum whose questions are all right).
    """
    conf = np.asarray(conf, dtype=np.float64)
    label = np.asarray(label, dtype=np.float64)
    w = np.asarray(weight, dtype=np.float64)
    values, index = np.unique(conf, return_inverse=True)
    onehot = np.zeros((len(conf), len(values)))
    onehot[np.arange(len(conf)), index] = 1.0
    pos = (w * label) @ onehot  # (..., V): positive weight at each distinct confidence
    neg = (w * (1.0 - label)) @ onehot
    below = np.cumsum(neg, axis=-1) - neg  # negative weight strictly below each value
    num = (pos * (below + 0.5 * neg)).sum(axis=-1)
    den = pos.sum(axis=-1) * neg.sum(axis=-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)


def smooth_ece(conf: np.ndarray, label: np.ndarray, count: np.ndarray) -> float:
    """smECE (SmoothECE, Blasiok & Nakkiran, ICLR 2024) with relplot's automatic bandwidth (``relplot.smECE``).

    relplot takes one row per observation, so each (confidence, label) row is repeated ``count``
    times (counts must be whole numbers: records, or records times bootstrap multiplicities).

    Returns:
        smECE in [0, 1]; NaN when there is no observation.
    """
    counts = np.rint(np.asarray(count, dtype=np.float64)).astype(int)
    if counts.sum() <= 0:
        return math.nan
    import relplot

    f = np.repeat(np.asarray(conf, dtype=np.float64), counts)
    y = np.repeat(np.asarray(label, dtype=np.float64), counts)
    return float(relplot.smECE(f, y))


def difficulty(source: str, question_id: str) -> str | None:
    """The difficulty stratum of a question, where the data names one: ``digits=D`` for an addition
    ``add-A+B`` (rlec.demo.data; D = the longer operand's digit count, visible in the prompt),
    ``level=dK`` for an environment source ``env/dK``; None otherwise."""
    m = _ADDITION_ID.match(question_id)
    if m:
        return f"digits={max(len(m.group(1)), len(m.group(2)))}"
    if "/" in source:
        level = source.rsplit("/", 1)[1]
        if re.fullmatch(r"d\d+", level):
            return f"level={level}"
    return None


def q_bin(q: float) -> str:
    """The q_i stratum of :data:`Q_BINS`: ``q=[0.25,0.5)``; the last bin is closed (``q=[0.75,1]``)."""
    edges = Q_BINS
    for lo, hi in zip(edges[:-2], edges[1:-1]):
        if lo <= q < hi:
            return f"q=[{lo:g},{hi:g})"
    return f"q=[{edges[-2]:g},{edges[-1]:g}]"


# --- figures of one run: per-question data, strata, bootstrap intervals ---------------------------------------------

CALIBRATION_NAMES = ("smece", "ece", "brier", "auroc", "agreement", "regret", "monotonicity")
DECISION_NAMES = ("agreement", "regret", "monotonicity_violations")
SMECE_BOOT_MAX = 200  # relplot's bandwidth search costs ~25 ms a call: smECE intervals use at most this many replicates


@dataclass(frozen=True)
class QuestionTable:
    """Per-question inputs of the calibration figures (Q questions, T stated targets ascending).

    Attributes:
        keys: (source, question_id) per question.
        strata: int array (Q,): each question's source index (the bootstrap resamples within it).
        grid: the T stated targets, ascending.
        counts: array (Q, T, 5) over ``rlec.eval.selective.COUNT_FIELDS`` at the stated targets.
        label_correct, label_n: arrays (Q,): the run's answers at the reference prompt (the binary
            prompt unless ``--q-target``), correct and answered (abstentions carry no label): the
            correctness c_i is calibrated against (0 / 0 without such records).
        q_correct, q_n: arrays (Q,) of the q_i samples, correct and answered (None: q_i not estimated).
        q_records: array (Q,) of the q_i samples drawn, answered or not (None: q_i not estimated).
    """

    keys: list[tuple[str, str]]
    strata: np.ndarray
    grid: list[float]
    counts: np.ndarray
    label_correct: np.ndarray
    label_n: np.ndarray
    q_correct: np.ndarray | None = None
    q_n: np.ndarray | None = None
    q_records: np.ndarray | None = None

    @property
    def answer_rate(self) -> np.ndarray:
        """a_i(p), array (Q, T); NaN where a question has no record at a target."""
        from rlec.eval.selective import ratio_or_nan

        return ratio_or_nan(self.counts[..., 1] + self.counts[..., 2], self.counts[..., 0])

    @property
    def sampled(self) -> bool:
        """Whether some question has several records at a stated target (c_i is then the answer-rate area)."""
        return bool((self.counts[..., 0] > 1).any())

    @property
    def q(self) -> np.ndarray | None:
        """q_i = k_i / n_i over the answered samples (None when not estimated; NaN for a question none of whose samples answers)."""
        from rlec.eval.selective import ratio_or_nan

        return None if self.q_correct is None else ratio_or_nan(self.q_correct, self.q_n)


def _interval(values: np.ndarray, ci: float) -> tuple[float | None, float | None]:
    values = np.asarray(values, dtype=np.float64)
    values = values[~np.isnan(values)]
    if not len(values):
        return None, None
    lo, hi = np.percentile(values, [100 * (1 - ci) / 2, 100 * (1 + ci) / 2])
    return float(lo), float(hi)


def _num(x: float) -> float | None:
    return None if x is None or np.isnan(x) else float(x)


def _weighted_mean(values: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """(Q, ...) values, (B, Q) weights -> (B, ...) weighted means over the questions where the value is
    defined (NaN values are left out; NaN where no weight remains)."""
    flat = values.reshape(values.shape[0], -1)
    have = ~np.isnan(flat)
    total = weights @ have
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(total > 0, (weights @ np.where(have, flat, 0.0)) / np.where(total > 0, total, 1.0), np.nan)
    return out.reshape((weights.shape[0],) + values.shape[1:])


def stratum_figures(table: QuestionTable, mask: np.ndarray, *, n_boot: int, ci: float, seed: int, name: str,
                    smece_boot: int = SMECE_BOOT_MAX) -> dict[str, Any]:
    """Calibration and decision figures of the questions in ``mask``, with question-level bootstrap intervals.

    Resampling as :func:`rlec.eval.bootstrap.replicate_weights` (questions within sources, all of
    a question's records together), seeded by ``seed`` and ``name``; smECE uses the first
    ``min(n_boot, smece_boot)`` replicates.

    Returns:
        ``{"n_questions", "n_observations", "label_accuracy" (right among the labelled answers), "headline": {name: {value, ci_low,
        ci_high}} over CALIBRATION_NAMES, "per_target": [...]}``; per target: ``target_p``,
        coverage and the decision rates of ``rlec.eval.selective.rates`` (hallucination rate,
        abstention rate, their ratio, RiskEval utility), agreement and regret (null without q_i,
        with intervals) and monotonicity violations.
    """
    from rlec.eval.bootstrap import group_rng, replicate_weights
    from rlec.eval.selective import rates

    idx = np.flatnonzero(mask)
    a = table.answer_rate[idx]
    c = implied_confidence(np.nan_to_num(a), table.grid, sampled=table.sampled)
    q = None if table.q is None else table.q[idx]
    conf, label, count, obs_q = observations(c, table.label_correct[idx], table.label_n[idx])
    per_q: dict[str, np.ndarray] = {"monotonicity_violations": monotonicity_violations(np.nan_to_num(a))}
    if q is not None:
        per_q["agreement"] = decision_agreement(a, q, table.grid)
        per_q["regret"] = decision_regret(a, q, table.grid)

    def point_and_boot(weights: np.ndarray) -> dict[str, np.ndarray]:
        """Every figure at question weights (B, Qm) -> name -> (B,) or (B, T)."""
        ow = weights[:, obs_q] * count[None, :]
        out = {"ece": expected_calibration_error(conf, label, ow), "brier": brier_score(conf, label, ow), "auroc": auroc(conf, label, ow)}
        for key, values in per_q.items():
            out[f"{key}@p"] = _weighted_mean(values, weights)
        out["monotonicity"] = _weighted_mean(per_q["monotonicity_violations"].max(axis=1) if len(table.grid) else np.zeros(len(idx)), weights)
        if q is not None:
            out["agreement"] = out["agreement@p"].mean(axis=1)
            out["regret"] = out["regret@p"].mean(axis=1)
        return out

    ones = np.ones((1, len(idx)))
    point = {k: v[0] for k, v in point_and_boot(ones).items()}
    point["smece"] = smooth_ece(conf, label, count)
    boot: dict[str, np.ndarray] = {}
    if n_boot > 0 and len(idx):
        weights = replicate_weights(table.strata[idx], n_boot, group_rng(seed, f"{name}/calibration"))
        boot = point_and_boot(weights)
        boot["smece"] = np.array([smooth_ece(conf, label, weights[b, obs_q] * count) for b in range(min(n_boot, smece_boot))])

    def figure(key: str) -> dict[str, float | None]:
        if key not in point:
            return {"value": None, "ci_low": None, "ci_high": None}
        lo, hi = _interval(boot[key], ci) if key in boot else (None, None)
        return {"value": _num(float(point[key])), "ci_low": lo, "ci_high": hi}

    summed = rates(table.counts[idx].sum(axis=0), table.grid)
    per_target = []
    for t, p in enumerate(table.grid):
        row: dict[str, Any] = {"target_p": p}
        row.update({k: _num(float(summed[k][t])) for k in ("coverage", "accuracy", "abstention_rate", "hallucination_rate",
                                                          "hallucination_to_abstention", "accuracy_to_hallucination", "riskeval_utility")})
        for key in DECISION_NAMES:
            if f"{key}@p" in point:
                lo, hi = _interval(boot[f"{key}@p"][:, t], ci) if boot else (None, None)
                row[key] = {"value": _num(float(point[f"{key}@p"][t])), "ci_low": lo, "ci_high": hi}
            else:
                row[key] = {"value": None, "ci_low": None, "ci_high": None}
        per_target.append(row)
    labelled = table.label_n[idx]
    return {
        "n_questions": int(len(idx)),
        "n_observations": int(count.sum()),
        "label_accuracy": _num(float(table.label_correct[idx].sum() / labelled.sum())) if labelled.sum() else None,
        "headline": {key: figure(key) for key in CALIBRATION_NAMES},
        "per_target": per_target,
    }


def question_rows(table: QuestionTable, ci: float) -> list[dict[str, Any]]:
    """Per-question q_i (with its Wilson interval), c_i, decisions and the ideal ones, for ``metrics.json``."""
    a = table.answer_rate
    c = implied_confidence(np.nan_to_num(a), table.grid, sampled=table.sampled)
    labels = [repr(p) for p in table.grid]
    q = table.q
    lo = hi = None
    if q is not None:
        with np.errstate(divide="ignore", invalid="ignore"):
            lo, hi = wilson_interval(table.q_correct, table.q_n, ci)
    rows = []
    for i, (source, qid) in enumerate(table.keys):
        row: dict[str, Any] = {"source": source, "question_id": qid, "difficulty": difficulty(source, qid), "c": float(c[i]),
                               "label_correct": int(table.label_correct[i]), "label_answered": int(table.label_n[i]),
                               "answer_rate": {lab: _num(float(a[i, t])) for t, lab in enumerate(labels)}}
        if q is not None:
            row.update({"q": _num(float(q[i])), "q_low": _num(float(lo[i])), "q_high": _num(float(hi[i])),
                        "q_samples": int(table.q_records[i]) if table.q_records is not None else int(table.q_n[i]),
                        "q_answered": int(table.q_n[i]),
                        "ideal_answer": None if np.isnan(q[i]) else {lab: bool(q[i] > p) for lab, p in zip(labels, table.grid)}})
        rows.append(row)
    return rows


def strata_masks(table: QuestionTable, groups: dict[str, list[str]]) -> dict[str, np.ndarray]:
    """The strata calibration is reported in: ``all``, each source group (``groups``: name ->
    member sources), each difficulty (:func:`difficulty`) and, with q_i, each q_i bin (:data:`Q_BINS`)."""
    sources = np.array([s for s, _ in table.keys])
    masks = {"all": np.ones(len(table.keys), dtype=bool)}
    for name, members in groups.items():
        masks[name] = np.isin(sources, members)
    levels = [difficulty(s, qid) for s, qid in table.keys]
    for level in sorted({lv for lv in levels if lv is not None}, key=lambda v: [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", v)]):
        masks[level] = np.array([lv == level for lv in levels])
    if table.q is not None:
        bins = [None if np.isnan(v) else q_bin(float(v)) for v in table.q]
        for b in dict.fromkeys(q_bin(lo) for lo in Q_BINS[:-1]):
            if b in bins:
                masks[b] = np.array([x == b for x in bins])
    return masks


def strata_figures_all(table: QuestionTable, groups: dict[str, list[str]], *, n_boot: int, ci: float, seed: int) -> dict[str, dict[str, Any]]:
    """:func:`stratum_figures` of every stratum of :func:`strata_masks` (a source group holding every
    question is the ``all`` stratum and is not repeated)."""
    out: dict[str, dict[str, Any]] = {}
    for name, mask in strata_masks(table, groups).items():
        if name != "all" and mask.all():
            continue
        out[name] = stratum_figures(table, mask, n_boot=n_boot, ci=ci, seed=seed, name=name)
    return out


def summary(calibration: dict[str, Any], targets: Sequence[float], strata: Sequence[str]) -> dict[str, Any]:
    """A small record of a run's calibration block (``metrics.json`` -> ``runs -> label -> calibration``): per
    stratum in ``strata`` (those present) the headline figures and, at each of ``targets``, the decision row.

    Raises:
        ValueError: a target not on the block's grid (the message names it and the grid).
    """
    missing = [p for p in targets if not any(abs(p - g) < 1e-9 for g in calibration["grid"])]
    if missing:
        raise ValueError(f"targets {missing} are not on the calibration grid {calibration['grid']}")
    out: dict[str, Any] = {"reference": calibration["reference"], "q_source": calibration["q_source"], "q_interval": calibration["q_interval"],
                           "c_rule": calibration["c_rule"], "grid": calibration["grid"], "strata": {}}
    for name in strata:
        fig = calibration["strata"].get(name)
        if fig is None:
            continue
        rows = [row for row in fig["per_target"] if any(abs(row["target_p"] - p) < 1e-9 for p in targets)]
        out["strata"][name] = {"n_questions": fig["n_questions"], "n_observations": fig["n_observations"], "label_accuracy": fig["label_accuracy"],
                               "headline": fig["headline"], "per_target": rows}
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m rlec.eval.calibration METRICS_JSON ...``: write :func:`summary` of runs' calibration blocks as JSON.

    Exit status: 0 written; 2 bad input (one line naming the file, run, target or stratum; nothing written).
    """
    import argparse
    import json
    import sys
    from pathlib import Path

    from rlec.io import atomic_write_text

    p = argparse.ArgumentParser(prog="python -m rlec.eval.calibration",
                                description="A small JSON of the per-question calibration figures of metrics.json (docs/metrics.md).")
    p.add_argument("metrics", nargs="+", help="metrics.json file(s) written by rlec.eval.metrics")
    p.add_argument("--targets", default="0.1,0.8", help="comma-separated targets whose decision rows are kept")
    p.add_argument("--strata", default="all", help="comma-separated strata kept (those a run lacks are left out)")
    p.add_argument("--out", required=True, help="the JSON file to write")
    args = p.parse_args(argv)
    try:
        targets = [float(t) for t in args.targets.split(",") if t.strip()]
        strata = [s.strip() for s in args.strata.split(",") if s.strip()]
        out: dict[str, Any] = {}
        for path in args.metrics:
            try:
                result = json.loads(Path(path).read_text(encoding="utf-8"))
                runs = result["runs"]
            except (OSError, ValueError, KeyError, TypeError) as exc:
                raise ValueError(f"{path}: not a metrics.json of rlec.eval.metrics ({exc})") from None
            for label, run in runs.items():
                if not run.get("calibration"):
                    raise ValueError(f"{path}: run {label!r} has no calibration figures (rerun rlec.eval.metrics without --no-calibration)")
                out[f"{Path(path).parent.name}/{label}" if len(args.metrics) > 1 else label] = {
                    "metrics": str(path), **summary(run["calibration"], targets, strata)}
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    atomic_write_text(args.out, json.dumps(out, indent=1) + "\n")
    print(f"written: {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
