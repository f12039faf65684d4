"""RLEC rewards of a training batch's responses at one global step: what verl's reward loop calls.

rlec's reward manager (``rlec.verl_plugin.reward_manager``) scores each response of a step the same way::

    b     = schedule(global_step)                 # rlec.reward.schedule.LinearSchedule, steps from 1
    p_i   = rlec.reward.score.target_of(extra_info_i)    # 0 for the binary objective
    out_i = rlec.grading.grade(response_i, gold_i, data_source_i)
    r_i   = R_{p_i}^{(b)}(out_i)                  # rlec.reward.formula.rlec_reward

Each sample's result is a flat dict of scalars and short strings (:func:`sample_info`): verl
stores it as ``reward_extra_info``, and :mod:`rlec.reward.metrics` aggregates it into the
logged metrics. Nothing here imports verl, Ray or torch.distributed, and nothing raises on a
sample's data: a sample that cannot be graded is INCORRECT with ``grader_error`` set
(:mod:`rlec.grading.errors`), counted in ``rlec/grader_error_rate``.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from rlec.grading import GradeResult, grade_async
from rlec.grading.math import DEFAULT_TIMEOUT_S, MathVerifyPool
from rlec.grading.outcome import Outcome
from rlec.reward.formula import rlec_reward
from rlec.reward.schedule import LinearSchedule
from rlec.reward.score import score_result, target_or_error, with_grader_error

BINARY_BUCKET = "binary"
# Target buckets of the logged metrics: [0, .3), [.3, .6), [.6, 1). Training draws p from
# U[0, 0.9], so the last bucket holds [.6, .9]. Names avoid brackets (TensorBoard tag rules).
DEFAULT_BUCKET_EDGES: tuple[float, ...] = (0.0, 0.3, 0.6, 1.0)

__all__ = [
    "BINARY_BUCKET",
    "DEFAULT_BUCKET_EDGES",
    "failed_sample_info",
    "sample_info",
    "score_one_async",
    "target_bucket",
]


def target_bucket(p: float, objective: str | None = None, edges: Sequence[float] = DEFAULT_BUCKET_EDGES) -> str:
    """The metrics bucket of a sample: ``"binary"`` or ``"p{lo:.1f}-{hi:.1f}"``.

    Args:
        p: the sample's target in [0, 1).
        objective: ``extra_info["objective"]``; "binary" samples (no target in the prompt) form
            their own bucket whatever p says.
        edges: increasing bucket edges; bucket k is [edges[k], edges[k+1]).

    Raises:
        ValueError: fewer than two edges, edges not increasing, or p outside [edges[0], edges[-1]).
    """
    if len(edges) < 2 or any(lo >= hi for lo, hi in zip(edges[:-1], edges[1:])):
        raise ValueError(f"bucket edges must be at least two increasing numbers, got {list(edges)}")
    if objective == "binary":
        return BINARY_BUCKET
    for lo, hi in zip(edges[:-1], edges[1:]):
        if lo <= p < hi:
            return f"p{lo:.1f}-{hi:.1f}"
    raise ValueError(f"target p={p!r} is outside the bucket edges {list(edges)}")


def sample_info(
    result: GradeResult,
    p: float,
    b: float,
    data_source: str,
    *,
    global_step: int,
    objective: str | None = None,
    edges: Sequence[float] = DEFAULT_BUCKET_EDGES,
) -> dict[str, Any]:
    """The per-sample reward record verl logs as ``reward_extra_info``.

    Returns:
        :func:`rlec.reward.score.score_result`'s dict (``score`` = R_p^(b), ``outcome``, ``target_p``,
        ``b``, ``correct``, ``answered``, ``format_ok``, ``timed_out``, ``grader_error``,
        ``grader_error_reason``, ``pred``, ``data_source``, ``f1``) plus ``acc`` (= correct, verl's core validation key),
        ``abstained`` (0/1), ``reward_b1`` (R_p^(1), the evaluation reward, comparable across
        steps), ``bucket`` (:func:`target_bucket`) and ``global_step``.

    Raises:
        ValueError: p or b out of range, or p outside the bucket edges.
    """
    info = score_result(result, p, b, data_source)
    info["acc"] = info["correct"]
    info["abstained"] = float(result.outcome is Outcome.ABSTAIN)
    info["reward_b1"] = rlec_reward(result.outcome, p, 1.0)
    info["bucket"] = target_bucket(p, objective, edges)
    info["global_step"] = int(global_step)
    return info


def _objective(extra_info: Any) -> str | None:
    return extra_info.get("objective") if isinstance(extra_info, Mapping) else None


def failed_sample_info(
    reason: str,
    extra_info: Any,
    data_source: Any,
    global_step: int,
    schedule: LinearSchedule,
    *,
    edges: Sequence[float] = DEFAULT_BUCKET_EDGES,
) -> dict[str, Any]:
    """The :func:`sample_info` of a sample that could not even be read (INCORRECT, ``grader_error``).

    ``reason`` is the text of :func:`rlec.grading.errors.record_error`. p is the sample's target
    when readable, else 0.

    Raises:
        ValueError: p outside the bucket edges (configuration).
    """
    p, _ = target_or_error(extra_info)
    result = GradeResult(Outcome.INCORRECT, pred=None, answer_source="none", format_ok=False, task="",
                         detail="grader_error", grader_error=reason)
    source = data_source if isinstance(data_source, str) else str(data_source)
    return sample_info(result, p, schedule(global_step), source, global_step=global_step,
                       objective=_objective(extra_info), edges=edges)


def _scored(result: GradeResult, extra_info: Any, data_source: Any, b: float, global_step: int,
            edges: Sequence[float]) -> dict[str, Any]:
    p, error = target_or_error(extra_info)
    return sample_info(with_grader_error(result, error), p, b, data_source, global_step=global_step,
                       objective=_objective(extra_info), edges=edges)


async def score_one_async(
    response: Any,
    gold: Any,
    data_source: str,
    extra_info: Mapping[str, Any] | None,
    global_step: int,
    schedule: LinearSchedule,
    *,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    pool: MathVerifyPool | None = None,
    edges: Sequence[float] = DEFAULT_BUCKET_EDGES,
) -> dict[str, Any]:
    """Grade and score one response without blocking the event loop (verl's reward loop).

    Args:
        response: the decoded response (untrusted text).
        gold: the gold answer.
        data_source: the sample's ``data_source`` (a key of ``rlec.grading.TASKS``).
        extra_info: the sample's ``extra_info`` (``target_p``, ``objective``; see the data contract).
        global_step: the trainer's step, counted from 1 (verl's convention).
        schedule: the b schedule; b = ``schedule(global_step)``.
        timeout_s: math-verify per-item limit in seconds.
        pool: the math-verify pool (default: the process-wide one).
        edges: target bucket edges for the ``bucket`` field.

    Returns:
        Its :func:`sample_info` dict (``score`` is the reward R_p^(b), a float in [-p/(1-p), 1]); never
        raises on the sample's data: an unknown data_source, an empty gold or a bad ``target_p`` is
        INCORRECT with ``grader_error`` 1 (p = 0 for a bad target).

    Raises:
        ValueError: a target p outside the bucket ``edges`` (configuration).
    """
    result = await grade_async(response, gold, data_source, timeout_s=timeout_s, pool=pool)
    return _scored(result, extra_info, data_source, schedule(global_step), global_step, edges)
