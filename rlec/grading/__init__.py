"""Grade model responses: outcome in {correct, incorrect, abstain} plus a format flag.

    response -> extract final answer (rlec.grading.extract)
             -> abstained?                       -> ABSTAIN
             -> no answer found                  -> INCORRECT (format_ok False)
             -> math: fast exact/number path (rlec.grading.math_forms)
                      -> hostile-input screen    -> INCORRECT in microseconds (rlec.grading.screen)
                      -> math-verify in the warm pool (rlec.grading.math)
             -> qa:   HotpotQA exact match, F1 reported (rlec.grading.qa)

Which checker applies is decided by the sample's ``data_source`` through :data:`TASKS`
(extend it with :func:`register_data_source`). Environment sources (``rlve/<name>``) are graded by
the verifier their package registers (:mod:`rlec.grading.env`); grading imports that package by
name on the first such row, never at import time. Model output is untrusted
text: it is only ever parsed, never evaluated as code (sympy parsing in math-verify goes through
its LaTeX grammar, not ``eval``).

Nothing here raises on a response, a gold answer or a ``data_source``: a sample that cannot be
graded is INCORRECT with ``grader_error`` set to the reason, counted and logged once per kind
(:mod:`rlec.grading.errors`). Only a call that is wrong as a whole (sequences of different
lengths) raises.
"""

from __future__ import annotations

import asyncio
from dataclasses import asdict, dataclass
from typing import Any, Sequence

from rlec.grading.errors import error_counts, record_error
from rlec.grading.extract import Extraction, extract, strip_format_chars
from rlec.grading.math import DEFAULT_TIMEOUT_S, MathVerifyPool, VerifyResult, shared_pool
from rlec.grading.math_forms import fast_verdict
from rlec.grading.qa import exact_match, f1_score
from rlec.grading.screen import screen
from rlec.grading.outcome import Outcome

MATH, QA, ENV = "math", "qa", "env"  # env: an environment verifier (rlec.grading.env)
TASKS: dict[str, str] = {
    "math_dapo": MATH,  # DAPO-Math-17k's own data_source value
    "math": MATH,
    "hotpotqa": QA,
}

__all__ = [
    "GradeResult",
    "TASKS",
    "check_gold",
    "error_counts",
    "grade",
    "grade_async",
    "grade_batch",
    "has_grader",
    "register_data_source",
    "task_for",
]


def register_data_source(data_source: str, task: str) -> None:
    """Map a new ``data_source`` value to a checker ("math", "qa" or "env").

    Raises:
        ValueError: unknown task, or ``data_source`` already mapped to another task.
    """
    if task not in (MATH, QA, ENV):
        raise ValueError(f"task must be {MATH!r}, {QA!r} or {ENV!r}, got {task!r}")
    if TASKS.get(data_source, task) != task:
        raise ValueError(f"data_source {data_source!r} is already graded as {TASKS[data_source]!r}")
    TASKS[data_source] = task


def task_for(data_source: str) -> str:
    """The checker for a ``data_source``.

    An environment source (a prefix of :data:`rlec.grading.env.VERIFIER_PACKAGES`, ``rlve/<name>``)
    not yet in :data:`TASKS` is looked up by its verifier, which imports the package that
    registers it (and creates a namespaced environment, ``rlve/rlve_gym:<Identifier>``, on first use).

    Raises:
        ValueError: the data_source is not in :data:`TASKS` and no environment verifier knows it
            (the message lists the known ones, or says why the environment is unknown).
    """
    try:
        return TASKS[data_source]
    except (KeyError, TypeError):
        pass
    if environment_prefix(data_source) is not None:
        try:
            verifier_for(data_source)
        except (ValueError, KeyError) as exc:
            raise ValueError(f"unknown data_source {data_source!r}: {exc}") from None
        return TASKS.get(data_source, ENV)
    raise ValueError(f"unknown data_source {data_source!r}; known: {sorted(TASKS)}") from None


def has_grader(data_source: Any) -> bool:
    """Whether :func:`grade` has a checker for ``data_source`` (see :func:`task_for`; never raises)."""
    try:
        task_for(data_source)
    except ValueError:
        return False
    return True


@dataclass(frozen=True)
class GradeResult:
    """The grade of one response.

    Attributes:
        outcome: correct, incorrect or abstain.
        pred: the extracted final answer (None when none was found).
        answer_source: "boxed", "answer_line" or "none" (see :mod:`rlec.grading.extract`).
        format_ok: the final answer was in the requested ``\\boxed{}`` form.
        task: "math" or "qa" ("" when the data_source is unknown).
        f1: HotpotQA token F1 in [0, 1] for answered QA items, else None.
        timed_out: math-verify ran past the per-item timeout (the item counts as incorrect).
        detail: how the verdict was reached: "abstain", "no_answer", "exact", "math_verify",
            "em", "timeout", "grader_error", or "screened_<rule>" (the hostile-input screen's rule:
            length, nesting, power_tower, big_exponent, big_number, big_sum).
        grader_error: why the sample could not be graded (``"<kind>: <reason>"``, see
            :mod:`rlec.grading.errors`), "" when it was graded. Such a sample is INCORRECT.
        env_score: an environment's own shaped score (RLVE-Gym: in [-1, 1]); logged, never the
            reward; None elsewhere.
    """

    outcome: Outcome
    pred: str | None
    answer_source: str
    format_ok: bool
    task: str
    f1: float | None = None
    timed_out: bool = False
    detail: str = ""
    grader_error: str = ""
    env_score: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-serialisable dict (outcome as its string value)."""
        d = asdict(self)
        d["outcome"] = self.outcome.value
        return d


class _DataError(ValueError):
    """A row that cannot be graded (unknown data_source, bad gold): becomes a grader_error outcome."""

    def __init__(self, kind: str, reason: str) -> None:
        super().__init__(reason)
        self.kind = kind


def _check_gold(gold: Any, task: str) -> str:
    if isinstance(gold, (int, float)) and not isinstance(gold, bool):
        gold = str(gold)
    if isinstance(gold, str):
        gold = strip_format_chars(gold)  # invisible characters, as in the prediction (rlec.grading.extract)
    if not isinstance(gold, str) or not gold.strip():
        raise _DataError("data", f"gold answer for a {task} item must be a non-empty string, got {str(gold)[:80]!r}")
    return gold.strip()


def check_gold(gold: Any, data_source: str) -> str:
    """Check that a gold answer can be graded, before grading (e.g. when reading evaluation records).

    The rules :func:`grade_batch` applies to every row: a known ``data_source`` and a non-empty
    string (numbers accepted for math). A HotpotQA gold made only of articles or punctuation is
    gradable: the official EM compares normalised strings, so only an empty prediction matches it.

    Returns:
        The gold answer, stripped.

    Raises:
        ValueError: unknown data_source, or an empty gold answer (the message says why).
    """
    return _check_gold(gold, task_for(data_source))


def _failed(ex: Extraction, task: str, kind: str, reason: str, exc: BaseException | None = None) -> GradeResult:
    return GradeResult(
        Outcome.INCORRECT, pred=ex.answer, answer_source=ex.source, format_ok=ex.format_ok, task=task,
        detail="grader_error", grader_error=record_error(kind, reason, exc),
    )


def _pre_grade(response: Any, gold: Any, data_source: Any) -> tuple[GradeResult | None, Extraction, str, str]:
    """Everything except math-verify. Returns (result or None if math-verify must decide, ...).

    Never raises: a row that cannot be graded, or a bug in this code, gives a grader_error result.
    """
    ex, task = Extraction(None, "none", False), ""
    try:
        ex = extract(response)
        try:
            task = task_for(data_source)
        except ValueError as exc:
            raise _DataError("data", str(exc)) from None
        gold = _check_gold(gold, task)
        if task == ENV:  # the environment's verifier reads the response itself (rlec.grading.env)
            try:
                return grade_environment(response, gold, data_source), ex, task, gold
            except ValueError as exc:  # a ground truth that is not this environment's problem: a data error
                raise _DataError("data", str(exc)) from None
        return _decide(ex, task, gold), ex, task, gold
    except _DataError as exc:
        return _failed(ex, task, exc.kind, str(exc)), ex, task, ""
    except Exception as exc:  # a bug in rlec's grading code: never fail the batch for it
        return _failed(ex, task, "internal", f"{type(exc).__name__}: {exc}", exc), ex, task, ""


def _decide(ex: Extraction, task: str, gold: str) -> GradeResult | None:
    base = dict(pred=ex.answer, answer_source=ex.source, format_ok=ex.format_ok, task=task)
    if ex.abstained:
        return GradeResult(Outcome.ABSTAIN, detail="abstain", **base)
    if ex.answer is None:
        return GradeResult(Outcome.INCORRECT, detail="no_answer", **base)
    if task == QA:
        correct = exact_match(ex.answer, gold)
        return GradeResult(Outcome.CORRECT if correct else Outcome.INCORRECT, f1=f1_score(ex.answer, gold), detail="em", **base)
    rule = screen(ex.answer)
    if rule == "length":  # checked first: the fast path's regular expressions stay on short strings
        return GradeResult(Outcome.INCORRECT, detail="screened_length", **base)
    verdict = fast_verdict(gold, ex.answer)
    if verdict is not None:
        return GradeResult(Outcome.CORRECT if verdict else Outcome.INCORRECT, detail="exact", **base)
    if rule is not None:
        return GradeResult(Outcome.INCORRECT, detail=f"screened_{rule}", **base)
    gold_rule = screen(gold)
    if gold_rule is not None:
        raise _DataError("gold", f"gold answer {gold[:80]!r} fails the hostile-input screen ({gold_rule})")
    return None


def _from_verify(ex: Extraction, task: str, v: VerifyResult) -> GradeResult:
    base = dict(pred=ex.answer, answer_source=ex.source, format_ok=ex.format_ok, task=task)
    if v.timed_out:
        return GradeResult(Outcome.INCORRECT, timed_out=True, detail="timeout", **base)
    if v.error:
        return GradeResult(Outcome.INCORRECT, detail="grader_error", grader_error=record_error("math_verify", v.error), **base)
    return GradeResult(Outcome.CORRECT if v.equal else Outcome.INCORRECT, detail="math_verify", **base)


def _pool_or_reason(pool: MathVerifyPool | None, timeout_s: float) -> tuple[MathVerifyPool | None, str]:
    """The pool to use, or (None, why it could not start)."""
    if pool is not None:
        return pool, ""
    try:
        return shared_pool(timeout_s), ""
    except Exception as exc:  # workers cannot start: the math items of this call cannot be checked
        return None, f"math-verify pool could not start: {type(exc).__name__}: {exc}"


def grade_batch(
    responses: Sequence[Any],
    golds: Sequence[Any],
    data_sources: Sequence[Any],
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
        pool's scheduling slack) of starting in its worker. A sample that cannot be graded
        (unknown data_source, empty gold, a math-verify failure) is INCORRECT with
        ``grader_error`` set; nothing about one sample raises.

    Raises:
        ValueError: the three sequences differ in length.
    """
    if not len(responses) == len(golds) == len(data_sources):
        raise ValueError(f"lengths differ: {len(responses)} responses, {len(golds)} golds, {len(data_sources)} data_sources")
    results: list[GradeResult | None] = []
    pending: list[tuple[int, Extraction, str, str]] = []
    for i, (resp, gold, src) in enumerate(zip(responses, golds, data_sources)):
        res, ex, task, gold_s = _pre_grade(resp, gold, src)
        results.append(res)
        if res is None:
            pending.append((i, ex, task, gold_s))
    if pending:
        pool, reason = _pool_or_reason(pool, timeout_s)
        if pool is None:
            for i, ex, task, _ in pending:
                results[i] = _failed(ex, task, "pool", reason)
        else:
            verdicts = pool.verify_many((gold_s, ex.answer) for _, ex, _, gold_s in pending)
            for (i, ex, task, _), v in zip(pending, verdicts):
                results[i] = _from_verify(ex, task, v)
    return results  # type: ignore[return-value]


def grade(response: Any, gold: Any, data_source: Any, *, timeout_s: float = DEFAULT_TIMEOUT_S, pool: MathVerifyPool | None = None) -> GradeResult:
    """Grade one response (see :func:`grade_batch`; never raises)."""
    return grade_batch([response], [gold], [data_source], timeout_s=timeout_s, pool=pool)[0]


async def grade_async(
    response: Any, gold: Any, data_source: Any, *, timeout_s: float = DEFAULT_TIMEOUT_S, pool: MathVerifyPool | None = None
) -> GradeResult:
    """Grade one response without blocking the event loop (for verl's async reward loop).

    Many concurrent calls share the pool, so items of one batch run in parallel. Never raises
    (see :func:`grade_batch`).
    """
    res, ex, task, gold_s = _pre_grade(response, gold, data_source)
    if res is not None:
        return res
    pool, reason = _pool_or_reason(pool, timeout_s)
    if pool is None:
        return _failed(ex, task, "pool", reason)
    v = await asyncio.wrap_future(pool.submit(gold_s, ex.answer))
    return _from_verify(ex, task, v)


# Environment verifiers (the "env" task): registered by the package that owns a data-source prefix,
# imported by name on the first row that needs it (rlec.grading.env). Here, below GradeResult, which it uses.
from rlec.grading.env import environment_prefix, grade_environment, verifier_for  # noqa: E402
