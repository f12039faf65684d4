"""Question-level bootstrap: seeded reproducibility, stratification, sensible intervals."""

from __future__ import annotations

import numpy as np
import pytest

from rlec.eval.bootstrap import bootstrap_headlines, replicate_weights
from rlec.eval.selective import headlines

GRID = [None, 0.0, 0.5]


def random_questions(n: int, seed: int, accuracy: float = 0.6) -> np.ndarray:
    """(n, 3, 5) per-question counts: one record per target, answered with probability 1 - p."""
    rng = np.random.default_rng(seed)
    out = np.zeros((n, len(GRID), 5))
    for q in range(n):
        correct = rng.random() < accuracy
        for t, p in enumerate(GRID):
            answered = rng.random() < 1 - (p or 0.0)
            k = 3 if not answered else (1 if correct else 2)
            out[q, t, 0] = out[q, t, k] = 1
            out[q, t, 4] = 0.0 if not answered else ((1 - (p or 0.0)) if correct else -(p or 0.0))
    return out


def test_same_seed_same_intervals_other_seed_other_intervals() -> None:
    per_q, strata = random_questions(60, seed=1), np.zeros(60, dtype=int)
    a = bootstrap_headlines(per_q, strata, GRID, n_boot=300, seed=5)
    b = bootstrap_headlines(per_q, strata, GRID, n_boot=300, seed=5)
    c = bootstrap_headlines(per_q, strata, GRID, n_boot=300, seed=6)
    assert a == b
    assert a != c


def test_interval_contains_the_point_estimate_and_narrows_with_more_questions() -> None:
    small, large = random_questions(40, seed=2), random_questions(1000, seed=2)
    widths = []
    for per_q in (small, large):
        strata = np.zeros(len(per_q), dtype=int)
        point = headlines(per_q.sum(0), GRID)
        ci = bootstrap_headlines(per_q, strata, GRID, n_boot=400, seed=0)
        for name, (lo, hi) in ci.items():
            assert lo <= float(point[name]) <= hi, name
        widths.append(ci["rlec_score"][1] - ci["rlec_score"][0])
    assert widths[1] < widths[0] / 2


def test_all_correct_gives_a_degenerate_interval() -> None:
    per_q = np.zeros((10, len(GRID), 5))
    per_q[:, :, 0] = per_q[:, :, 1] = 1
    per_q[:, :, 4] = [1.0, 1.0, 0.5]
    ci = bootstrap_headlines(per_q, np.zeros(10, dtype=int), GRID, n_boot=50)
    assert ci["accuracy"] == (1.0, 1.0)
    assert ci["aoc"] == (1.0, 1.0)


def test_replicates_keep_each_stratum_size() -> None:
    strata = np.array([0] * 7 + [1] * 3)
    w = replicate_weights(strata, 100, np.random.default_rng(0))
    assert w.shape == (100, 10)
    assert (w[:, :7].sum(1) == 7).all() and (w[:, 7:].sum(1) == 3).all()
    assert w.std() > 0


def test_undefined_headline_gives_null_interval_and_zero_replicates_disable() -> None:
    per_q = random_questions(20, seed=3)[:, 1:]  # no binary prompt
    ci = bootstrap_headlines(per_q, np.zeros(20, dtype=int), GRID[1:], n_boot=50)
    assert ci["accuracy"] == (None, None) and ci["aoc"][0] is not None
    assert all(v == (None, None) for v in bootstrap_headlines(per_q, np.zeros(20, dtype=int), GRID[1:], n_boot=0).values())


@pytest.mark.parametrize("bad", [{"ci": 1.0}, {"ci": 0.0}, {"n_boot": -1}])
def test_bad_settings_raise(bad: dict) -> None:
    with pytest.raises(ValueError):
        bootstrap_headlines(random_questions(5, 0), np.zeros(5, dtype=int), GRID, **bad)
