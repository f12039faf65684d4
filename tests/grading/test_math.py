"""The math fast path and the math-verify pool."""

from __future__ import annotations

import pytest

from rlec.grading.math import MathVerifyPool, fast_verdict, normalize_math


@pytest.mark.parametrize(
    ("gold", "pred", "want"),
    [
        ("1000", "1,000", True),
        ("0.5", "\\frac{1}{2}", True),
        ("\\frac{3}{4}", "6/8", True),
        ("-\\frac{1}{2}", "-0.5", True),
        ("2", "x = 2", True),
        ("50", "50\\%", True),
        ("0.5", "50\\%", True),
        ("12", "12.", True),
        ("(1,2)", "\\left( 1, 2 \\right)", True),
        ("3", "-3", False),
        ("\\frac{1}{2}", "\\frac{1}{3}", False),
        ("35", "3, 5", None),  # not a plain number: math-verify decides
        ("2\\sqrt{3}", "\\sqrt{12}", None),
        ("3", "\\frac{3}{0}", None),
        ("x=2", "y=2", None),
    ],
)
def test_fast_verdict(gold: str, pred: str, want: bool | None) -> None:
    assert fast_verdict(gold, pred) is want


def test_normalize_math() -> None:
    assert normalize_math("$\\dfrac{1}{2}$.") == "\\frac{1}{2}"
    assert normalize_math("\\left( 1,\\, 2 \\right)") == "(1,2)"


def test_pool_rejects_bad_timeout() -> None:
    with pytest.raises(ValueError, match="timeout_s"):
        MathVerifyPool(timeout_s=0)


def test_pool_verify_many_in_order() -> None:
    pool = MathVerifyPool(max_workers=1, timeout_s=5)
    try:
        res = pool.verify_many([("2\\sqrt{3}", "\\sqrt{12}"), ("(1,2)", "(2,1)"), ("35", "3, 5")])
        assert [r.equal for r in res] == [True, False, False]
        assert not any(r.timed_out for r in res)
    finally:
        pool.close()
