"""Selective-prediction metrics against the hand-worked examples of docs/metrics.md."""

from __future__ import annotations

import math

import numpy as np
import pytest

from rlec.eval.selective import aurc, headlines, rates, risk_coverage_curve
from rlec.reward.formula import rlec_reward

NAMES = ["always_abstain", "always_answer", "calibrated", "conservative", "random"]


def counts_of(worked, name: str) -> np.ndarray:
    """(T, 5) counts of a worked example, rewards summed with rlec.reward.formula.rlec_reward at b = 1."""
    rows = []
    for p in worked.grid:
        letters = worked.examples[name][p]
        reward = sum(rlec_reward(worked.letter[x], p or 0.0, 1.0) for x in letters)
        rows.append([len(letters), letters.count("C"), letters.count("W"), letters.count("A"), reward])
    return np.array(rows, dtype=float)


def _same(actual: float, expected: float | None) -> bool:
    return math.isnan(actual) if expected is None else actual == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize("name", NAMES)
def test_per_target_figures_match_the_worked_example(worked, name: str) -> None:
    r = rates(counts_of(worked, name), worked.grid)
    for i, (cov, sel, acc, reward) in enumerate(worked.per_target[name], start=1):
        p = worked.grid[i]
        assert _same(r["coverage"][i], cov), (name, p)
        assert _same(r["selective_accuracy"][i], sel), (name, p)
        assert _same(r["accuracy"][i], acc), (name, p)
        assert _same(r["reward"][i], reward), (name, p)
        assert _same(r["compliance"][i], None if sel is None else sel - p), (name, p)


@pytest.mark.parametrize("name", NAMES)
def test_headlines_match_the_worked_example(worked, name: str) -> None:
    h = headlines(counts_of(worked, name), worked.grid)
    accuracy, score, area, aoc = worked.headlines[name]
    assert float(h["accuracy"]) == pytest.approx(accuracy)
    assert float(h["rlec_score"]) == pytest.approx(score)
    assert float(h["aurc"]) == pytest.approx(area)
    assert float(h["aoc"]) == pytest.approx(aoc)


def test_calibrated_follower_beats_always_answer_and_random(worked) -> None:
    score = {name: float(headlines(counts_of(worked, name), worked.grid)["rlec_score"]) for name in NAMES}
    aoc = {name: float(headlines(counts_of(worked, name), worked.grid)["aoc"]) for name in NAMES}
    assert score["calibrated"] > score["always_answer"] > score["random"] > score["always_abstain"]
    assert aoc["calibrated"] > aoc["always_answer"] > aoc["always_abstain"]


def test_curve_of_conservative_example_is_closed_with_its_accuracy() -> None:
    """Coverage 0.25 at every target: merged to one point, then closed at (1, 1 - 0.25)."""
    x, y = risk_coverage_curve(np.array([0.25] * 4), np.zeros(4), np.array([0.25] * 4))
    assert x.tolist() == [0.0, 0.25, 1.0]
    assert y.tolist() == [0.0, 0.0, 0.75]


def test_curve_of_always_abstain_is_flat_at_risk_one() -> None:
    x, y = risk_coverage_curve(np.zeros(3), np.full(3, np.nan), np.zeros(3))
    assert x.tolist() == [0.0, 1.0] and y.tolist() == [1.0, 1.0]


def test_curve_is_order_independent_and_merges_ties() -> None:
    cov, risk, acc = np.array([0.5, 1.0, 0.5, 0.8]), np.array([0.1, 0.3, 0.3, 0.2]), np.array([0.45, 0.7, 0.35, 0.64])
    perm = [2, 0, 3, 1]
    assert aurc(cov, risk, acc) == pytest.approx(aurc(cov[perm], risk[perm], acc[perm]))
    x, y = risk_coverage_curve(cov, risk, acc)
    assert x.tolist() == [0.0, 0.5, 0.8, 1.0]
    assert y.tolist() == pytest.approx([0.2, 0.2, 0.2, 0.3])  # the two p with coverage 0.5 average to 0.2
    # trapezoid by hand: 0.5 * 0.2 + 0.3 * 0.2 + 0.2 * (0.2 + 0.3) / 2
    assert aurc(cov, risk, acc) == pytest.approx(0.1 + 0.06 + 0.05)


def test_missing_targets_are_ignored_not_zero(worked) -> None:
    counts = counts_of(worked, "calibrated")
    counts[3] = 0.0  # no records at p = 0.5
    h = headlines(counts, worked.grid)
    assert float(h["rlec_score"]) == pytest.approx((0.75 + 0.5 + 0.125) / 3)
    assert math.isnan(rates(counts, worked.grid)["coverage"][3])


def test_no_binary_prompt_leaves_accuracy_undefined(worked) -> None:
    h = headlines(counts_of(worked, "calibrated")[1:], worked.grid[1:])
    assert math.isnan(float(h["accuracy"]))
    assert float(h["rlec_score"]) == pytest.approx(0.40625)


def test_random_follower_aoc_is_its_accuracy_and_reward_is_analytic() -> None:
    """Answer with probability 1 - p, independent of correctness (accuracy a): AOC -> a and the
    expected reward at p is (1 - p)(a - p) (docs/metrics.md, example "random")."""
    rng = np.random.default_rng(7)
    grid = [None] + [round(0.1 * k, 1) for k in range(10)]
    a, n = 0.6, 20000
    correct = rng.random(n) < a
    rows = []
    for p in grid:
        answered = rng.random(n) < (1.0 - (p or 0.0))
        c, w = int((answered & correct).sum()), int((answered & ~correct).sum())
        q = p or 0.0
        rows.append([n, c, w, n - c - w, (1 - q) * c - q * w])
    h = headlines(np.array(rows, dtype=float), grid)
    expected_score = np.mean([(1 - p) * (a - p) for p in grid[1:]])
    assert float(h["aoc"]) == pytest.approx(a, abs=0.02)
    assert float(h["rlec_score"]) == pytest.approx(expected_score, abs=0.01)
    assert float(h["accuracy"]) == pytest.approx(a, abs=0.02)


def test_batched_counts_give_the_same_figures_as_one_at_a_time(worked) -> None:
    stacked = np.stack([counts_of(worked, name) for name in NAMES])
    h = headlines(stacked, worked.grid)
    for i in range(len(NAMES)):
        single = headlines(stacked[i], worked.grid)
        for key in h:
            assert float(h[key][i]) == pytest.approx(float(single[key]))
