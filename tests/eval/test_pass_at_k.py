"""pass@k in ``rlec.eval.metrics``: hand-computed unbiased estimates over questions with n samples,
intervals, the k grid, questions with too few samples, and the report tables."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from rlec.eval import metrics
from rlec.eval.records import atomic_write_jsonl
from rlec.eval.bootstrap import pass_at_k_figures
from rlec.eval.selective import default_ks, pass_at_k_by_question

# four samples per question and target (letters: C correct, W wrong, A abstain)
SAMPLES = {"q1": "CCWA", "q2": "WWWW", "q3": "CCCC"}
LETTER = {"C": "correct", "W": "incorrect", "A": "abstain"}


def records(factory, targets=(None, 0.5), samples=SAMPLES):
    return [factory(qid, p, LETTER[letter], sample=i) for qid, letters in samples.items() for p in targets
            for i, letter in enumerate(letters)]


def run(tmp_path: Path, recs, *extra: str) -> dict:
    path = atomic_write_jsonl(tmp_path / "r.jsonl", recs)
    assert metrics.main([str(path), "--out-dir", str(tmp_path / "m"), "--quiet", "--no-plots", "--targets", "binary,0.5", *extra]) == 0
    return json.loads((tmp_path / "m" / "metrics.json").read_text())["runs"]["r"]["groups"]["all"]


def test_pass_at_k_hand_computed_with_intervals(tmp_path, record_factory):
    fig = run(tmp_path, records(record_factory), "--bootstrap", "200")
    rows = {(r["target"], r["k"]): r for r in fig["pass_at_k"]}
    assert sorted({k for _, k in rows}) == [1, 2, 4]  # 1, 2, 4 up to the 4 samples
    # q1 (c = 2 of 4): pass@1 0.5, pass@2 1 - C(2,2)/C(4,2) = 5/6, pass@4 1; q2 (c = 0): 0; q3 (c = 4): 1
    want = {1: (0.5 + 0 + 1) / 3, 2: (5 / 6 + 0 + 1) / 3, 4: 2 / 3}
    for target in ("binary", "0.5"):
        for k, value in want.items():
            row = rows[(target, k)]
            assert row["value"] == pytest.approx(value) and row["n_questions"] == 3
            assert row["ci_low"] <= row["value"] <= row["ci_high"]
    assert rows[("binary", 1)]["value"] == pytest.approx(fig["headline"]["accuracy"]["value"])  # pass@1 = accuracy


def test_questions_with_fewer_than_k_samples_are_left_out(tmp_path, record_factory):
    samples = dict(SAMPLES, q4="CW")  # two samples only
    fig = run(tmp_path, records(record_factory, samples=samples), "--bootstrap", "0", "--pass-k", "2,3")
    rows = {(r["target"], r["k"]): r for r in fig["pass_at_k"]}
    # k = 2: q4 counts (1 - C(1,2)/C(2,2) = 1); k = 3: only q1..q3 (q1: 1 - C(2,3)/C(4,3) = 1)
    assert rows[("binary", 2)]["n_questions"] == 4 and rows[("binary", 2)]["value"] == pytest.approx((5 / 6 + 0 + 1 + 1) / 4)
    assert rows[("binary", 3)]["n_questions"] == 3 and rows[("binary", 3)]["value"] == pytest.approx(2 / 3)
    assert rows[("binary", 3)]["ci_low"] is None  # --bootstrap 0


def test_one_sample_per_question_reports_no_pass_at_k(tmp_path, record_factory):
    fig = run(tmp_path, records(record_factory, samples={"q1": "C", "q2": "W"}), "--bootstrap", "0")
    assert "pass_at_k" not in fig


def test_bad_pass_k_is_a_usage_error(tmp_path, record_factory, capsys):
    path = atomic_write_jsonl(tmp_path / "r.jsonl", records(record_factory))
    assert metrics.main([str(path), "--out-dir", str(tmp_path / "m"), "--pass-k", "0,2"]) == 2
    assert "--pass-k must be comma-separated integers >= 1" in capsys.readouterr().err


def test_report_prints_pass_at_k_table_and_comparison(tmp_path, record_factory, capsys):
    path = atomic_write_jsonl(tmp_path / "a.jsonl", records(record_factory))
    other = atomic_write_jsonl(tmp_path / "b.jsonl", records(record_factory, samples={"q1": "CCCC", "q2": "CWWW", "q3": "CCCC"}))
    assert metrics.main([str(path), "--out-dir", str(tmp_path / "m"), "--quiet", "--no-plots", "--targets", "binary,0.5",
                         "--bootstrap", "50"]) == 0
    out = capsys.readouterr().out
    assert "### all: pass@k" in out and "| target | pass@1 | pass@2 | pass@4 |" in out
    assert metrics.main([str(path), "--compare", str(other), "--out-dir", str(tmp_path / "c"), "--quiet", "--no-plots",
                         "--targets", "binary,0.5", "--bootstrap", "0"]) == 0
    report = (tmp_path / "c" / "metrics.md").read_text()
    assert "### all (A / B): pass@k" in report and "0.500 / 0.750" in report  # pass@1 of a vs b at the binary prompt


def test_adding_pass_at_k_leaves_headline_intervals_unchanged(record_factory):
    recs = records(record_factory)
    graded = metrics.grade_records(recs, progress=False)
    targets = [None, 0.5]
    with_k = metrics.analyze(recs, graded, targets, n_boot=100, seed=3)
    without = metrics.analyze(recs, graded, targets, n_boot=100, seed=3, ks=[])
    assert with_k["groups"]["all"]["headline"] == without["groups"]["all"]["headline"]
    assert "pass_at_k" in with_k["groups"]["all"] and "pass_at_k" not in without["groups"]["all"]


def test_helpers():
    assert default_ks(1) == [1] and default_ks(6) == [1, 2, 4, 6] and default_ks(8) == [1, 2, 4, 8]
    per_question = np.zeros((2, 1, 5))
    per_question[0, 0, :2] = (4, 1)
    per_question[1, 0, :2] = (2, 2)
    values = pass_at_k_by_question(per_question, [2, 3])
    assert values[0, 0].tolist() == pytest.approx([0.5, 0.75]) and values[1, 0, 0] == 1.0 and np.isnan(values[1, 0, 1])
    rows = pass_at_k_figures(per_question, np.zeros(2, dtype=int), [None], [3], n_boot=0)
    assert rows == [{"target_p": None, "k": 3, "value": 0.75, "ci_low": None, "ci_high": None, "n_questions": 1}]
