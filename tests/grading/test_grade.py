"""grade()/grade_batch(): the cases the grader must get right, and hostile inputs."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from rlec.grading import TASKS, grade, grade_async, grade_batch, register_data_source, task_for
from rlec.grading.math import MathVerifyPool
from rlec.reward.formula import Outcome

TIMEOUT_S = 2.0


@pytest.fixture(scope="module")
def pool():
    p = MathVerifyPool(max_workers=2, timeout_s=TIMEOUT_S)
    yield p
    p.close()


MATH_CASES = [
    ("The answer is \\boxed{\\frac{1}{2}}", "0.5", Outcome.CORRECT),
    ("\\boxed{\\dfrac{1}{2}}", "0.5", Outcome.CORRECT),
    ("\\boxed{1,000}", "1000", Outcome.CORRECT),
    ("\\boxed{x=2}", "2", Outcome.CORRECT),
    ("\\boxed{\\boxed{4}}", "4", Outcome.CORRECT),
    ("wrong first \\boxed{3}, fixed: \\boxed{4}", "4", Outcome.CORRECT),
    ("\\boxed{4} but then \\boxed{3}", "4", Outcome.INCORRECT),
    ("Answer: 3, 5", "35", Outcome.INCORRECT),
    ("\\boxed{-3}", "3", Outcome.INCORRECT),
    ("\\boxed{(2,1)}", "(1,2)", Outcome.INCORRECT),
    ("\\boxed{50\\%}", "0.5", Outcome.CORRECT),
    ("\\boxed{12.}", "12", Outcome.CORRECT),
    ("\\boxed{I don't know}", "12", Outcome.ABSTAIN),
    ("no final answer here", "12", Outcome.INCORRECT),
]
QA_CASES = [
    ("\\boxed{Yes.}", "yes", Outcome.CORRECT),
    ("\\boxed{yes it is}", "yes", Outcome.INCORRECT),
    ("\\boxed{the Eiffel Tower}", "Eiffel Tower", Outcome.CORRECT),
    ("\\boxed{I do not know}", "Eiffel Tower", Outcome.ABSTAIN),
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


def test_batch_keeps_order_and_abstention_is_never_an_answer(pool) -> None:
    responses = [c[0] for c in MATH_CASES] + [c[0] for c in QA_CASES]
    golds = [c[1] for c in MATH_CASES] + [c[1] for c in QA_CASES]
    sources = ["math_dapo"] * len(MATH_CASES) + ["hotpotqa"] * len(QA_CASES)
    got = [r.outcome for r in grade_batch(responses, golds, sources, pool=pool)]
    assert got == [c[2] for c in MATH_CASES] + [c[2] for c in QA_CASES]
    # gold "I don't know" cannot make an abstention correct
    assert grade("\\boxed{I don't know}", "I don't know", "hotpotqa").outcome is Outcome.ABSTAIN


PATHOLOGICAL = [
    "\\boxed{" + "{" * 3000,
    "1+" * 100_000,
    "\\boxed{" + "1+" * 400 + "1}",
    "\\boxed{9^{9^{9^9}}}",
    "",
    None,
    12345,
    ["\\boxed{1}"],
]


@pytest.mark.parametrize("response", PATHOLOGICAL, ids=range(len(PATHOLOGICAL)))
def test_pathological_inputs_finish_within_timeout(pool, response) -> None:
    start = time.perf_counter()
    res = grade(response, "1", "math_dapo", pool=pool)
    elapsed = time.perf_counter() - start
    assert elapsed < TIMEOUT_S + 1.0, f"took {elapsed:.2f}s"
    assert res.outcome is Outcome.INCORRECT


def test_timeout_is_reported_and_batch_survives(pool) -> None:
    responses = ["\\boxed{9^{9^{9^9}}}", "\\boxed{\\frac{2}{4}}", "x" * 200_000 + "\\boxed{42}", "\\boxed{\\sqrt{4}}"]
    golds = ["1", "0.5", "42", "2"]
    res = grade_batch(responses, golds, ["math_dapo"] * 4, pool=pool)
    assert res[0].timed_out and res[0].detail == "timeout" and res[0].outcome is Outcome.INCORRECT
    assert [r.outcome for r in res[1:]] == [Outcome.CORRECT] * 3
    # the killed worker was replaced: the pool still answers
    assert grade("\\boxed{\\frac{3}{6}}", "1/2", "math_dapo", pool=pool).outcome is Outcome.CORRECT


def test_crashed_worker_is_replaced(pool) -> None:
    import os

    crash = pool._pool.schedule(os._exit, args=(3,))
    with pytest.raises(Exception):
        crash.result(timeout=30)
    assert grade("\\boxed{\\frac{4}{8}}", "0.5", "math_dapo", pool=pool).outcome is Outcome.CORRECT


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


def test_errors_name_the_problem() -> None:
    with pytest.raises(ValueError, match="unknown data_source 'gsm8k'"):
        task_for("gsm8k")
    with pytest.raises(ValueError, match="item 1: gold answer"):
        grade_batch(["\\boxed{1}", "\\boxed{2}"], ["1", "  "], ["math_dapo", "math_dapo"])
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
