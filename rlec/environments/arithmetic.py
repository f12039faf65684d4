"""Multi-digit arithmetic: add, subtract or multiply two integers exactly.

Difficulty d: both operands have exactly d + 2 digits (d = 0: two-digit numbers; d = 8: ten
digits, whose product has ~20). The operation is +, - or x with equal probability. The answer is
one integer; the score is 1 for the exact value, else 0.
"""

from __future__ import annotations

import random
from typing import Any

from rlec.environments.base import Environment, Problem, parse_int

OPERATIONS = {"+": "plus", "-": "minus", "*": "times"}


class Arithmetic(Environment):
    """``a op b`` with two (d + 2)-digit operands, op in {+, -, x}."""

    name = "arithmetic"
    difficulty_scale = "both operands have d + 2 digits"
    max_difficulty = 38  # 40-digit operands

    def _generate(self, rng: random.Random, difficulty: int) -> tuple[str, str, dict[str, Any]]:
        digits = difficulty + 2
        a, b = (rng.randrange(10 ** (digits - 1), 10**digits) for _ in range(2))
        op = rng.choice(sorted(OPERATIONS))
        value = a + b if op == "+" else a - b if op == "-" else a * b
        symbol = {"+": "+", "-": "-", "*": "\\times"}[op]
        prompt = f"Compute the exact value of ${a} {symbol} {b}$. Give the result as an integer, without separators."
        return prompt, str(value), {"a": a, "b": b, "op": op, "value": value}

    def check(self, answer: str, problem: Problem) -> tuple[float, str]:
        value = parse_int(answer)
        if value is None:
            return 0.0, "unparsable"
        return (1.0, "correct") if value == int(problem.data["value"]) else (0.0, "wrong")
