"""grade()/grade_batch(): the cases the grader must get right, hostile inputs, and never raising."""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path

import pytest

from rlec import grading
from rlec.grading import TASKS, error_counts, grade, grade_async, grade_batch, register_data_source, task_for
from rlec.grading.outcome import Outcome

C, I, A = Outcome.CORRECT, Outcome.INCORRECT, Outcome.ABSTAIN  # noqa: E741 (the outcome table reads better with one letter)

MATH_CASES = [
    ("The answer is \\boxed{\\frac{1}{2}}", "0.5", C),
    ("\\boxed{\\dfrac{1}{2}}", "0.5", C),
    ("\\boxed{1,000}", "1000", C),
    ("\\boxed{x=2}", "2", C),
    ("\\boxed{\\boxed{4}}", "4", C),
    ("wrong first \\boxed{3}, fixed: \\boxed{4}", "4", C),
    ("\\boxed{4} but then \\boxed{3}", "4", I),
    ("Answer: 3, 5", "35", I),
    ("\\boxed{-3}", "3", I),
    ("\\boxed{(2,1)}", "(1,2)", I),
    ("\\boxed{50\\%}", "50", C),
    ("\\boxed{12.}", "12", C),
    ("\\boxed{I don't know}", "12", A),
    ("no final answer here", "12", I),
]
QA_CASES = [
    ("\\boxed{Yes.}", "yes", C),
    ("\\boxed{yes it is}", "yes", I),
    ("\\boxed{the Eiffel Tower}", "Eiffel Tower", C),
    ("\\boxed{I do not know}", "Eiffel Tower", A),
]
# issue 12: every row of its table and the tester's kinds, with the right verdict (p and b do not matter here)
ISSUE_ROWS = [
    ("\\boxed{1, 100}", "1100", "math_dapo", I),  # a two-element list is not one number
    ("\\boxed{1100}", "1, 100", "math_dapo", I),
    ("\\boxed{3, 125}", "3125", "math_dapo", I),
    ("\\boxed{12345}", "12,345", "math_dapo", C),
    ("\\boxed{5, 2}", "2, 5", "math_dapo", C),
    ("\\boxed{35}", "35\\%", "math_dapo", C),  # a gold math-verify cannot parse in \boxed{}
    ("\\boxed{0.35}", "35\\%", "math_dapo", C),
    ("\\boxed{0.5\\%}", "0.5", "math_dapo", C),  # percent is a unit: one convention, both ways
    ("\\boxed{0.5\\%}", "0.005", "math_dapo", I),
    ("\\boxed{A}", "A", "hotpotqa", C),  # both normalise to '': the official EM matches
    ("\\boxed{C}", "A", "hotpotqa", I),
    ("... $\\boxed 7$.", "7", "math_dapo", C),  # a one-token box without braces
    ("\\boxed{x<3}", "(-\\infty, 3)", "math_dapo", C),  # same set
    ("\\boxed{x \\ge 2}", "[2, \\infty)", "math_dapo", C),
    ("\\boxed{5x^2+9y^2=45}", "\\frac{x^2}{9}+\\frac{y^2}{5}=1", "math_dapo", C),
    ("\\boxed{\\textrm{I don't know}}", "7", "math_dapo", A),
    ("\\boxed{\\textsf{I don't know}}", "7", "math_dapo", A),
    ("\\boxed{\\texttt{I don't know}}", "7", "math_dapo", A),
    ("\\boxed{\\operatorname{I don't know}}", "Paris", "hotpotqa", A),
    ("\\boxed{\\textnormal{I don't know}}", "Paris", "hotpotqa", A),
    ("\\boxed{\\mathit{I don't know}}", "7", "math_dapo", A),
    ("\\boxed{\\text{I}\\ \\text{don't}\\ \\text{know}}", "7", "math_dapo", A),
    ("\\boxed{\\textrm{Paris}}", "Paris", "hotpotqa", C),
    ("\\boxed{42 = 7}", "7", "math_dapo", I),  # not only the right-hand side
    ("\\boxed{x = 7}", "7", "math_dapo", C),
]
# issue 26: invisible format characters (category Cf) never make a right answer wrong; visible digits of
# other scripts are digits
INVISIBLE_ROWS = [
    ("\\boxed{1\u200b200}", "1200", "math_dapo", C),  # zero-width space inside the number
    ("\\boxed{\u200f1200\u200e}", "1200", "math_dapo", C),  # right-to-left / left-to-right marks around it
    ("\\boxed{\u2066-3\u2069}", "-3", "math_dapo", C),  # an isolate
    ("\\boxed{\ufeff\\frac{1}{2}}", "0.5", "math_dapo", C),  # a byte-order mark
    ("\\boxed{1\u00ad200}", "1200", "math_dapo", C),  # a soft hyphen
    ("\\boxed{1\u200b201}", "1200", "math_dapo", I),  # still the wrong number
    ("\\boxed{\uff11\uff12\uff10\uff10}", "1200", "math_dapo", C),  # full-width digits
    ("\\boxed{\u0661\u0662\u0660\u0660}", "1200", "math_dapo", C),  # Arabic-Indic digits
    ("\\boxed{\u200b1200}", "\u200f1200", "math_dapo", C),  # the gold loses them too
    ("\\boxed{Eiffel\u200b Tower}", "Eiffel Tower", "hotpotqa", C),
    ("\\boxed{I don\u200b't know}", "7", "math_dapo", A),
]


@pytest.mark.parametrize(("response", "gold", "want"), MATH_CASES)
def test_math_cases(pool, response: str, gold: str, want: Outcome) -> None:
    assert grade(response, gold, "math_dapo", pool=pool).outcome is want


@pytest.mark.parametrize(("response", "gold", "want"), QA_CASES)
def test_qa_cases(response: str, gold: str, want: Outcome) -> None:
    res = grade(response, gold, "hotpotqa")
    assert res.outcome is want
    if want is not Outcome.ABSTAIN:
        assert res.f1 is not None


@pytest.mark.parametrize(("response", "gold", "source", "want"), ISSUE_ROWS)
def test_issue_12_rows(pool, response: str, gold: str, source: str, want: Outcome) -> None:
    res = grade(response, gold, source, pool=pool)
    assert (res.outcome, res.grader_error, res.timed_out) == (want, "", False)


@pytest.mark.parametrize(("response", "gold", "source", "want"), INVISIBLE_ROWS)
def test_invisible_format_characters_never_change_a_verdict(pool, response: str, gold: str, source: str, want: Outcome) -> None:
    res = grade(response, gold, source, pool=pool)
    assert (res.outcome, res.grader_error, res.timed_out) == (want, "", False)


def test_grading_kinds_of_issue_26_through_grade(pool) -> None:
    # the whole path (extraction, fast path, math-verify): the malformed command, tiny exact values, E-notation
    rows = [("\\boxed{5\\sqrt(3)}", "5", I), ("\\boxed{\\frac{1}{3^{60}}}", "\\frac{1}{3^{59}}", I),
            ("\\boxed{1.2e3}", "1200", C), ("\\boxed{1.2 \\times 10^{3}}", "1200", C), ("\\boxed{i^2}", "-1", I)]
    got = grade_batch([r for r, _, _ in rows], [g for _, g, _ in rows], ["math_dapo"] * len(rows), pool=pool)
    assert [(g.outcome, g.grader_error) for g in got] == [(want, "") for _, _, want in rows]


def test_batch_keeps_order_and_abstention_is_never_an_answer(pool) -> None:
    cases = MATH_CASES + QA_CASES + [(r, g, w) for r, g, _, w in ISSUE_ROWS]
    sources = ["math_dapo"] * len(MATH_CASES) + ["hotpotqa"] * len(QA_CASES) + [s for _, _, s, _ in ISSUE_ROWS]
    got = [r.outcome for r in grade_batch([c[0] for c in cases], [c[1] for c in cases], sources, pool=pool)]
    assert got == [c[2] for c in cases]
    # gold "I don't know" cannot make an abstention correct
    assert grade("\\boxed{I don't know}", "I don't know", "hotpotqa").outcome is Outcome.ABSTAIN


PATHOLOGICAL = [
    ("\\boxed{" + "{" * 3000, "no_answer"),
    ("1+" * 100_000, "no_answer"),
    ("\\boxed{" + "1+" * 400 + "1}", "screened_length"),
    ("\\boxed{9^{9^{9^9}}}", "screened_big_exponent"),
    ("\\boxed{\\dfrac{3^{(3^{(3^{(3^3)})} - 2)} - 3}{8}}", "screened_power_tower"),
    ("\\boxed{" + "(" * 40 + "1" + ")" * 40 + "}", "screened_nesting"),
    ("\\boxed{1000000!}", "screened_big_number"),
    ("\\boxed{\\prod_{k=1}^{1000000} k}", "screened_big_sum"),
    ("\\boxed{\\int_0^1 x^{1000000} dx}", "screened_big_exponent"),
    ("", "no_answer"),
    (None, "no_answer"),
    (12345, "no_answer"),
    (["\\boxed{1}"], "no_answer"),
]


@pytest.mark.parametrize(("response", "detail"), PATHOLOGICAL, ids=range(len(PATHOLOGICAL)))
def test_pathological_inputs_are_decided_before_math_verify(pool, response, detail: str) -> None:
    start = time.perf_counter()
    res = grade(response, "1", "math_dapo", pool=pool)
    elapsed = time.perf_counter() - start
    assert (res.outcome, res.detail, res.timed_out) == (Outcome.INCORRECT, detail, False)
    assert elapsed < 0.1, f"took {elapsed:.3f}s"  # microseconds of work; generous for a loaded box


def test_the_cascade_of_issue_12_cannot_happen(pool) -> None:
    # the tower used to time out and leave a cold worker, so the ellipse after it timed out too
    for _ in range(4):
        tower, ellipse = grade_batch(
            ["\\boxed{\\dfrac{3^{(3^{(3^{(3^3)})} - 2)} - 3}{8}}", "\\boxed{5x^2+9y^2=45}"],
            ["7", "\\frac{x^2}{9}+\\frac{y^2}{5}=1"], ["math_dapo"] * 2, pool=pool,
        )
        assert (tower.outcome, tower.timed_out) == (Outcome.INCORRECT, False)
        assert (ellipse.outcome, ellipse.timed_out) == (Outcome.CORRECT, False)


@pytest.mark.slow  # a math-verify worker pool of its own: ~5 CPU-s of children (the budget guard's limit)
def test_timeout_is_reported_and_batch_survives(pool, monkeypatch) -> None:
    monkeypatch.setattr(grading, "screen", lambda answer: None)  # let the tower reach its worker
    responses = ["\\boxed{9^{9^{9^9}}}", "\\boxed{\\frac{2}{4}}", "x" * 200_000 + "\\boxed{42}", "\\boxed{\\log_2 4}"]
    res = grade_batch(responses, ["1", "0.5", "42", "2"], ["math_dapo"] * 4, pool=pool)
    assert res[0].timed_out and res[0].detail == "timeout" and res[0].outcome is Outcome.INCORRECT
    assert [r.outcome for r in res[1:]] == [Outcome.CORRECT] * 3
    # the killed worker was replaced: the pool still answers
    assert grade("\\boxed{(x+1)^2}", "x^2+2x+1", "math_dapo", pool=pool).detail == "math_verify"


def test_crashed_worker_is_replaced(pool) -> None:
    """A worker that dies inside an item (a math-verify crash) costs that item only: the next one is graded."""
    import os

    crash = pool._pool.schedule(os._exit, args=(3,))
    with pytest.raises(Exception):
        crash.result(timeout=60)
    res = grade("\\boxed{\\frac{1}{\\sqrt{2}}}", "\\frac{\\sqrt{2}}{2}", "math_dapo", pool=pool)
    assert (res.outcome, res.detail) == (Outcome.CORRECT, "math_verify")


@pytest.mark.parametrize("template", ["\\boxed{{{}}}", "{}", "Answer: {}", "\\boxed{{\\text{{{}}}}}"])
def test_model_output_is_never_executed(pool, tmp_path: Path, template: str) -> None:
    target = tmp_path / "pwned"
    payload = f"__import__('os').system('touch {target}')"
    for source, gold in (("math_dapo", "1"), ("hotpotqa", "Paris")):
        res = grade(template.format(payload), gold, source, pool=pool)
        assert res.outcome is Outcome.INCORRECT
    assert not target.exists()


def test_grade_async_matches_grade(pool) -> None:
    async def run():
        return await asyncio.gather(*(grade_async(r, g, "math_dapo", pool=pool) for r, g, _ in MATH_CASES))

    got = asyncio.run(run())
    assert [r.outcome for r in got] == [c[2] for c in MATH_CASES]


BAD_ROWS = [  # (gold, data_source, words of the reason)
    ("  ", "math_dapo", "gold answer"),
    ("", "hotpotqa", "gold answer"),
    (None, "math_dapo", "gold answer"),
    (["4"], "hotpotqa", "gold answer"),
    ({"a": 1}, "math_dapo", "gold answer"),
    ("4", "gsm8k", "unknown data_source 'gsm8k'"),
    ("4", None, "unknown data_source None"),
    ("4", ["math_dapo"], "unknown data_source"),
]


@pytest.mark.parametrize(("gold", "source", "reason"), BAD_ROWS)
def test_a_row_that_cannot_be_graded_is_an_outcome_not_an_exception(pool, gold, source, reason: str) -> None:
    before = error_counts()["data"]
    for response in ("\\boxed{4}", "\\boxed{I don't know}", None):
        res = grade(response, gold, source, pool=pool)
        assert res.outcome is Outcome.INCORRECT and res.detail == "grader_error"
        assert res.grader_error.startswith("data: ") and reason in res.grader_error
    assert error_counts()["data"] == before + 3
    got = asyncio.run(grade_async("\\boxed{4}", gold, source, pool=pool))
    assert got.outcome is Outcome.INCORRECT and got.grader_error


def test_a_hostile_gold_is_a_grader_error(pool) -> None:
    res = grade("\\boxed{2}", "9^{9^{9^9}}", "math_dapo", pool=pool)
    assert res.outcome is Outcome.INCORRECT and res.grader_error.startswith("gold: ")
    # an identical answer is still recognised without math-verify
    assert grade("\\boxed{9^{9^{9^9}}}", "9^{9^{9^9}}", "math_dapo", pool=pool).outcome is Outcome.CORRECT


def test_a_failing_pool_is_a_grader_error_for_math_items_only(monkeypatch, caplog) -> None:
    def broken(timeout_s):
        raise RuntimeError("workers cannot start")

    monkeypatch.setattr(grading, "shared_pool", broken)
    res = grade_batch(["\\boxed{\\log_2 4}", "\\boxed{\\sqrt{4}}", "\\boxed{Paris}"], ["2", "2", "Paris"], ["math_dapo", "math_dapo", "hotpotqa"])
    assert res[0].outcome is Outcome.INCORRECT and res[0].grader_error.startswith("pool: ")
    assert [r.outcome for r in res[1:]] == [Outcome.CORRECT] * 2  # decided without the pool
    got = asyncio.run(grade_async("\\boxed{\\log_2 4}", "2", "math_dapo"))
    assert got.grader_error.startswith("pool: ")


def test_a_math_verify_failure_is_a_grader_error() -> None:
    from rlec.grading.math import MathVerifyPool

    closed = MathVerifyPool(max_workers=1, timeout_s=2.0)
    closed.close()
    res = grade("\\boxed{\\log_2 4}", "2", "math_dapo", pool=closed)
    assert res.outcome is Outcome.INCORRECT and res.grader_error.startswith("math_verify: ")


def test_a_bug_in_grading_code_is_counted_and_logged_once(monkeypatch, caplog, internal_errors_expected) -> None:
    def buggy(gold, pred):
        raise IndexError("a bug")

    monkeypatch.setattr(grading, "fast_verdict", buggy)
    monkeypatch.setattr(grading.errors, "_logged", set())  # as in a fresh process
    before = error_counts()["internal"]
    with caplog.at_level(logging.DEBUG, logger="rlec.grading"):
        res = grade_batch(["\\boxed{1}", "\\boxed{2}", "\\boxed{Paris}"], ["1", "2", "Paris"], ["math_dapo", "math_dapo", "hotpotqa"])
    assert [r.grader_error for r in res[:2]] == ["internal: IndexError: a bug"] * 2
    assert res[2].outcome is Outcome.CORRECT
    assert error_counts()["internal"] == before + 2
    errors = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(errors) == 1 and errors[0].levelno == logging.ERROR and errors[0].exc_info is not None


def test_errors_name_the_problem() -> None:
    with pytest.raises(ValueError, match="unknown data_source 'gsm8k'"):
        task_for("gsm8k")
    with pytest.raises(ValueError, match="lengths differ"):
        grade_batch(["a"], ["1", "2"], ["math_dapo"])


def test_register_data_source() -> None:
    register_data_source("gsm8k_test_only", "math")
    try:
        assert task_for("gsm8k_test_only") == "math"
        with pytest.raises(ValueError, match="already graded"):
            register_data_source("hotpotqa", "math")
        with pytest.raises(ValueError, match="task must be"):
            register_data_source("x", "code")
    finally:
        TASKS.pop("gsm8k_test_only")
