"""Every shipped math answer, recomputed independently (sympy / plain Python), matches the gold."""

from __future__ import annotations

from fractions import Fraction as F
from math import comb, factorial, gcd, isqrt

import sympy as sp

from rlec.data.prepare import SAMPLE_FILES
from rlec.data.sources import load_items, parse_math

x, y = sp.symbols("x y")


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


# (snippet of the problem, independently computed answer), in file order
EXPECTED = [
    ("sum of all positive divisors of $36$", sum(_divisors(36))),
    ("divisible by $3$ or by $7$", sum(1 for n in range(1, 100) if n % 3 == 0 or n % 7 == 0)),
    ("$2^{2024}$ is divided by $7$", pow(2, 2024, 7)),
    ("Find $a^2 + b^2$", sum(r**2 for r in sp.solve(x**2 - 13 * x + 40, x))),
    ("word LEVEL", factorial(5) // (factorial(2) * factorial(2))),
    ("$1 + 2 + 3 + \\cdots + 50$", sum(range(1, 51))),
    ("legs of lengths $20$ and $21$", isqrt(20**2 + 21**2)),
    ("$n!$ is divisible by $1000$", next(n for n in range(1, 50) if factorial(n) % 1000 == 0)),
    ("\\frac{1}{99 \\cdot 100}", sum(F(1, k * (k + 1)) for k in range(1, 100))),
    ("vertices $(0,0)$, $(6,0)$ and $(2,5)$", F(abs(6 * 5 - 0 * 2), 2)),
    ("$1071$ and $462$", gcd(1071, 462)),
    ("$3$-element subsets", comb(10, 3)),
    ("$f(f(f(1)))$", (lambda f: f(f(f(1))))(lambda t: 3 * t + 2)),
    ("end of the decimal representation of $200!$", len(str(factorial(200))) - len(str(factorial(200)).rstrip("0"))),
    ("\\log_2 x + \\log_2 (x - 2) = 3", [s for s in sp.solve(x * (x - 2) - 8, x) if s > 2][0]),
    ("\\sin 60^\\circ \\cdot \\cos 30^\\circ", sp.sin(sp.pi / 3) * sp.cos(sp.pi / 6)),
    ("$(1,1)$ and $(4,4)$", sp.sqrt(3**2 + 3**2)),
    ("$10$th term", 7 + 9 * 4),
    ("convex octagon", (8 - 2) * 180),
    ("sum of the two rolls is $7$", F(sum(1 for a in range(1, 7) for b in range(1, 7) if a + b == 7), 36)),
    ("divisors does $720$ have", len(_divisors(720))),
    ("$17^2 - 13^2$", 17**2 - 13**2),
    ("largest prime factor of $2023$", max(sp.factorint(2023))),
    ("$7^{100}$ is divided by $100$", pow(7, 100, 100)),
    ("x + \\frac{1}{x} = 5", sp.nsimplify(sp.solve(x + 1 / x - 5, x)[0] ** 2 + 1 / sp.solve(x + 1 / x - 5, x)[0] ** 2).simplify()),
    ("|n - 3| \\le 4", sum(1 for n in range(-100, 100) if abs(n - 3) <= 4)),
    ("surface area $150$", sp.Rational(150, 6) ** sp.Rational(3, 2)),
    ("Find $xy$", (lambda s: s[x] * s[y])(sp.solve([x + y - 10, x - y - 4], [x, y]))),
    ("convex decagon", 10 * (10 - 3) // 2),
    ("x^2 + y^2 - 6x + 8y = 0", sp.pi * (3**2 + 4**2)),
    ("remainder of $2$ when divided by each", next(n for n in range(3, 1000) if n % 3 == n % 4 == n % 5 == 2)),
    ("$2$ women and $3$ men", comb(5, 2) * comb(6, 3)),
    ("first $20$ odd positive integers", sum(range(1, 40, 2))),
    ("$3^x = 81$", 2 ** (sp.solve(3**x - 81, x)[0] + 1)),
    ("\\sqrt{50} + \\sqrt{18}", sp.sqrt(50) + sp.sqrt(18)),
    ("x^3 - 6x^2 + 11x - 6 = 0", sp.prod(sp.solve(x**3 - 6 * x**2 + 11 * x - 6, x))),
    ("median of the numbers", F(sorted([3, 9, 4, 12, 8, 7])[2] + sorted([3, 9, 4, 12, 8, 7])[3], 2)),
    ("digits of $2^{10}$", sum(map(int, str(2**10)))),
    ("digits whose sum is $9$", sum(1 for n in range(10, 100) if sum(map(int, str(n))) == 9)),
    ("$(1 + i)^8$", sp.expand((1 + sp.I) ** 8)),
    ("perfect squares or perfect cubes", sum(1 for n in range(1, 51) if isqrt(n) ** 2 == n or round(n ** (1 / 3)) ** 3 == n)),
    ("minimum value of $x^2 - 8x + 21$", sp.minimum(x**2 - 8 * x + 21, x)),
]


def _gold_to_sympy(gold: str) -> sp.Expr:
    """The few LaTeX forms the samples use: integers, \\frac{a}{b}, a\\sqrt{b}, a\\pi."""
    expr = gold.replace("\\frac{", "(").replace("}{", ")/(").replace("\\sqrt{", "*sqrt(").replace("\\pi", "*pi").replace("}", ")")
    return sp.sympify(expr.lstrip("*"))


def test_every_sample_answer_is_right():
    items = load_items(SAMPLE_FILES["dapo"], parse_math).items
    assert len(items) == len(EXPECTED)
    for item, (snippet, value) in zip(items, EXPECTED):
        assert snippet in item.problem, (snippet, item.problem)
        assert sp.simplify(_gold_to_sympy(item.answer) - sp.sympify(value)) == 0, (item.problem, item.answer, value)
