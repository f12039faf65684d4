"""Per-question calibration (``rlec.eval.calibration`` and its place in ``rlec.eval.metrics``): q_i, c_i, smECE /
ECE / Brier / AUROC, agreement with "answer iff q_i > p", regret, monotonicity, RiskEval utility, hallucination
and abstention; hand-computed values on small record sets (docs/metrics.md, "Per-question calibration")."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from rlec.eval import calibration as cal
from rlec.eval import metrics
from rlec.eval.records import atomic_write_jsonl
from rlec.eval.selective import rates
from rlec.generation import SamplingSettings

GRID = [0.0, 0.25, 0.5, 0.75]


# ---- q_i: Wilson interval ----------------------------------------------------------------------------------------


def test_wilson_interval_matches_the_closed_form_at_k_0_and_k_n_over_2() -> None:
    lo, hi = cal.wilson_interval(np.array([0, 8, 16]), np.array([16, 16, 16]))
    # 0/16: centre = (z^2/32) / (1 + z^2/16) = half-width, so [0, 2 * 0.09681]; 8/16: 0.5 +- 0.2200 (z = 1.95996)
    assert lo == pytest.approx([0.0, 0.27999, 0.80638], abs=1e-4)
    assert hi == pytest.approx([0.19362, 0.72001, 1.0], abs=1e-4)


# ---- c_i ---------------------------------------------------------------------------------------------------------


def test_greedy_confidence_is_the_largest_answered_target_and_0_when_never_answered() -> None:
    answered = np.array([[1, 1, 1, 1], [1, 1, 0, 0], [0, 0, 0, 0], [0, 0, 0, 1], [1, 0, 0, 0]], dtype=float)
    assert cal.implied_confidence(answered, GRID, sampled=False) == pytest.approx([0.75, 0.25, 0.0, 0.75, 0.0])


def test_an_exact_threshold_follower_has_c_equal_q_up_to_the_grid_step() -> None:
    q = np.array([0.6, 0.3, 0.9, 0.05])
    follower = (q[:, None] > np.array(GRID)[None, :]).astype(float)
    c = cal.implied_confidence(follower, GRID, sampled=False)
    assert c == pytest.approx([0.5, 0.25, 0.75, 0.0])  # the largest grid p below q_i
    assert np.all((c < q) & (q - c <= 0.25 + 1e-12))
    assert cal.implied_confidence(follower, GRID, sampled=True) == pytest.approx(c)  # the area rule agrees on 0/1 monotone decisions


def test_sampled_confidence_is_the_area_under_the_answer_rate() -> None:
    rate = np.array([[1.0, 0.5, 0.5, 0.0], [0.5, 0.5, 0.5, 0.5]])
    # sum_k a(p_k) (p_k - p_{k-1}), p_{-1} = 0: 0 + 0.5*0.25 + 0.5*0.25 + 0 ; 0.5 * 0.75
    assert cal.implied_confidence(rate, GRID, sampled=True) == pytest.approx([0.25, 0.375])


def test_implied_confidence_refuses_a_grid_that_is_not_ascending() -> None:
    with pytest.raises(ValueError, match="ascending"):
        cal.implied_confidence(np.zeros((1, 2)), [0.5, 0.25], sampled=False)


# ---- decisions: agreement, regret, monotonicity ------------------------------------------------------------------


def test_agreement_and_regret_with_a_tie_and_a_question_never_answered() -> None:
    q = np.array([0.6, 0.5, 0.0, 1.0])
    answered = np.array([[1, 1, 1, 1], [1, 1, 1, 0], [0, 0, 0, 0], [0, 0, 0, 0]], dtype=float)
    # ideal (q > p): 0.6 -> TTTF; 0.5 -> TTFF (tie at p = 0.5: abstain); 0.0 -> FFFF (tie at p = 0); 1.0 -> TTTT
    assert cal.decision_agreement(answered, q, GRID) == pytest.approx(
        np.array([[1, 1, 1, 0], [1, 1, 0, 1], [1, 1, 1, 1], [0, 0, 0, 0]]))
    # max(q - p, 0) - (q - p) a: the tie costs nothing; never answering q = 1 loses 1 - p
    assert cal.decision_regret(answered, q, GRID) == pytest.approx(
        np.array([[0, 0, 0, 0.15], [0, 0, 0, 0], [0, 0, 0, 0], [1, 0.75, 0.5, 0.25]]))


def test_sampled_agreement_is_the_probability_one_draw_agrees() -> None:
    rate = np.array([[0.25, 0.25]])
    assert cal.decision_agreement(rate, np.array([0.5]), [0.0, 0.75]) == pytest.approx(np.array([[0.25, 0.75]]))
    assert cal.decision_regret(rate, np.array([0.5]), [0.0, 0.75]) == pytest.approx(np.array([[0.5 - 0.5 * 0.25, 0.25 * 0.25]]))


def test_monotonicity_violations_flag_answering_at_a_higher_target_only() -> None:
    rate = np.array([[1, 1, 0, 0], [0, 1, 0, 1], [0.5, 1, 0, 0], [0, 0, 0, 0]], dtype=float)
    assert cal.monotonicity_violations(rate) == pytest.approx(
        np.array([[0, 0, 0, 0], [1, 0, 1, 0], [0.5, 0, 0, 0], [0, 0, 0, 0]]))


# ---- ECE, Brier, AUROC, smECE ------------------------------------------------------------------------------------


def test_ece_brier_auroc_on_the_calibrated_worked_example() -> None:
    conf, label, w = np.array([0.75, 0.75, 0.25, 0.25]), np.array([1, 1, 1, 0.0]), np.ones(4)
    # bins 7: |2*(0.75 - 1)| = 0.5, bin 2: |(0.25 - 1) + 0.25| = 0.5 -> 1/4
    assert cal.expected_calibration_error(conf, label, w) == pytest.approx(0.25)
    assert cal.brier_score(conf, label, w) == pytest.approx((2 * 0.0625 + 0.5625 + 0.0625) / 4)
    assert cal.auroc(conf, label, w) == pytest.approx(2.5 / 3)  # pairs (0.75, 0.25) x2 win, (0.25, 0.25) tie


def test_ece_pools_a_bin_before_taking_the_absolute_value_and_closes_the_last_bin() -> None:
    w = np.ones(2)
    assert cal.expected_calibration_error(np.array([0.15, 0.19]), np.array([1.0, 0.0]), w) == pytest.approx(0.66 / 2)
    assert cal.expected_calibration_error(np.array([0.15, 0.25]), np.array([1.0, 0.0]), w) == pytest.approx((0.85 + 0.25) / 2)
    assert cal.expected_calibration_error(np.array([1.0, 0.1]), np.array([1.0, 0.0]), w) == pytest.approx(0.05)  # 1.0 -> bin 9, 0.1 -> bin 1


def test_auroc_all_ties_is_one_half_and_one_class_is_undefined() -> None:
    assert cal.auroc(np.array([0.5, 0.5, 0.5]), np.array([1, 0, 1.0]), np.ones(3)) == pytest.approx(0.5)
    assert np.isnan(cal.auroc(np.array([0.2, 0.9]), np.array([1, 1.0]), np.ones(2)))


def test_weighted_figures_equal_repeated_observations_and_broadcast_over_replicates() -> None:
    conf, label = np.array([0.9, 0.2, 0.6]), np.array([1, 0, 0.0])
    weights = np.array([[2, 1, 1], [1, 1, 3]], dtype=float)
    for b, row in enumerate(weights):
        rep_c, rep_y = np.repeat(conf, row.astype(int)), np.repeat(label, row.astype(int))
        ones = np.ones(len(rep_c))
        assert cal.auroc(conf, label, weights)[b] == pytest.approx(float(cal.auroc(rep_c, rep_y, ones)))
        assert cal.brier_score(conf, label, weights)[b] == pytest.approx(float(cal.brier_score(rep_c, rep_y, ones)))
        assert cal.expected_calibration_error(conf, label, weights)[b] == pytest.approx(
            float(cal.expected_calibration_error(rep_c, rep_y, ones)))


def test_smece_matches_relplots_documented_example() -> None:
    """relplot's notebooks/demo.ipynb (apple/ml-calibration): f uniform, P(y = 1 | f) = f + 0.2 sin(2 pi f),
    N = 10,000, unseeded; it prints ``calibration error: 0.11556155822814532``. Seeded here; the sampling
    spread of smECE at this N is about +-0.005 (seeds 0-4: 0.107-0.115)."""
    rng = np.random.default_rng(0)
    f = rng.random(10_000)
    y = (rng.random(10_000) > 1 - (f + 0.2 * np.sin(2 * np.pi * f))).astype(float)
    assert cal.smooth_ece(f, y, np.ones_like(f)) == pytest.approx(0.11556, abs=0.012)
    calibrated = (rng.random(10_000) < f).astype(float)
    assert cal.smooth_ece(f, calibrated, np.ones_like(f)) < 0.03


def test_smece_counts_repeat_rows() -> None:
    import relplot

    conf, label, count = np.array([0.8, 0.3, 0.3]), np.array([1.0, 0.0, 1.0]), np.array([3, 2, 1])
    expected = relplot.smECE(np.array([0.8, 0.8, 0.8, 0.3, 0.3, 0.3]), np.array([1, 1, 1, 0, 0, 1.0]))
    assert cal.smooth_ece(conf, label, count) == pytest.approx(expected)
    assert np.isnan(cal.smooth_ece(conf, label, np.zeros(3)))


# ---- rates: hallucination, their ratios, RiskEval utility ---------------------------------------------------------


def test_hallucination_ratios_and_riskeval_utility() -> None:
    counts = np.array([[4, 2, 1, 1, 0], [8, 1, 1, 6, 0], [4, 3, 0, 1, 0]], dtype=float)  # n, c, w, a, reward sum
    r = rates(counts, [None, 0.75, 0.5])
    assert r["hallucination_rate"] == pytest.approx([0.25, 0.125, 0.0])
    assert r["hallucination_to_abstention"] == pytest.approx([1.0, 1 / 6, 0.0])
    assert r["accuracy_to_hallucination"][:2] == pytest.approx([2.0, 1.0]) and np.isnan(r["accuracy_to_hallucination"][2])
    # lambda = p / (1 - p): 0 (binary: accuracy), 3, 1
    assert r["riskeval_utility"] == pytest.approx([0.5, (1 - 3 * 1) / 8, 0.75])


# ---- strata ------------------------------------------------------------------------------------------------------


def test_difficulty_and_q_bins() -> None:
    assert cal.difficulty("math", "add-7+5") == "digits=1"
    assert cal.difficulty("math", "add-482+37") == "digits=3"
    assert cal.difficulty("maze/d6", "x") == "level=d6"
    assert cal.difficulty("math", "m-101") is None and cal.difficulty("hotpotqa", "add-x") is None
    assert [cal.q_bin(q) for q in (0.0, 0.25, 0.7, 0.75, 1.0)] == ["q=[0,0.25)", "q=[0.25,0.5)", "q=[0.5,0.75)", "q=[0.75,1]", "q=[0.75,1]"]


# ---- end to end through rlec.eval.metrics --------------------------------------------------------------------------

SPEC = "binary,0.2,0.6"
# question id -> (outcome at p = 0.2, at p = 0.6, binary prompt, correct q samples of 4)
QUESTIONS = {
    "add-1+2": ("correct", "correct", "correct", 4),       # q 1.00, c 0.6
    "add-3+4": ("correct", "abstain", "correct", 2),       # q 0.50, c 0.2
    "add-10+20": ("abstain", "incorrect", "incorrect", 1),  # q 0.25, c 0.6: abstains at 0.2, answers at 0.6 (a violation)
    "add-11+22": ("abstain", "abstain", "incorrect", 0),   # q 0.00, c 0.0: never answered
}


def _sweep(record_factory) -> list[dict]:
    out = []
    for qid, (low, high, binary, _) in QUESTIONS.items():
        out += [record_factory(qid, None, binary), record_factory(qid, 0.2, low), record_factory(qid, 0.6, high)]
    return out


def _q_samples(record_factory, n: int = 4) -> list[dict]:
    return [record_factory(qid, None, "correct" if s < k else "incorrect", sample=s) for qid, (*_, k) in QUESTIONS.items() for s in range(n)]


def _files(tmp_path: Path, record_factory) -> tuple[Path, Path]:
    return (atomic_write_jsonl(tmp_path / "sweep.jsonl", _sweep(record_factory)),
            atomic_write_jsonl(tmp_path / "q.jsonl", _q_samples(record_factory)))


def test_metrics_reports_hand_computed_calibration_per_stratum(tmp_path: Path, record_factory) -> None:
    sweep, q = _files(tmp_path, record_factory)
    out = tmp_path / "m"
    assert metrics.main([str(sweep), "--q-records", str(q), "--targets", SPEC, "--out-dir", str(out), "--quiet", "--bootstrap", "20"]) == 0
    result = json.loads((out / "metrics.json").read_text())
    block = result["runs"]["sweep"]["calibration"]
    assert block["q_source"] == str(q) and block["c_rule"] == "largest answered target" and block["grid"] == [0.2, 0.6]
    rows = {r["question_id"]: r for r in block["questions"]}
    assert {k: (r["q"], r["c"], r["q_answered"]) for k, r in rows.items()} == {
        "add-1+2": (1.0, 0.6, 4), "add-3+4": (0.5, 0.2, 4), "add-10+20": (0.25, 0.6, 4), "add-11+22": (0.0, 0.0, 4)}
    assert rows["add-11+22"]["answer_rate"] == {"0.2": 0.0, "0.6": 0.0} and rows["add-10+20"]["ideal_answer"] == {"0.2": True, "0.6": False}
    assert list(block["strata"]) == ["all", "digits=1", "digits=2", "q=[0,0.25)", "q=[0.25,0.5)", "q=[0.5,0.75)", "q=[0.75,1]"]
    head = block["strata"]["all"]["headline"]
    # c = (0.6, 0.2, 0.6, 0.0) against binary correctness (1, 1, 0, 0)
    assert head["brier"]["value"] == pytest.approx((0.16 + 0.64 + 0.36 + 0.0) / 4)
    assert head["ece"]["value"] == pytest.approx((abs(0.6 - 1 + 0.6) + abs(0.2 - 1) + 0.0) / 4)
    assert head["auroc"]["value"] == pytest.approx(2.5 / 4)  # (0.6 vs 0.6) tie, (0.6 vs 0) win, (0.2 vs 0.6) loss, (0.2 vs 0) win
    assert head["smece"]["ci_low"] is not None and 0 <= head["smece"]["value"] <= 1
    # ideal at 0.2: answer Q1-Q3; at 0.6: Q1 only. Decisions (1,1,0,0) and (1,0,1,0): agreement 3/4 at both
    assert head["agreement"]["value"] == pytest.approx(0.75)
    assert head["regret"]["value"] == pytest.approx((0.05 / 4 + 0.35 / 4) / 2)  # Q3: 0.25 - 0.2 forgone; 0.6 - 0.25 lost
    assert head["monotonicity"]["value"] == pytest.approx(0.25)
    low, high = block["strata"]["all"]["per_target"]
    assert (low["agreement"]["value"], high["agreement"]["value"]) == pytest.approx((0.75, 0.75))
    assert (low["regret"]["value"], high["regret"]["value"]) == pytest.approx((0.0125, 0.0875))
    assert (low["monotonicity_violations"]["value"], high["monotonicity_violations"]["value"]) == pytest.approx((0.25, 0.0))
    assert (low["hallucination_rate"], high["hallucination_rate"], high["abstention_rate"]) == pytest.approx((0.0, 0.25, 0.5))
    assert high["hallucination_to_abstention"] == pytest.approx(0.5) and low["accuracy_to_hallucination"] is None
    assert (low["riskeval_utility"], high["riskeval_utility"]) == pytest.approx((2 / 4, (1 - 1.5) / 4))
    # a stratum of one class: AUROC undefined, the rest defined
    one = block["strata"]["digits=1"]["headline"]
    assert one["auroc"]["value"] is None and one["brier"]["value"] == pytest.approx((0.16 + 0.64) / 2)
    assert block["strata"]["digits=2"]["headline"]["brier"]["value"] == pytest.approx(0.36 / 2)
    assert block["strata"]["q=[0,0.25)"]["n_questions"] == 1
    md = (out / "metrics.md").read_text()
    assert "## per-question calibration" in md and "### digits=2: decisions per target" in md
    assert (out / "hallucination_abstention.png").stat().st_size > 0 and (out / "reliability.png").stat().st_size > 0


def test_q_from_the_runs_own_binary_samples_and_compare_carries_the_deltas(tmp_path: Path, record_factory) -> None:
    sweep, q = _files(tmp_path, record_factory)
    own = atomic_write_jsonl(tmp_path / "own.jsonl", [r for r in _sweep(record_factory) if r["target"] != "binary"] + _q_samples(record_factory))
    out = tmp_path / "m"
    args = [str(sweep), "--compare", str(own), "--q-records", str(q), "-", "--targets", SPEC, "--out-dir", str(out), "--quiet",
            "--bootstrap", "0", "--no-plots"]
    assert metrics.main(args) == 0
    result = json.loads((out / "metrics.json").read_text())
    a, b = (result["runs"][k]["calibration"] for k in ("sweep", "own"))
    assert b["q_source"] == "the run's own records at the binary prompt"
    assert [r["q"] for r in a["questions"]] == [r["q"] for r in b["questions"]]
    # labels differ: own's binary prompt has 7 right of 16 samples, sweep's 2 of 4
    assert b["strata"]["all"]["n_observations"] == 16 and a["strata"]["all"]["n_observations"] == 4
    delta = result["calibration_comparison"]["all"]
    assert delta["agreement"] == pytest.approx(0.0)
    assert delta["brier"] == pytest.approx(b["strata"]["all"]["headline"]["brier"]["value"] - a["strata"]["all"]["headline"]["brier"]["value"])
    assert "per-question calibration, sweep vs own" in (out / "metrics.md").read_text()


def test_without_q_agreement_and_regret_are_null_but_calibration_is_reported(tmp_path: Path, record_factory) -> None:
    sweep, _ = _files(tmp_path, record_factory)
    out = tmp_path / "m"
    assert metrics.main([str(sweep), "--targets", SPEC, "--out-dir", str(out), "--quiet", "--bootstrap", "0", "--no-plots"]) == 0
    result = json.loads((out / "metrics.json").read_text())
    block = result["runs"]["sweep"]["calibration"]
    assert block["q_source"] is None and "q" not in block["questions"][0]
    head = block["strata"]["all"]["headline"]
    assert head["agreement"]["value"] is None and head["regret"]["value"] is None
    assert head["auroc"]["value"] == pytest.approx(0.625) and head["monotonicity"]["value"] == pytest.approx(0.25)


@pytest.mark.parametrize("case", ["no_binary", "one_sample", "missing_question", "count", "grid", "own_one_sample", "q_target"])
def test_bad_q_input_is_one_line_and_nothing_is_written(tmp_path: Path, record_factory, capsys, case: str) -> None:
    sweep, q = _files(tmp_path, record_factory)
    targets, q_args = SPEC, [str(q)]
    if case == "no_binary":
        atomic_write_jsonl(q, [record_factory(qid, 0.2, "correct") for qid in QUESTIONS])
        expect = f"--q-records {q}: no record at the binary prompt"
    elif case == "one_sample":
        atomic_write_jsonl(q, [r for r in _q_samples(record_factory) if r["sample_index"] == 0 or r["question_id"] != "add-3+4"])
        expect = f"--q-records {q}: math/add-3+4 has 1 sample(s) at the binary prompt; q_i needs N >= 2"
    elif case == "missing_question":
        atomic_write_jsonl(q, [r for r in _q_samples(record_factory) if r["question_id"] != "add-1+2"])
        expect = f"--q-records {q}: no sample at the binary prompt for 1 of the run's 4 questions (first: math/add-1+2)"
    elif case == "count":
        q_args = [str(q), str(q)]
        expect = "--q-records needs one file per run (1; '-' = the run's own binary prompt), got 2"
    elif case == "grid":
        targets = "binary,0.2"
        expect = "--targets 'binary,0.2': c_i and the decisions need at least two targets with a stated p"
    elif case == "own_one_sample":
        q_args = ["-"]
        expect = "--q-records -: math/add-1+2 has 1 sample(s) at the binary prompt of its run; q_i needs N >= 2"
    else:
        q_args = [str(q), "--q-target", "0.3"]
        expect = "--q-target 0.3: not in --targets 'binary,0.2,0.6'; the calibration labels are the run's answers at that prompt"
    out = tmp_path / "m"
    assert metrics.main([str(sweep), "--q-records", *q_args, "--targets", targets, "--out-dir", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: {expect}") and "\n" not in err, err
    assert not out.exists()


# ---- evaluate: the sampling settings q_i is drawn at --------------------------------------------------------------


def test_top_k_is_recorded_only_when_set_so_older_record_files_still_resume() -> None:
    assert "top_k" not in SamplingSettings(temperature=1.0).to_dict()
    assert SamplingSettings(temperature=1.0, top_k=5).to_dict()["top_k"] == 5
    with pytest.raises(ValueError, match="top_k must be -1"):
        SamplingSettings(top_k=0)


def test_evaluate_refuses_a_bad_top_k_before_loading_anything(tmp_path: Path, capsys) -> None:
    from rlec.eval import evaluate

    out = tmp_path / "r.jsonl"
    assert evaluate.main(["--model", str(tmp_path / "none"), "--data", str(tmp_path / "none.parquet"), "--out", str(out), "--top-k", "-3"]) == 2
    assert "top_k must be -1 (off) or >= 1, got -3" in capsys.readouterr().err
    assert not out.exists()


def test_summary_keeps_the_named_strata_and_targets_and_refuses_a_target_off_the_grid() -> None:
    row = lambda p: {"target_p": p, "agreement": {"value": 1.0, "ci_low": None, "ci_high": None}}  # noqa: E731
    block = {"reference": "binary", "q_source": "q.jsonl", "q_interval": "Wilson score, 95%", "c_rule": "largest answered target", "grid": [0.1, 0.5, 0.8],
             "strata": {"all": {"n_questions": 3, "n_observations": 3, "label_accuracy": 0.5, "headline": {"auroc": {"value": 0.7}},
                                "per_target": [row(0.1), row(0.5), row(0.8)]}}}
    out = cal.summary(block, [0.1, 0.8], ["all", "digits=2"])
    assert list(out["strata"]) == ["all"] and [r["target_p"] for r in out["strata"]["all"]["per_target"]] == [0.1, 0.8]
    with pytest.raises(ValueError, match=r"targets \[0.3\] are not on the calibration grid"):
        cal.summary(block, [0.3], ["all"])


def test_q_counts_only_answered_samples_and_a_question_that_always_abstains_has_no_q(tmp_path: Path, record_factory) -> None:
    """q_i is P(right | it answers): abstaining samples carry no correctness. Q1: 2 right, 1 wrong, 1 abstains
    -> 2/3; Q4 abstains in all 4 samples -> no q_i, left out of agreement and regret (not counted as wrong)."""
    sweep, q = _files(tmp_path, record_factory)
    samples = _q_samples(record_factory)
    outcome = {("add-1+2", 0): "correct", ("add-1+2", 1): "correct", ("add-1+2", 2): "incorrect", ("add-1+2", 3): "abstain"}
    samples = [record_factory(r["question_id"], None, "abstain" if r["question_id"] == "add-11+22" else
                              outcome.get((r["question_id"], r["sample_index"]), "correct" if r["response"].endswith("{4}.") else "incorrect"),
                              sample=r["sample_index"]) for r in samples]
    atomic_write_jsonl(q, samples)
    out = tmp_path / "m"
    assert metrics.main([str(sweep), "--q-records", str(q), "--targets", SPEC, "--out-dir", str(out), "--quiet", "--bootstrap", "0",
                         "--no-plots"]) == 0
    block = json.loads((out / "metrics.json").read_text())["runs"]["sweep"]["calibration"]
    rows = {r["question_id"]: r for r in block["questions"]}
    assert (rows["add-1+2"]["q"], rows["add-1+2"]["q_answered"], rows["add-1+2"]["q_samples"]) == (pytest.approx(2 / 3), 3, 4)
    assert rows["add-11+22"]["q"] is None and rows["add-11+22"]["ideal_answer"] is None
    low, high = block["strata"]["all"]["per_target"]
    # Q1 (q 2/3), Q2 (0.5), Q3 (0.25) only: at 0.2 decisions (1, 1, 0) vs ideal (1, 1, 1); at 0.6 (1, 0, 1) vs (1, 0, 0)
    assert (low["agreement"]["value"], high["agreement"]["value"]) == pytest.approx((2 / 3, 2 / 3))
    assert (low["regret"]["value"], high["regret"]["value"]) == pytest.approx((0.05 / 3, 0.35 / 3))


def test_q_target_reads_q_and_the_labels_at_a_stated_target(tmp_path: Path, record_factory) -> None:
    """A model whose answers differ between the binary prompt and the target prompts (the demo's warm start):
    q_i and the labels are read at p = 0.2. Labels: the sweep's answers at 0.2 (Q1, Q2 right; Q3, Q4 abstain:
    no label)."""
    sweep, _ = _files(tmp_path, record_factory)
    q = atomic_write_jsonl(tmp_path / "q02.jsonl", [dict(r, target="0.2", target_p=0.2, objective="rlec") for r in _q_samples(record_factory)])
    out = tmp_path / "m"
    assert metrics.main([str(sweep), "--q-records", str(q), "--q-target", "0.2", "--targets", SPEC, "--out-dir", str(out), "--quiet",
                         "--bootstrap", "0", "--no-plots"]) == 0
    block = json.loads((out / "metrics.json").read_text())["runs"]["sweep"]["calibration"]
    assert block["reference"] == "0.2" and [r["q"] for r in block["questions"]] == [1.0, 0.5, 0.25, 0.0]
    assert block["strata"]["all"]["n_observations"] == 2 and block["strata"]["all"]["headline"]["auroc"]["value"] is None
    assert block["strata"]["all"]["headline"]["brier"]["value"] == pytest.approx((0.16 + 0.64) / 2)


def test_top_k_reaches_the_cpu_engine_top_1_sampling_is_greedy(tiny_moe_dir: Path) -> None:
    """``evaluate --top-k`` -> SamplingSettings.top_k -> HFEngine.generate: at temperature 1 with top-1 every sample
    is the greedy response (without top-k the tiny random model's samples differ from it)."""
    import torch

    from rlec.generation import HFEngine
    from rlec.models import load_tokenizer
    from rlec.prompts import build_messages, math_task, render

    torch.set_num_threads(1)
    tok = load_tokenizer(tiny_moe_dir)
    prompts = [render(tok, build_messages(math_task("What is 2+3?"), None))] * 4
    greedy = HFEngine(str(tiny_moe_dir), tok, SamplingSettings(temperature=0.0, max_new_tokens=8), device="cpu")
    want = [g.text for g in greedy.generate(prompts, [1, 2, 3, 4])]
    for top_k, same in ((1, True), (-1, False)):
        engine = HFEngine(str(tiny_moe_dir), tok, SamplingSettings(temperature=1.0, max_new_tokens=8, top_k=top_k), device="cpu")
        got = [g.text for g in engine.generate(prompts, [1, 2, 3, 4])]
        assert (got == want) is same, (top_k, got, want)


def test_summary_cli_writes_the_named_rows_and_refuses_a_run_without_calibration(tmp_path: Path, record_factory, capsys) -> None:
    sweep, q = _files(tmp_path, record_factory)
    out = tmp_path / "m"
    assert metrics.main([str(sweep), "--q-records", str(q), "--targets", SPEC, "--out-dir", str(out), "--quiet", "--bootstrap", "0",
                         "--no-plots"]) == 0
    target = tmp_path / "s.json"
    assert cal.main([str(out / "metrics.json"), "--targets", "0.6", "--strata", "all,digits=2", "--out", str(target)]) == 0
    got = json.loads(target.read_text())["sweep"]
    assert list(got["strata"]) == ["all", "digits=2"] and got["strata"]["all"]["per_target"][0]["regret"]["value"] == pytest.approx(0.0875)
    assert metrics.main([str(sweep), "--targets", SPEC, "--out-dir", str(tmp_path / "n"), "--quiet", "--no-plots", "--no-calibration"]) == 0
    assert cal.main([str(tmp_path / "n" / "metrics.json"), "--out", str(tmp_path / "t.json")]) == 2
    assert "run 'sweep' has no calibration figures" in capsys.readouterr().err and not (tmp_path / "t.json").exists()
