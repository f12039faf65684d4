"""Sorting: list a set of integers in ascending or descending order.

Difficulty d: the list has 5 + 3d numbers drawn (with repeats possible) from
[-10^(1 + d // 3), 10^(1 + d // 3)]. The answer is the sorted list, comma-separated; the score is
the share of positions holding the right number when the answer has the right length (1 exactly
when the whole list is right), else 0.
"""

from __future__ import annotations

import random
from typing import Any

from rlec.environments.base import Environment, Problem, parse_int_list


class Sorting(Environment):
    """Sort 5 + 3d integers."""

    name = "sorting"
    difficulty_scale = "the list has 5 + 3d integers of up to 1 + d // 3 digits"
    max_difficulty = 25  # 80 numbers of up to 9 digits, ~1,100 prompt tokens

    def _generate(self, rng: random.Random, difficulty: int) -> tuple[str, str, dict[str, Any]]:
        n = 5 + 3 * difficulty
        bound = 10 ** (1 + difficulty // 3)
        items = [rng.randint(-bound, bound) for _ in range(n)]
        descending = rng.random() < 0.5
        order = "descending (largest first)" if descending else "ascending (smallest first)"
        solution = sorted(items, reverse=descending)
        prompt = (f"Sort the following {n} integers in {order} order. Keep repeated numbers. Give the sorted "
                  f"list as comma-separated integers.\n\n{', '.join(map(str, items))}")
        return prompt, ", ".join(map(str, solution)), {"items": items, "descending": descending, "solution": solution}

    def check(self, answer: str, problem: Problem) -> tuple[float, str]:
        values = parse_int_list(answer)
        if values is None:
            return 0.0, "unparsable"
        solution = problem.data["solution"]
        if len(values) != len(solution):
            return 0.0, "wrong_length"
        right = sum(v == s for v, s in zip(values, solution))
        return right / len(solution), "correct" if right == len(solution) else "wrong"
