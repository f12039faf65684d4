"""Training metrics of RLEC rewards, aggregated by target bucket and by source.

Input: the per-sample records of :func:`rlec.reward.batch.sample_info` (what verl keeps as
``reward_extra_info``). Output: a flat ``{name: float}`` dict for verl's logger (console,
TensorBoard, wandb), named ``{prefix}/{statistic}`` over all records and
``{prefix}/{group}/{statistic}`` per group, with

- groups: each target bucket (``p0.0-0.3``, ``p0.3-0.6``, ``p0.6-1.0``, ``binary``) and each
  source (``src_math_dapo``, ``src_hotpotqa``);
- statistics: ``count``, ``reward/mean`` (R_p^(b) at the step's b), ``reward_b1/mean`` (R_p^(1),
  comparable across steps), ``coverage`` (answered / all), ``abstention_rate``, ``accuracy``
  (correct / all), ``selective_accuracy`` (correct / answered; omitted when nothing was answered),
  ``format_ok_rate``, ``timeout_rate``, ``grader_error_rate`` (samples that could not be graded:
  bad rows, math-verify failures; see :mod:`rlec.grading.errors`);

plus ``{prefix}/b``, the mean stability coefficient of the records (one value per step).
So ``rlec/reward/mean``, ``rlec/accuracy``, ``rlec/p0.6-1.0/abstention_rate``, ``rlec/src_hotpotqa/accuracy``.
Coverage and selective accuracy follow the selective-prediction definitions (El-Yaniv and
Wiener, JMLR 2010, Sec. 2); ``docs/metrics.md`` defines the evaluation versions.
Pure Python: no verl, no numpy required.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Iterable, Mapping, Sequence

REQUIRED_KEYS = ("outcome", "score", "correct", "answered", "bucket", "data_source", "b")

__all__ = ["REQUIRED_KEYS", "group_stats", "reward_metrics", "rows_from_columns"]


def rows_from_columns(columns: Mapping[str, Sequence[Any]]) -> list[dict[str, Any]]:
    """Turn verl's column layout (``{key: [value per sample]}``) into one dict per sample.

    Raises:
        ValueError: the columns differ in length (the message names them).
    """
    lengths = {key: len(values) for key, values in columns.items()}
    if len(set(lengths.values())) > 1:
        raise ValueError(f"reward_extra_info columns differ in length: {lengths}")
    n = next(iter(lengths.values()), 0)
    return [{key: values[i] for key, values in columns.items()} for i in range(n)]


def group_stats(rows: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """Statistics of one group of records (see the module docstring for the names).

    Args:
        rows: records carrying at least :data:`REQUIRED_KEYS`; must not be empty.

    Returns:
        ``{statistic: value}``; rates are in [0, 1], ``count`` is the number of records.

    Raises:
        ValueError: ``rows`` is empty.
    """
    n = len(rows)
    if n == 0:
        raise ValueError("group_stats needs at least one record")
    answered = sum(float(r["answered"]) for r in rows)
    correct = sum(float(r["correct"]) for r in rows)
    stats = {
        "count": float(n),
        "reward/mean": sum(float(r["score"]) for r in rows) / n,
        "coverage": answered / n,
        "abstention_rate": sum(float(r.get("abstained", 1.0 - float(r["answered"]))) for r in rows) / n,
        "accuracy": correct / n,
        "format_ok_rate": sum(float(r.get("format_ok", 0.0)) for r in rows) / n,
        "timeout_rate": sum(float(r.get("timed_out", 0.0)) for r in rows) / n,
        "grader_error_rate": sum(float(r.get("grader_error", 0.0)) for r in rows) / n,
    }
    if all(r.get("reward_b1") is not None for r in rows):
        stats["reward_b1/mean"] = sum(float(r["reward_b1"]) for r in rows) / n
    if answered > 0:
        stats["selective_accuracy"] = correct / answered
    return stats


def reward_metrics(records: Iterable[Mapping[str, Any] | None], prefix: str = "rlec") -> dict[str, float]:
    """Aggregate per-sample reward records into logged metrics, overall, by bucket and by source.

    Records without an ``outcome`` (failed rollout sessions, other reward managers) are skipped;
    with none left the result is empty.

    Args:
        records: :func:`rlec.reward.batch.sample_info` dicts (numpy scalars are fine).
        prefix: the metric namespace, e.g. ``"rlec"`` for training, ``"val-rlec"`` for validation.

    Returns:
        ``{f"{prefix}/{statistic}": value}`` over all records, ``{f"{prefix}/{group}/{statistic}": value}``
        per bucket and source, and ``f"{prefix}/b"``.

    Raises:
        KeyError: a record with an ``outcome`` lacks another of :data:`REQUIRED_KEYS`.
    """
    rows = [r for r in records if r and r.get("outcome") is not None]
    for i, row in enumerate(rows):
        missing = [k for k in REQUIRED_KEYS if row.get(k) is None]
        if missing:
            raise KeyError(f"reward record {i} lacks {missing}; expected the keys of rlec.reward.batch.sample_info")
    if not rows:
        return {}
    groups: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for row in rows:
        groups[str(row["bucket"])].append(row)
        groups[f"src_{row['data_source']}"].append(row)
    metrics = {f"{prefix}/b": sum(float(r["b"]) for r in rows) / len(rows)}
    metrics.update({f"{prefix}/{stat}": value for stat, value in group_stats(rows).items()})
    for group in sorted(groups):
        for stat, value in group_stats(groups[group]).items():
            metrics[f"{prefix}/{group}/{stat}"] = value
    return metrics
