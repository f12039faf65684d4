"""Addition in the learning demo's phrasing: ``What is a + b?`` with two (d + 1)-digit operands.

Difficulty d: both operands have exactly d + 1 digits (d = 0: 0-9, as the demo's one-digit sums;
d = 1: 10-99; ...). The task text is the demo's own (``rlec.prompts.math_task("What is a + b?")``),
so the demo's warm start (``rlec.demo.warm_start``, which draws its problems with
:func:`draw_operands`) knows the phrasing: it solves d = 0 and part of d = 1 and none of d >= 2,
the spread RLVE's adaptive difficulty needs at toy scale (``python -m rlec.experiments rlve``).
:class:`rlec.environments.arithmetic.Arithmetic` is the harder, differently phrased environment
(+, -, x of d + 2 digits). The answer is one integer; the score is 1 for the exact sum, else 0.
"""

from __future__ import annotations

import random
from typing import Any

from rlec.environments.arithmetic import Arithmetic
from rlec.environments.base import Environment
from rlec.prompts import math_task

QUESTION = "What is {a} + {b}?"


def draw_operands(rng: random.Random, digits: int) -> tuple[int, int]:
    """Two operands of exactly ``digits`` digits, uniform, drawn in order a then b (the demo's warm start draws so).

    Args:
        digits: operand digit count, >= 1.

    Returns:
        ``(a, b)``, each in [10^(digits-1), 10^digits - 1], or in [0, 9] for one digit.

    Raises:
        ValueError: ``digits < 1``.
    """
    if digits < 1:
        raise ValueError(f"digits must be >= 1, got {digits}")
    lo, hi = (0 if digits == 1 else 10 ** (digits - 1)), 10**digits - 1
    return rng.randint(lo, hi), rng.randint(lo, hi)


class Addition(Environment):
    """``What is a + b?`` with two (d + 1)-digit operands (the demo's phrasing)."""

    name = "addition"
    difficulty_scale = "both operands have d + 1 digits"
    max_difficulty = 38  # 39-digit operands

    def _generate(self, rng: random.Random, difficulty: int) -> tuple[str, str, dict[str, Any]]:
        a, b = draw_operands(rng, difficulty + 1)
        return math_task(QUESTION.format(a=a, b=b)), str(a + b), {"a": a, "b": b, "value": a + b}

    check = Arithmetic.check  # the exact integer in ``data["value"]``: 1 right, else 0 ("unparsable" / "wrong")
