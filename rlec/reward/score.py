"""Score one graded response: the target p of its row, then R_p^(b).

rlec's reward manager (``rlec.verl_plugin.reward_manager``) scores each response through
:func:`rlec.reward.batch.score_one_async`, with b from the schedule at the batch's global step
(:func:`rlec.reward.schedule.schedule_from_config`); this module holds what that path and the data
contract share.

Where p comes from: ``extra_info["target_p"]`` (data preparation writes it); a sample with
``extra_info["objective"] == "binary"`` (no target in its prompt), or with neither an objective nor
a ``target_p``, uses p = 0, the ordinary binary objective. An ``"rlec"`` sample without a numeric
``target_p`` (null, missing, or a string such as "0.5") is refused by :func:`target_of`, the one
place the rule lives: the data contract (:func:`rlec.data.contract.check_row`) raises with the
file and row, and scoring flags it as a ``data`` grader error.

Never raises on a sample (response, gold, data_source, ``extra_info``): a sample that cannot be
graded or has a bad ``target_p`` / ``objective`` is scored as INCORRECT with ``grader_error`` = 1
and the reason in ``grader_error_reason`` (p = 0 when the target itself is bad, so its reward is 0);
see :mod:`rlec.grading.errors`. A bad ``b`` / schedule is a configuration error and raises.
"""

from __future__ import annotations

import dataclasses
import numbers
from typing import Any, Mapping

from rlec.grading import GradeResult
from rlec.grading.errors import record_error
from rlec.grading.outcome import Outcome
from rlec.reward.formula import check_target, rlec_reward


def target_of(extra_info: Mapping[str, Any] | None) -> float:
    """The target p of a sample from its ``extra_info``.

    Returns:
        p in [0, 1): ``extra_info["target_p"]``, or 0.0 for the binary objective / no target
        (no ``objective`` and no ``target_p``).

    Raises:
        ValueError: ``extra_info`` is not a mapping; ``objective`` is set to something other than
            "binary" / "rlec"; ``objective`` is "rlec" and ``target_p`` is missing or null (its
            prompt states a target the reward would silently replace by 0); ``target_p`` is not a
            real number (a string such as "0.5" or a bool is refused, not converted) or not in
            [0, 1). The message names the key, the value and what was expected.
    """
    if extra_info is None:
        return 0.0
    if not isinstance(extra_info, Mapping):
        raise ValueError(f"extra_info must be a dict, got {type(extra_info).__name__}")
    if not extra_info:
        return 0.0
    objective = extra_info.get("objective")
    if objective not in (None, "binary", "rlec"):
        raise ValueError(f"extra_info['objective'] must be 'binary' or 'rlec', got {objective!r}")
    if objective == "binary":
        return 0.0
    p = extra_info.get("target_p")
    if p is None:
        if objective == "rlec":
            raise ValueError(f"extra_info['target_p'] is {'null' if 'target_p' in extra_info else 'missing'} but "
                             "extra_info['objective'] is 'rlec': expected a number in [0, 1) (use objective "
                             "'binary' for a row without a target)")
        return 0.0
    if isinstance(p, (str, bytes, bool)) or not isinstance(p, numbers.Real):
        raise ValueError(f"extra_info['target_p'] must be a real number in [0, 1), got {p!r} "
                         f"({type(p).__name__}; strings and booleans are not converted)")
    try:
        return check_target(p)
    except ValueError as exc:
        raise ValueError(f"extra_info['target_p']: {exc}") from None


def target_or_error(extra_info: Any) -> tuple[float, str]:
    """``(p, "")`` from :func:`target_of`, or ``(0.0, reason)`` when the target is bad (recorded as a
    ``data`` grader error; never raises)."""
    try:
        return target_of(extra_info), ""
    except ValueError as exc:
        return 0.0, record_error("data", str(exc))


def with_grader_error(result: GradeResult, reason: str) -> GradeResult:
    """``result`` turned into a grader failure: INCORRECT, ``grader_error`` = ``reason`` (kept if set)."""
    if not reason or result.grader_error:
        return result
    return dataclasses.replace(result, outcome=Outcome.INCORRECT, f1=None, detail="grader_error", grader_error=reason)


NO_ENV_SCORE = -2.0  # below every shaped score (RLVE-Gym's are in [-1, 1])


def score_result(result: GradeResult, p: float, b: float, data_source: str) -> dict[str, Any]:
    """The score dict for an already graded response.

    Returns:
        ``{"score": R_p^(b)(outcome), "outcome", "target_p", "b", "correct" (0/1), "answered"
        (0/1), "format_ok" (0/1), "timed_out" (0/1), "grader_error" (0/1),
        "grader_error_reason" (str, '' if none), "pred" (str, '' if none), "data_source",
        "f1" (QA F1 or -1.0 when not applicable), "env_score" (an environment's shaped score, RLVE-Gym's
        in [-1, 1], logged and never the reward; -2.0 when not applicable)}``: flat scalars, so verl
        can log and batch them.
    """
    return {
        "score": rlec_reward(result.outcome, p, b) + 0.0,  # + 0.0: no -0.0 for p = 0
        "outcome": result.outcome.value,
        "target_p": float(p),
        "b": float(b),
        "correct": float(result.outcome is Outcome.CORRECT),
        "answered": float(result.outcome is not Outcome.ABSTAIN),
        "format_ok": float(result.format_ok),
        "timed_out": float(result.timed_out),
        "grader_error": float(bool(result.grader_error)),
        "grader_error_reason": result.grader_error,
        "pred": result.pred or "",
        "data_source": data_source,
        "f1": -1.0 if result.f1 is None else float(result.f1),
        "env_score": NO_ENV_SCORE if result.env_score is None else float(result.env_score),
    }

