"""Grade model responses: outcome in {correct, incorrect, abstain} plus a format flag.

    response -> extract final answer (rlec.grading.extract)
             -> abstained?                       -> ABSTAIN
             -> no answer found                  -> INCORRECT (format_ok False)
             -> math: fast exact/number path, else math-verify in the pool (rlec.grading.math)
             -> qa:   HotpotQA exact match, F1 reported (rlec.grading.qa)

Which checker applies is decided by the sample's ``data_source`` through :data:`TASKS`
(extend it with :func:`register_data_source` for new environments). Model output is untrusted
text: it is only ever parsed, never evaluated as code (sympy parsing in math-verify goes through
its LaTeX grammar, not ``eval``).
"""

from __future__ import annotations

import asyncio
from dataclasses import asdict, dataclass
from typing import Any, Sequence

from rlec.grading.extract import Extraction, extract
from rlec.grading.math import DEFAULT_TIMEOUT_S, MAX_ANSWER_CHARS, MathVerifyPool, VerifyResult, fast_verdict, shared_pool
from rlec.grading.qa import exact_match, f1_score, normalize_answer
from rlec.reward.formula import Outcome

MATH, QA = "math", "qa"
TASKS: dict[str, str] = {
    "math_dapo": MATH,  # DAPO-Math-17k's own data_source value
    "math": MATH,
    "hotpotqa": QA,
}

__all__ = [
    "GradeResult",
    "TASKS",
    "check_gold",
    "grade",
    "grade_async",
    "grade_batch",
    "register_data_source",
    "task_for",
]


def register_data_source(data_source: str, task: str) -> None:
    """Map a new ``data_source`` value to a checker ("math" or "qa").

    Raises:
        ValueError: unknown task, or ``data_source`` already mapped to another task.
    """
    if task not in (MATH, QA):
        raise ValueError(f"task must be {MATH!r} or {QA!r}, got {task!r}")
    if TASKS.get(data_source, task) != task:
        raise ValueError(f"data_source {data_source!r} is already graded as {TASKS[data_source]!r}")
    TASKS[data_source] = task


def task_for(data_source: str) -> str:
    """The checker for a ``data_source``.

    Raises:
        ValueError: the data_source is not in :data:`TASKS` (the message lists the known ones).
    """
    try:
        return TASKS[data_source]
    except (KeyError, TypeError):
        raise ValueError(f"unknown data_source {data_source!r}; known: {sorted(TASKS)}") from None


@dataclass(frozen=True)
class GradeResult:
    """The grade of one response.

    Attributes:
        outcome: correct, incorrect or abstain.
        pred: the extracted final answer (None when none was found).
        answer_source: "boxed", "answer_line" or "none" (see :mod:`rlec.grading.extract`).
        format_ok: the final answer was in the requested ``\\boxed{}`` form.
        task: "math" or "qa".
        f1: HotpotQA token F1 in [0, 1] for answered QA items, else None.
        timed_out: math-verify ran past the per-item timeout (the item counts as incorrect).
        detail: how the verdict was reached: "abstain", "no_answer", "answer_too_long",
            "exact", "math_verify", "timeout", "worker_error", "em".
    """

    outcome: Outcome
    pred: str | None
    answer_source: str
    format_ok: bool
    task: str
    f1: float | None = None
    timed_out: bool = False
    detail: str = ""

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-serialisable dict (outcome as its string value)."""
        d = asdict(self)
        d["outcome"] = self.outcome.value
        return d


def _check_gold(gold: Any, task: str) -> str:
    if isinstance(gold, (int, float)) and not isinstance(gold, bool):
        gold = str(gold)
    if not isinstance(gold, str) or not gold.strip():
        raise ValueError(f"gold answer for a {task} item must be a non-empty string, got {gold!r}")
    return gold.strip()


def check_gold(gold: Any, data_source: str) -> str:
    """Check that a gold answer can be graded, before grading (e.g. when reading evaluation records).

    The same rules :func:`grade_batch` applies: a non-empty string (numbers accepted for math),
    and for QA one that survives the HotpotQA normalisation (an answer made only of articles or
    punctuation, such as "the", could never be matched).

    Returns:
        The gold answer, stripped.

    Raises:
        ValueError: unknown data_source, or a gold answer that cannot be graded (the message says why).
    """
    task = task_for(data_source)
    gold = _check_gold(gold, task)
    if task == QA and not normalize_answer(gold):
        raise ValueError(f"HotpotQA gold answer {gold!r} normalises to an empty string (only articles / punctuation)")
    return gold


def _pre_grade(response: Any, gold: Any, data_source: str) -> tuple[GradeResult | None, Extraction, str, str]:
    """Everything except math-verify. Returns (result or None if math-verify must decide, ...)."""
    task = task_for(data_source)
    gold = _check_gold(gold, task)
    ex = extract(response)
    base = dict(pred=ex.answer, answer_source=ex.source, format_ok=ex.format_ok, task=task)
    if ex.abstained:
        return GradeResult(Outcome.ABSTAIN, detail="abstain", **base), ex, task, gold
    if ex.answer is None:
        return GradeResult(Outcome.INCORRECT, detail="no_answer", **base), ex, task, gold
    if task == QA:
        correct = exact_match(ex.answer, gold)
        return (
            GradeResult(Outcome.CORRECT if correct else Outcome.INCORRECT, f1=f1_score(ex.answer, gold), detail="em", **base),
            ex,
            task,
            gold,
        )
    if len(ex.answer) > MAX_ANSWER_CHARS:
        return GradeResult(Outcome.INCORRECT, detail="answer_too_long", **base), ex, task, gold
    verdict = fast_verdict(gold, ex.answer)
    if verdict is not None:
        return GradeResult(Outcome.CORRECT if verdict else Outcome.INCORRECT, detail="exact", **base), ex, task, gold
    return None, ex, task, gold


def _from_verify(ex: Extraction, task: str, v: VerifyResult) -> GradeResult:
    detail = "timeout" if v.timed_out else ("worker_error" if v.error else "math_verify")
    return GradeResult(
        Outcome.CORRECT if v.equal else Outcome.INCORRECT,
        pred=ex.answer,
        answer_source=ex.source,
        format_ok=ex.format_ok,
        task=task,
        timed_out=v.timed_out,
        detail=detail,
    )


def grade_batch(
    responses: Sequence[Any],
    golds: Sequence[Any],
    data_sources: Sequence[str],
    *,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    pool: MathVerifyPool | None = None,
) -> list[GradeResult]:
    """Grade a batch; all math-verify items go to the pool at once.

    Args:
        responses: N model responses (anything that is not a str grades as "no answer").
        golds: N gold answers (str; ints/floats accepted for math).
        data_sources: N ``data_source`` values (see :data:`TASKS`).
        timeout_s: per-item math-verify limit in seconds (ignored when ``pool`` is given).
        pool: the math-verify pool to use (default: the process-wide :func:`shared_pool`).

    Returns:
        N :class:`GradeResult`, in input order. Each item finishes within ``timeout_s`` (+ the
        pool's scheduling slack) of starting in its worker.

    Raises:
        ValueError: the three sequences differ in length, an unknown data_source, or an empty
            gold answer (the message names the index).
    """
    if not len(responses) == len(golds) == len(data_sources):
        raise ValueError(f"lengths differ: {len(responses)} responses, {len(golds)} golds, {len(data_sources)} data_sources")
    results: list[GradeResult | None] = []
    pending: list[tuple[int, Extraction, str, str]] = []
    for i, (resp, gold, src) in enumerate(zip(responses, golds, data_sources)):
        try:
            res, ex, task, gold_s = _pre_grade(resp, gold, src)
        except ValueError as exc:
            raise ValueError(f"item {i}: {exc}") from None
        results.append(res)
        if res is None:
            pending.append((i, ex, task, gold_s))
    if pending:
        pool = pool or shared_pool(timeout_s)
        verdicts = pool.verify_many((gold_s, ex.answer) for _, ex, _, gold_s in pending)
        for (i, ex, task, _), v in zip(pending, verdicts):
            results[i] = _from_verify(ex, task, v)
    return results  # type: ignore[return-value]


def grade(response: Any, gold: Any, data_source: str, *, timeout_s: float = DEFAULT_TIMEOUT_S, pool: MathVerifyPool | None = None) -> GradeResult:
    """Grade one response (see :func:`grade_batch` for arguments and errors)."""
    return grade_batch([response], [gold], [data_source], timeout_s=timeout_s, pool=pool)[0]


async def grade_async(
    response: Any, gold: Any, data_source: str, *, timeout_s: float = DEFAULT_TIMEOUT_S, pool: MathVerifyPool | None = None
) -> GradeResult:
    """Grade one response without blocking the event loop (for verl's async reward loop).

    Many concurrent calls share the pool, so items of one batch run in parallel.
    """
    res, ex, task, gold_s = _pre_grade(response, gold, data_source)
    if res is not None:
        return res
    pool = pool or shared_pool(timeout_s)
    v = await asyncio.wrap_future(pool.submit(gold_s, ex.answer))
    return _from_verify(ex, task, v)
