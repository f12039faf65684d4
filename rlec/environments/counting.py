"""Counting with exact answers: distributions of identical items with upper bounds.

"In how many ways can s identical coins be given to k children so that child i gets at most u_i
coins?" = the number of integer solutions of x_1 + ... + x_k = s with 0 <= x_i <= u_i, computed
exactly by dynamic programming (the coefficient of t^s in prod_i (1 + t + ... + t^{u_i})).

Difficulty d: k = 2 + d // 2 children, bounds u_i in [1, 3 + d], s drawn uniformly from
[0, sum u_i]. The answer is one integer; the score is 1 for the exact count, else 0.
"""

from __future__ import annotations

import random
from typing import Any, Sequence

from rlec.environments.base import Environment, Problem, parse_int


def bounded_compositions(total: int, bounds: Sequence[int]) -> int:
    """The number of (x_1..x_k) with sum ``total`` and 0 <= x_i <= bounds[i] (exact)."""
    ways = [1] + [0] * total  # ways[t]: solutions over the children so far with sum t
    for u in bounds:
        prefix = [0]
        for w in ways:
            prefix.append(prefix[-1] + w)
        ways = [prefix[t + 1] - prefix[max(0, t - u)] for t in range(total + 1)]
    return ways[total]


class Counting(Environment):
    """Count bounded distributions of identical items, k = 2 + d // 2 recipients."""

    name = "counting"
    difficulty_scale = "k = 2 + d // 2 recipients, each with an upper bound in [1, 3 + d]"
    max_difficulty = 40

    def _generate(self, rng: random.Random, difficulty: int) -> tuple[str, str, dict[str, Any]]:
        k = 2 + difficulty // 2
        bounds = [rng.randint(1, 3 + difficulty) for _ in range(k)]
        total = rng.randint(0, sum(bounds))
        limits = "; ".join(f"child {i + 1} at most {u}" for i, u in enumerate(bounds))
        prompt = (f"In how many ways can {total} identical coins be given to {k} children ({limits})? Every coin "
                  "must be given out; a child may get no coins. Give the number of ways as an integer.")
        count = bounded_compositions(total, bounds)
        return prompt, str(count), {"total": total, "bounds": bounds, "count": count}

    def check(self, answer: str, problem: Problem) -> tuple[float, str]:
        value = parse_int(answer)
        if value is None:
            return 0.0, "unparsable"
        return (1.0, "correct") if value == int(problem.data["count"]) else (0.0, "wrong")
