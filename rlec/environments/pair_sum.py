"""Two numbers that add up to N: a task with many right answers per prompt (Pass@k's setting, issue 57 item 5).

``Which two numbers from 0 to m add up to n?`` with m = 10^(d+1) - 1 (d = 0: digits 0-9; d = 1: 0-99) and n the
sum of two operands drawn as the ``addition`` environment draws them (:func:`rlec.environments.addition.draw_operands`
at d + 1 digits), so every prompt is solvable. The answer is ``a + b`` (also ``a, b``) inside ``\\boxed{}``: right
when both are integers in [0, m] and a + b = n. The right answers are the ordered pairs (a, n - a):
:func:`count_right_answers` = min(n, m) - max(0, n - m) + 1 distinct answer strings (up to m + 1 at n = m), against
one for an addition. Pass@k Training (arXiv 2508.10751) argues from tasks with several right answers (its Maze,
Enigmata): pass@1 training can settle on one answer and lose the others, pass@k training keeps them.

The responses use only the tokens of the warm start's additions (digits, `` +``, ``\\boxed{}``); the prompt's
words are new to it, so a warm start for this task must train on it (``rlec.demo.warm_start``: ``pair_sum_share``).
"""

from __future__ import annotations

import random
import re
from typing import Any

from rlec.environments.addition import draw_operands
from rlec.environments.base import Environment, Problem
from rlec.grading.extract import strip_wrappers
from rlec.prompts import math_task

QUESTION = "Which two numbers from 0 to {m} add up to {n}?"
_PAIR = re.compile(r"^\s*(\d+)\s*(?:\+|,)\s*(\d+)\s*\.?\s*$")


def bound(difficulty: int) -> int:
    """m = 10^(d+1) - 1, the largest number allowed at difficulty d."""
    return 10 ** (difficulty + 1) - 1


def count_right_answers(n: int, m: int) -> int:
    """The ordered pairs (a, b), 0 <= a, b <= m, with a + b = n: min(n, m) - max(0, n - m) + 1 (0 when n > 2m or n < 0)."""
    return max(0, min(n, m) - max(0, n - m) + 1)


def answer_text(a: int, b: int) -> str:
    """The answer form a response boxes: ``"a + b"``."""
    return f"{a} + {b}"


class PairSum(Environment):
    """``Which two numbers from 0 to m add up to n?``: every ordered pair (a, n - a) in range is right."""

    name = "pair_sum"
    difficulty_scale = "the numbers range over 0 .. 10^(d+1) - 1 (d = 0: one digit)"
    max_difficulty = 38
    eval_difficulties = (0, 1, 2)

    def _generate(self, rng: random.Random, difficulty: int) -> tuple[str, str, dict[str, Any]]:
        a, b = draw_operands(rng, difficulty + 1)
        m = bound(difficulty)
        return math_task(QUESTION.format(m=m, n=a + b)), answer_text(a, b), {"n": a + b, "m": m}

    def check(self, answer: str, problem: Problem) -> tuple[float, str]:
        found = _PAIR.match(strip_wrappers(answer)) if isinstance(answer, str) and len(answer) < 200 else None
        if found is None:
            return 0.0, "unparsable"
        a, b = int(found.group(1)), int(found.group(2))
        if a > int(problem.data["m"]) or b > int(problem.data["m"]):
            return 0.0, "out_of_range"
        return (1.0, "correct") if a + b == int(problem.data["n"]) else (0.0, "wrong")

    def right_answers(self, problem: Problem) -> int | None:
        """The number of distinct right answers (ordered pairs): :func:`count_right_answers`."""
        return count_right_answers(int(problem.data["n"]), int(problem.data["m"]))
