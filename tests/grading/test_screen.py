"""The hostile-input screen: hostile forms are caught in microseconds, normal answers never are."""

from __future__ import annotations

import importlib.util
import json
import random
import sys
import time
from pathlib import Path

import pytest

from rlec.grading.extract import extract
from rlec.grading.screen import MAX_NESTING, nesting_depth, screen

ROOT = Path(__file__).resolve().parents[2]

# Final answers of the forms a math benchmark holds (MATH / DAPO style), written as models write them.
NORMAL = [
    "\\frac{\\sqrt{3}}{2}", "\\left(\\frac{1}{2}\\right)^{2}", "\\frac{1}{1+\\frac{1}{1+\\frac{1}{2}}}", "((1+2)\\cdot 3)",
    "2^{2023}", "x^{2023}", "2^{2^{2^{2}}}", "3^{3^{3}}", "e^{x^2}", "e^{-\\frac{x^2}{2}}", "\\sum_{k=1}^{2023} k",
    "\\binom{10}{3}", "\\binom{2n}{n}", "100!", "20000!", "\\begin{pmatrix}1&2\\\\3&4\\end{pmatrix}", "[2, \\infty)",
    "(-\\infty, -1) \\cup (2, \\infty)", "\\{1,2,3\\}", "3\\sqrt{2}", "10^{100}", "2^{100000}", "1.5^{10}",
    "\\frac{-b \\pm \\sqrt{b^2-4ac}}{2a}", "x^{x^{x^{x}}}", "\\log_2 (2^{1000})", "\\sqrt[3]{2}", "\\int_0^1 x^{2}\\,dx",
    "0." + "3" * 300, "7" * 400, "12,345", "1, 100", "35\\%", "x \\ge 2", "1 < x \\le 3", "\\text{Monday}", "(3, -4)",
    "\\left[ -\\frac{1}{2}, \\frac{3}{2} \\right)", "\\frac{\\pi}{3}", "60^\\circ", "1+2i", "\\cos^{2}\\theta",
    "f(x) = 2x+1", "\\dfrac{3^{10} - 3}{8}", "\\left\\lfloor \\frac{n}{2} \\right\\rfloor", "((((((((1))))))))",
]
HOSTILE = [
    ("x" * 1001, "length"),
    ("+".join(["x^{2}"] * 50), "length"),  # 250 tokens
    ("(" * 9 + "1" + ")" * 9, "nesting"),
    ("{" * 400 + "1" + "}" * 400, "nesting"),
    ("\\frac{" * 20 + "1" + "}{2}" * 20, "nesting"),
    ("\\{" * 9 + "1" + "\\}" * 9, "nesting"),
    ("e^{e^{e^{e^{e}}}}", "power_tower"),
    ("\\dfrac{3^{(3^{(3^{(3^3)})} - 2)} - 3}{8}", "power_tower"),
    ("9^{9^{9^9}}", "big_exponent"),
    ("9^9^9^9", "big_exponent"),  # no braces: bounded as the tower 9^(9^(9^9))
    ("3^{3^{3^{3}}}", "big_exponent"),
    ("10^{10^{7}}", "big_exponent"),
    ("x^{10^{100}}", "big_exponent"),
    ("\\left(\\frac{1}{2}\\right)^{1000000}", "big_exponent"),
    ("2^{100001}", "big_exponent"),
    ("\\int_0^1 x^{1000000} dx", "big_exponent"),
    ("30000!", "big_number"),
    ("(10^{7})!", "big_number"),
    ("\\binom{100000}{50000}", "big_number"),
    ("99999^{30000}", "big_number"),
    ("\\prod_{k=1}^{1000000} k", "big_sum"),
    ("\\sum_{n=1}^{10^{9}} n!", "big_sum"),
]


@pytest.mark.parametrize("answer", NORMAL)
def test_normal_answers_pass(answer: str) -> None:
    assert screen(answer) is None


@pytest.mark.parametrize(("answer", "rule"), HOSTILE)
def test_hostile_answers_are_caught_by_their_rule(answer: str, rule: str) -> None:
    assert screen(answer) == rule


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_benchmark_and_sample_answers_all_pass() -> None:
    bench = _load("reward_throughput_for_screen", ROOT / "benchmarks" / "reward_throughput.py")
    items = bench.make_batch(2000, seed=0, pathological_frac=0.0)
    answers = [ex.answer for it in items if it.data_source == "math_dapo" and (ex := extract(it.response)).answer]
    rows = (json.loads(line) for line in (ROOT / "rlec" / "data" / "samples" / "dapo_math_sample.jsonl").open())
    golds = [r["reward_model"]["ground_truth"] for r in rows] + list({it.gold for it in items})
    assert len(answers) > 500
    assert [a for a in answers + golds if screen(a) is not None] == []


def test_nesting_depth_counts_all_brackets_together() -> None:
    assert nesting_depth("[2, \\infty)") == 1
    assert nesting_depth("\\{(1, [2])\\}") == 3
    assert nesting_depth("}}}{") == 1  # closers before any opener do not go negative
    assert nesting_depth("(" * MAX_NESTING + ")" * MAX_NESTING) == MAX_NESTING


def test_screen_is_fast_on_every_hostile_shape() -> None:
    # linear time: a quadratic reader would take seconds on these (the numbers are printed, not timed tests)
    shapes = [text for text, _ in HOSTILE] + ["(" * 1000, "\\boxed{" * 140, "1+" * 499, "^{" * 300, "9^" * 400 + "9", "!" * 999]
    worst = 0.0
    for text in shapes:
        start = time.perf_counter()
        screen(text)
        worst = max(worst, time.perf_counter() - start)
    print(f"slowest screen call: {worst * 1e6:.0f} us")
    assert worst < 0.05


def test_screen_never_raises_on_random_latex() -> None:
    rng = random.Random(0)
    pieces = ["{", "}", "(", ")", "[", "]", "\\{", "\\}", "^", "_", "!", "'", "1", "99", "0.5", "x", "\\frac", "\\binom",
              "\\sqrt", "[3]", "\\sum", "\\prod", "\\left(", "\\right)", "\\cdot", "+", "-", "=", ",", "&", "\\\\", " ",
              "\\text", "\\pi", "%", "\\", "$", "\\,"]
    for _ in range(3000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 60)))
        assert screen(text) in (None, "length", "nesting", "power_tower", "big_exponent", "big_number", "big_sum")
