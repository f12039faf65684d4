"""The many-answer task of Pass@k's experiment (rlec.environments.pair_sum): every ordered pair in range that adds up
to n is right, and the number of distinct right answers per prompt is counted by hand and by brute force."""

from __future__ import annotations

import pytest

from rlec.environments import get_environment
from rlec.environments.pair_sum import count_right_answers


@pytest.mark.parametrize(("n", "m", "count"), [(5, 9, 6), (12, 9, 7), (18, 9, 1), (0, 9, 1), (19, 9, 0), (99, 99, 100),
                                               (150, 99, 49)])
def test_right_answers_by_hand(n: int, m: int, count: int) -> None:
    # (12, 9): (3, 9), (4, 8), ..., (9, 3): 7 pairs; (150, 99): (51, 99) .. (99, 51): 49
    assert count_right_answers(n, m) == count
    assert count == sum(1 for a in range(m + 1) if 0 <= n - a <= m)


def test_the_verifier_takes_every_right_pair_and_nothing_else() -> None:
    env = get_environment("pair_sum")
    problem = env.generate(3, 0)
    n, m = problem.data["n"], problem.data["m"]
    assert m == 9 and problem.prompt.endswith(f"Which two numbers from 0 to 9 add up to {n}?")
    right = {f"{a} + {n - a}" for a in range(10) if 0 <= n - a <= 9}
    assert len(right) == env.right_answers(problem) == count_right_answers(n, 9)
    for answer in right:
        assert env.verify(f"\\boxed{{{answer}}}", problem).correct
        assert env.verify(f"\\boxed{{{answer.replace(' + ', ', ')}}}", problem).correct  # "a, b" too
    assert env.verify(f"\\boxed{{{n} + 0}}", problem).correct == (n <= 9)
    assert env.verify(f"\\boxed{{{n + 1} + 0}}", problem).reason in ("wrong", "out_of_range")
    assert env.verify("\\boxed{10 + -1}", problem).reason == "unparsable"
    assert env.verify(f"\\boxed{{{n}}}", problem).reason == "unparsable"  # one number is no pair
    assert env.verify("\\boxed{I don't know}", problem).reason == "abstain"
    wide = env.generate(3, 1)
    assert wide.data["m"] == 99 and env.verify("\\boxed{100 + 0}", wide).reason == "out_of_range"
