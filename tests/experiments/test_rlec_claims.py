"""RLEC's own claims' figures (issue 57 item 8), by hand on toy record sets: rlec_advantage's per-question agreement
with "answer iff q > p" and its paired secondary (the coverage gap), rlec_schedule's seed spread of the final score
(SD ratio with the Pitman-Morgan paired test). No launch."""

from __future__ import annotations

import json

import numpy as np
import pytest

from rlec.experiments import cli, report
from rlec.experiments.spec import Run, final_value


def _cell(n: int, correct: int, wrong: int) -> list[float]:
    """One (question, target) count row: n, correct, incorrect, abstain, reward_sum."""
    return [n, correct, wrong, n - correct - wrong, 0.0]


def test_agreement_of_a_4_question_toy_is_0_75_by_hand() -> None:
    """Columns: p = 0.1, p = 0.8, binary (the spec's order). Greedy-like 0/1 decisions (one sample per target):
    q1 = 0.9 (answers at both: right at 0.1 and 0.8): agreement 1; q2 = 0.5 (answers at both: right at 0.1, wrong
    at 0.8): 0.5; q3 = 0.0 (abstains at both): 1; q4 = 0.5 (abstains at 0.1, wrong; answers at 0.8, wrong): 0.
    Mean 0.625 ... and with q4 abstaining at 0.8 too (right there): 0.5, mean 0.75."""
    from rlec.experiments.rlec_advantage import AGREEMENT, EXPERIMENT

    fig = EXPERIMENT.heldout.figures[AGREEMENT]
    assert EXPERIMENT.heldout.targets == (0.1, 0.8, None)
    pq = np.array([[_cell(1, 1, 0), _cell(1, 1, 0), _cell(10, 9, 1)],
                   [_cell(1, 1, 0), _cell(1, 0, 1), _cell(10, 5, 5)],
                   [_cell(1, 0, 0), _cell(1, 0, 0), _cell(10, 0, 10)],
                   [_cell(1, 0, 0), _cell(1, 1, 0), _cell(10, 5, 5)]], dtype=float)
    assert fig(pq, [], []).tolist() == [1.0, 0.5, 1.0, 0.0]
    pq[3, 1] = _cell(1, 0, 0)
    got = fig(pq, [], [])
    assert got.tolist() == [1.0, 0.5, 1.0, 0.5] and got.mean() == 0.75


def test_agreement_with_sampled_decisions_and_an_undefined_q() -> None:
    """16 samples a prompt: q = 12 / 15 answered = 0.8 (one binary abstention). At p = 0.1 (0.8 > 0.1: answer)
    12 of 16 answered: 0.75; at p = 0.8 (0.8 > 0.8 is false: abstain) 4 of 16 answered: 1 - 0.25 = 0.75; mean 0.75.
    A question that never answers at the binary prompt has no q: NaN, left out of the mean."""
    from rlec.experiments.rlec_advantage import AGREEMENT, EXPERIMENT

    fig = EXPERIMENT.heldout.figures[AGREEMENT]
    pq = np.array([[_cell(16, 9, 3), _cell(16, 4, 0), _cell(16, 12, 3)],
                   [_cell(16, 1, 0), _cell(16, 0, 0), _cell(16, 0, 0)]], dtype=float)
    got = fig(pq, [], [])
    assert got[0] == pytest.approx(0.75) and np.isnan(got[1])
    run = Run("mean_only", 0, [{"step": 1}], heldout={AGREEMENT: got.tolist()})
    assert EXPERIMENT.primary.value(run) == pytest.approx(0.75)


def test_the_coverage_gap_is_paired_per_seed_as_a_secondary_figure() -> None:
    exp = cli.load("rlec_advantage")
    gaps = {"std_norm": [0.10, 0.20, 0.00], "mean_only": [0.30, 0.30, 0.20]}  # differences 0.2, 0.1, 0.2
    runs = {arm: [Run(arm, s, [{"step": 1}], heldout={"coverage gap": [g, g], "agreement": [0.5]})
                  for s, g in enumerate(vals)] for arm, vals in gaps.items()}
    result = report.summarise(exp, runs, quick=False)
    (sec,) = result["secondary"]
    assert sec["method"] == "mean_only" and sec["differences"] == pytest.approx([0.2, 0.1, 0.2])
    half = 4.302653 * np.std([0.2, 0.1, 0.2], ddof=1) / np.sqrt(3)  # t(0.975, df 2)
    assert sec["mean"] == pytest.approx(0.5 / 3) and sec["hi"] == pytest.approx(0.5 / 3 + half, abs=1e-6)
    assert "secondary, held-out coverage gap" in report.format_verdicts(result) and "(no verdict)" in report.format_verdicts(result)
    assert result["comparisons"][0]["verdict"] is None  # 3 seeds < 5: the primary gives no verdict either


def test_spread_ratio_by_hand() -> None:
    """x = [0, 0, 2, 2] (var 4/3), y = [0, 1, 1, 2] (var 2/3): SD ratio sqrt(2). Sums s = [0, 1, 3, 4], differences
    d = [0, -1, 1, 0]: r = (2/3) / sqrt(2/3 * 10/3) = 1/sqrt(5); t = r sqrt(2 / (1 - 1/5)) = 1/sqrt(2), df 2; the
    t(2) tail: P(T > t) = 1/2 - t / (2 sqrt(2 + t^2)) = 0.5 - 0.2236, so p = 0.5528."""
    got = report.spread_ratio([0, 0, 2, 2], [0, 1, 1, 2])
    assert got["ratio"] == pytest.approx(np.sqrt(2)) and got["r"] == pytest.approx(1 / np.sqrt(5))
    assert got["t"] == pytest.approx(1 / np.sqrt(2)) and got["df"] == 2
    assert got["p"] == pytest.approx(2 * (0.5 - (1 / np.sqrt(2)) / (2 * np.sqrt(2.5))))
    same = report.spread_ratio([1, 2, 3, 4], [2, 1, 4, 3])  # equal variances: r = 0, p = 1
    assert same["ratio"] == 1.0 and same["r"] == pytest.approx(0.0, abs=1e-12) and same["p"] == pytest.approx(1.0)
    two = report.spread_ratio([1, 2], [1, 3])  # two seeds: the SDs, no test
    assert two["ratio"] == pytest.approx(np.std([1, 2], ddof=1) / np.std([1, 3], ddof=1)) and two["p"] is None
    with pytest.raises(ValueError, match="3 method values against 2"):
        report.spread_ratio([1, 2, 3], [1, 2])


def test_rlec_schedules_seed_spread_reads_each_seeds_final_score() -> None:
    """10 steps: the final score is the mean of steps 9-10 (the last 20%). Schedule seeds end at 0, 0, 2, 2 and fixed
    b = 0's at 0, 1, 1, 2 (the spread_ratio case above); early steps differ wildly and must not count."""
    exp = cli.load("rlec_schedule")
    assert final_value([9.0] * 8 + [1.0, 3.0]) == 2.0

    def run(arm: str, seed: int, end: float) -> Run:
        rows = [{"step": t + 1, "critic/score/mean": (100.0 * seed if t < 8 else end)} for t in range(10)]
        return Run(arm, seed, rows)

    ends = {"schedule": [0, 0, 2, 2], "b0": [0, 1, 1, 2], "b1": [1, 1, 1, 1]}
    runs = {arm: [run(arm, s, e) for s, e in enumerate(vals)] for arm, vals in ends.items()}
    result = report.summarise(exp, runs, quick=False)
    json.loads(json.dumps(result, allow_nan=False))
    column = report.spread_label("critic/score/mean")
    assert result["arms"]["schedule"]["table"][column][0] == pytest.approx(np.std([0, 0, 2, 2], ddof=1))
    vs_b0, vs_b1 = result["seed_spread"]
    assert (vs_b0["method"], vs_b0["baseline"]) == ("schedule", "b0") and vs_b0["ratio"] == pytest.approx(np.sqrt(2))
    assert vs_b0["p"] == pytest.approx(0.5528, abs=1e-4)
    assert vs_b1["sd_baseline"] == 0.0 and vs_b1["ratio"] is None  # b = 1's seeds agree exactly: no ratio, no test
    assert "seed spread of critic/score/mean (final, last 20%): schedule vs b0" in report.format_verdicts(result)
