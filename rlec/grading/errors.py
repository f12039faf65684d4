"""Grader failures are outcomes, never exceptions: counted always, logged once per kind.

A grader that raises inside verl's reward loop fails the whole training step, so every grading
entry point (``grade``, ``grade_batch``, ``grade_async``, ``rlec.reward.batch.score_one_async``,
the ``rlec`` reward manager) turns a failure on one sample into
that sample's outcome: incorrect, with ``grader_error`` set to the reason. The step's metrics
count them (``rlec/grader_error_rate``).

Kinds (:data:`KINDS`):

- ``data``: the row is unusable: unknown ``data_source``, gold missing / not a string / empty,
  ``target_p`` or ``objective`` out of range. Every sample of such a row gets the same outcome, so
  its group's mean-only advantage is 0: the row teaches nothing;
- ``gold``: the gold answer failed the hostile-input screen (:mod:`rlec.grading.screen`);
- ``math_verify``: math-verify raised, or its worker died, on this pair;
- ``pool``: the math-verify pool could not start (every math item of the call is affected);
- ``internal``: an unexpected exception in rlec's own grading code, a bug: logged at ERROR with
  its traceback (``tests/grading/conftest.py`` fails any grading test during which one happens).

The first failure of each kind in a process is logged (WARNING, ERROR for ``internal``); later
ones only at DEBUG, so a broken data file cannot flood the training log. :func:`error_counts`
returns the running totals.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter

logger = logging.getLogger("rlec.grading")

KINDS = ("data", "gold", "math_verify", "pool", "internal")

_counts: Counter[str] = Counter()
_logged: set[str] = set()
_lock = threading.Lock()

__all__ = ["KINDS", "error_counts", "record_error"]


def record_error(kind: str, reason: str, exc: BaseException | None = None) -> str:
    """Count one grader failure and log it if it is the first of its kind.

    Args:
        kind: one of :data:`KINDS`.
        reason: one line naming what failed (it becomes ``GradeResult.grader_error``).
        exc: the exception, logged with its traceback for ``internal`` failures.

    Returns:
        ``f"{kind}: {reason}"``, the text stored in the outcome (at most 500 characters).

    Raises:
        ValueError: ``kind`` is not one of :data:`KINDS` (a programming error).
    """
    if kind not in KINDS:
        raise ValueError(f"grader error kind must be one of {KINDS}, got {kind!r}")
    text = f"{kind}: {reason}"[:500]
    with _lock:
        _counts[kind] += 1
        first = kind not in _logged
        _logged.add(kind)
    if first:
        level = logging.ERROR if kind == "internal" else logging.WARNING
        logger.log(level, "grader error (graded incorrect; later %s errors are logged at DEBUG): %s", kind, text,
                   exc_info=exc if kind == "internal" else None)
    else:
        logger.debug("grader error: %s", text)
    return text


def error_counts() -> dict[str, int]:
    """Grader failures recorded in this process so far, by kind (kinds never seen are 0)."""
    with _lock:
        return {kind: _counts[kind] for kind in KINDS}
