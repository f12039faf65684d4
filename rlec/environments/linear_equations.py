"""Linear equations: solve a square system with a unique integer solution.

Difficulty d: k = 1 + d // 2 unknowns (x, y, z, w, u, v, s, t; at most 8), coefficients in
[-(2 + d), 2 + d], solution values in [-(5 + d), 5 + d]. The coefficient matrix is drawn until its
determinant (exact, with fractions) is non-zero, so the solution is unique. The answer lists the
values in the order of the unknowns (``3, -1``) or names them (``x = 3, y = -1``, any order); the
score is the share of unknowns right (1 when all are).
"""

from __future__ import annotations

import random
import re
from fractions import Fraction
from typing import Any

from rlec.environments.base import MAX_ANSWER_CHARS, Environment, Problem, parse_int
from rlec.grading.extract import strip_wrappers

NAMES = ("x", "y", "z", "w", "u", "v", "s", "t")
_PAIR = re.compile(r"([a-z])\s*=\s*([^,;=]+)")


def determinant(matrix: list[list[int]]) -> Fraction:
    """Exact determinant by Gaussian elimination over fractions."""
    m = [[Fraction(v) for v in row] for row in matrix]
    n, det = len(m), Fraction(1)
    for col in range(n):
        pivot = next((r for r in range(col, n) if m[r][col] != 0), None)
        if pivot is None:
            return Fraction(0)
        if pivot != col:
            m[col], m[pivot] = m[pivot], m[col]
            det = -det
        det *= m[col][col]
        for r in range(col + 1, n):
            factor = m[r][col] / m[col][col]
            m[r] = [a - factor * b for a, b in zip(m[r], m[col])]
    return det


def _term(coef: int, name: str, first: bool) -> str:
    sign = "-" if coef < 0 else ("" if first else "+")
    mag = abs(coef)
    body = name if mag == 1 else f"{mag}{name}"
    return f"{sign}{body}" if first else f" {sign} {body}"


def render_equation(coefs: list[int], names: tuple[str, ...], rhs: int) -> str:
    """``3x - y + 2z = 7`` (zero coefficients left out; at least one is non-zero)."""
    terms = [(c, v) for c, v in zip(coefs, names) if c != 0]
    return "".join(_term(c, v, i == 0) for i, (c, v) in enumerate(terms)) + f" = {rhs}"


def _parse_value(text: str) -> Fraction | None:
    text = strip_wrappers(text).replace("\\dfrac", "\\frac").strip()
    m = re.fullmatch(r"(-?)\\frac\{(-?\d+)\}\{(-?\d+)\}", text.replace(" ", ""))
    if m:
        num, den = int(m.group(2)), int(m.group(3))
        return None if den == 0 else Fraction(-num if m.group(1) else num, den)
    m = re.fullmatch(r"(-?\d+)\s*/\s*(-?\d+)", text)
    if m:
        return None if int(m.group(2)) == 0 else Fraction(int(m.group(1)), int(m.group(2)))
    value = parse_int(text)
    return None if value is None else Fraction(value)


class LinearEquations(Environment):
    """A k x k integer linear system, k = 1 + d // 2."""

    name = "linear_equations"
    difficulty_scale = "k = 1 + d // 2 unknowns (at most 8), coefficients up to 2 + d in absolute value"
    max_difficulty = 15

    def _generate(self, rng: random.Random, difficulty: int) -> tuple[str, str, dict[str, Any]]:
        k, c_max, x_max = 1 + difficulty // 2, 2 + difficulty, 5 + difficulty
        names = NAMES[:k]
        solution = [rng.randint(-x_max, x_max) for _ in range(k)]
        while True:
            matrix = [[rng.randint(-c_max, c_max) for _ in range(k)] for _ in range(k)]
            if determinant(matrix) != 0:
                break
        rhs = [sum(a * x for a, x in zip(row, solution)) for row in matrix]
        equations = "\n".join(render_equation(row, names, b) for row, b in zip(matrix, rhs))
        unknowns = ", ".join(names)
        if k == 1:
            prompt = f"Solve the equation for x.\n\n{equations}\n\nGive the value of x."
        else:
            prompt = (f"Solve the system of linear equations for {unknowns}.\n\n{equations}\n\n"
                      f"Give the values of {unknowns}, comma-separated in that order.")
        answer = ", ".join(str(v) for v in solution)
        return prompt, answer, {"names": list(names), "matrix": matrix, "rhs": rhs, "solution": solution}

    def check(self, answer: str, problem: Problem) -> tuple[float, str]:
        names, solution = problem.data["names"], problem.data["solution"]
        text = strip_wrappers(answer).replace("\\left", "").replace("\\right", "")[:MAX_ANSWER_CHARS]
        text = text.strip().strip("()[]")
        pairs = _PAIR.findall(text)
        if pairs:
            given = {name: _parse_value(value) for name, value in pairs}
            values = [given.get(name) for name in names]
        else:
            values = [_parse_value(item) for item in re.split(r"[,;]", text) if item.strip()]
            if len(values) != len(names):
                return 0.0, "wrong_length" if values else "unparsable"
        if all(v is None for v in values):
            return 0.0, "unparsable"
        right = sum(v is not None and v == s for v, s in zip(values, solution))
        return right / len(names), "correct" if right == len(names) else "wrong"
