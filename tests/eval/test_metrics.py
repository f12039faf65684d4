"""``rlec.eval.metrics``: grading through the real grader, the worked examples end to end, bad input,
comparison, bootstrap reproducibility, outputs; and one run of both commands on the tiny model."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rlec.eval import evaluate, metrics
from rlec.eval.records import atomic_write_jsonl

PNGS = ("coverage_selective_accuracy.png", "risk_coverage.png", "reward_vs_target.png", "hallucination_abstention.png", "reliability.png")


def _run(records_path: Path, out_dir: Path, *extra: str) -> dict:
    code = metrics.main([str(records_path), "--out-dir", str(out_dir), "--quiet", *extra])
    assert code == 0
    return json.loads((out_dir / "metrics.json").read_text())


@pytest.mark.parametrize("name", ["calibrated", "conservative", "random"])
def test_worked_example_through_grader_and_cli(tmp_path: Path, worked, name: str) -> None:
    path = atomic_write_jsonl(tmp_path / f"{name}.jsonl", worked.records(name))
    result = _run(path, tmp_path / "m", "--targets", worked.spec, "--no-plots", "--bootstrap", "100")
    run = result["runs"][name]
    assert list(run["groups"]) == ["all", "math"]
    head = run["groups"]["all"]["headline"]
    accuracy, score, area, aoc = worked.headlines[name]
    assert head["accuracy"]["value"] == pytest.approx(accuracy)
    assert head["rlec_score"]["value"] == pytest.approx(score)
    assert head["aurc"]["value"] == pytest.approx(area)
    assert head["aoc"]["value"] == pytest.approx(aoc)
    rows = run["groups"]["all"]["per_target"]
    for row, (cov, sel, acc, reward) in zip(rows[1:], worked.per_target[name]):
        assert (row["coverage"], row["selective_accuracy"], row["accuracy"]) == pytest.approx((cov, sel, acc))
        assert row["reward"] == pytest.approx(reward)
    assert head["rlec_score"]["ci_low"] <= score <= head["rlec_score"]["ci_high"]


def test_sources_are_reported_apart_and_pooled(tmp_path: Path, worked) -> None:
    records = worked.records("calibrated", source="math") + worked.records("always_answer", source="hotpotqa")
    path = atomic_write_jsonl(tmp_path / "two.jsonl", records)
    groups = _run(path, tmp_path / "m", "--targets", worked.spec, "--no-plots", "--bootstrap", "0")["runs"]["two"]["groups"]
    assert groups["math"]["headline"]["rlec_score"]["value"] == pytest.approx(0.40625)
    assert groups["hotpotqa"]["headline"]["rlec_score"]["value"] == pytest.approx(0.375)
    assert groups["all"]["headline"]["rlec_score"]["value"] == pytest.approx((0.40625 + 0.375) / 2)  # equal sizes
    assert groups["all"]["n_questions"] == 8 and groups["all"]["headline"]["aoc"]["ci_low"] is None


def test_bad_lines_fail_with_line_number_or_are_skipped_and_reported(tmp_path: Path, worked, capsys) -> None:
    path = atomic_write_jsonl(tmp_path / "r.jsonl", worked.records("calibrated"))
    lines = path.read_text().splitlines()
    lines.insert(2, '{"question_id": 3')
    path.write_text("\n".join(lines) + "\n")
    assert metrics.main([str(path), "--out-dir", str(tmp_path / "m"), "--targets", worked.spec]) == 2
    assert "r.jsonl:3: invalid JSON" in capsys.readouterr().err
    result = _run(path, tmp_path / "m", "--targets", worked.spec, "--no-plots", "--skip-invalid", "--bootstrap", "0")
    assert result["runs"]["r"]["records"]["invalid"][0]["line"] == 3
    assert result["runs"]["r"]["groups"]["all"]["headline"]["rlec_score"]["value"] == pytest.approx(0.40625)


def test_unknown_source_outside_grid_and_duplicates_are_counted(tmp_path: Path, worked, record_factory) -> None:
    extra = [
        dict(record_factory("x1", 0.5, "correct"), data_source="gsm8k"),
        record_factory("x2", 0.35, "correct"),
        worked.records("calibrated")[0],
    ]
    path = atomic_write_jsonl(tmp_path / "r.jsonl", worked.records("calibrated") + extra)
    result = _run(path, tmp_path / "m", "--targets", worked.spec, "--no-plots", "--bootstrap", "0")
    diag = result["runs"]["r"]["records"]
    assert diag["unknown_source"] == {"gsm8k": 1} and diag["outside_grid"] == {"0.35": 1} and diag["duplicates"] == 1
    assert diag["kept"] == 20 and diag["read"] == 23
    assert "targets outside the grid: {'0.35': 1}" in (tmp_path / "m" / "metrics.md").read_text()


def test_intervals_are_reproducible_with_a_seed(tmp_path: Path, worked) -> None:
    records = worked.records("random") + worked.records("calibrated", source="hotpotqa")
    path = atomic_write_jsonl(tmp_path / "r.jsonl", records)
    args = ("--targets", worked.spec, "--no-plots", "--bootstrap", "300")
    a, b, c = (_run(path, tmp_path / d, *args, "--seed", s)["runs"]["r"] for d, s in (("a", "3"), ("b", "3"), ("c", "4")))
    assert a["groups"] == b["groups"] and a["calibration"]["strata"] == b["calibration"]["strata"]
    assert a["groups"]["all"]["headline"] != c["groups"]["all"]["headline"]
    assert a["calibration"]["strata"]["all"]["headline"] != c["calibration"]["strata"]["all"]["headline"]


def test_compare_two_runs_side_by_side(tmp_path: Path, worked) -> None:
    base = atomic_write_jsonl(tmp_path / "base" / "records.jsonl", worked.records("always_answer", qid_prefix="q"))
    tuned = atomic_write_jsonl(tmp_path / "tuned" / "records.jsonl", worked.records("calibrated", qid_prefix="q"))
    out = tmp_path / "m"
    code = metrics.main([str(base), "--compare", str(tuned), "--out-dir", str(out), "--targets", worked.spec, "--quiet", "--bootstrap", "50"])
    assert code == 0
    result = json.loads((out / "metrics.json").read_text())
    assert list(result["runs"]) == ["base/records", "tuned/records"]
    assert result["comparison"]["all"]["rlec_score"] == pytest.approx(0.40625 - 0.375)
    assert result["comparison"]["all"]["aoc"] == pytest.approx(0.9375 - 0.75)
    table = (out / "metrics.md").read_text()
    assert "| all | RLEC score | 0.375" in table and "tuned/records - base/records" in table
    for name in PNGS:
        assert (out / name).stat().st_size > 10_000
    assert (out / "graded-base_records.jsonl").is_file() and (out / "graded-tuned_records.jsonl").is_file()
    assert metrics.main([str(base), str(tuned), str(tuned), "--out-dir", str(out)]) == 2
    assert result["question_overlap"]["only_first"] == result["question_overlap"]["only_second"] == 0
    assert "Different question sets" not in table


def test_compare_flags_different_question_sets(tmp_path: Path, worked, capsys) -> None:
    records = list(worked.records("calibrated", qid_prefix="q"))
    first_q = records[0]["question_id"]
    base = atomic_write_jsonl(tmp_path / "base.jsonl", worked.records("always_answer", qid_prefix="q"))
    fewer = atomic_write_jsonl(tmp_path / "fewer.jsonl", [r for r in records if r["question_id"] != first_q])
    out = tmp_path / "m"
    args = [str(base), "--compare", str(fewer), "--out-dir", str(out), "--targets", worked.spec, "--quiet", "--bootstrap", "20", "--no-plots"]
    assert metrics.main(args) == 0
    assert "warning: base and fewer share" in capsys.readouterr().err
    result = json.loads((out / "metrics.json").read_text())
    n = result["runs"]["base"]["groups"]["all"]["n_questions"]
    assert result["question_overlap"] == {"common": n - 1, "only_first": 1, "only_second": 0}
    table = (out / "metrics.md").read_text()
    assert "**Different question sets**" in table and f"| all | questions | {n} | {n - 1} | -1 |" in table


def test_cli_subprocess_grades_with_the_math_verify_pool(tmp_path: Path, record_factory, repo_root: Path) -> None:
    """``python -m rlec.eval.metrics`` spawns math-verify workers: a rationalised fraction needs the pool
    (plain numbers, fractions, radicals and tuples are settled by the exact path)."""
    rec = dict(record_factory("q1", 0.5, "correct"), ground_truth="\\frac{\\sqrt{2}}{2}", response="Thus \\boxed{\\frac{1}{\\sqrt{2}}}.")
    path = atomic_write_jsonl(tmp_path / "r.jsonl", [rec])
    env = {**os.environ, "PYTHONPATH": str(repo_root), "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "rlec.eval.metrics", str(path), "--targets", "0.5", "--no-plots", "--quiet"],
        capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    graded = [json.loads(line) for line in (tmp_path / "r.metrics" / "graded-r.jsonl").read_text().splitlines()]
    assert graded[0]["grade"]["outcome"] == "correct" and graded[0]["grade"]["detail"] == "math_verify"
    assert "| all | 1 | 1 |" in proc.stdout


def test_end_to_end_cpu_run_on_the_tiny_model_writes_every_output(tmp_path: Path, tiny_moe_dir: Path, base_rows, parquet_writer) -> None:
    data = parquet_writer(tmp_path / "eval.parquet", base_rows[:2] + base_rows[6:8])  # 2 math, 2 QA
    records = tmp_path / "eval" / "records.jsonl"
    code = evaluate.main([
        "--model", str(tiny_moe_dir), "--data", str(data), "--out", str(records), "--engine", "hf",
        "--targets", "binary,0.0,0.5,0.9", "--temperature", "0", "--max-new-tokens", "8", "--batch-size", "8",
    ])  # fmt: skip
    assert code == 0
    lines = records.read_text().splitlines()
    assert len(lines) == 16
    assert metrics.main([str(records), "--targets", "binary,0.0,0.5,0.9", "--quiet", "--bootstrap", "200"]) == 0
    out = tmp_path / "eval" / "records.metrics"  # the default: derived from the records file's name
    result = json.loads((out / "metrics.json").read_text())
    groups = result["runs"]["records"]["groups"]
    assert set(groups) == {"all", "math", "hotpotqa"} and groups["all"]["n_records"] == 16
    assert all(row["n"] == 4 for row in groups["all"]["per_target"])
    assert sum(result["runs"]["records"]["grading"]["outcomes"].values()) == 16
    assert (out / "metrics.md").read_text().startswith("## records: headline figures")
    assert len((out / "graded-records.jsonl").read_text().splitlines()) == 16
    for name in PNGS:
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert (out / name).stat().st_size > 10_000


# ---- faults: one line, exit status 2, nothing written; outputs of one invocation all or nothing -----


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--ci", "1.5"], "--ci must be in (0, 1), e.g. 0.95, got 1.5"),
        (["--ci", "0"], "--ci must be in (0, 1)"),
        (["--bootstrap", "-5"], "--bootstrap must be >= 0 (0 = no intervals), got -5"),
        (["--timeout-s", "0"], "--timeout-s must be a positive number of seconds, got 0.0"),
        (["--timeout-s", "nan"], "--timeout-s must be a positive number of seconds, got nan"),
    ],
)
def test_bad_settings_are_refused_before_grading(tmp_path: Path, worked, capsys, flags: list[str], message: str) -> None:
    path = atomic_write_jsonl(tmp_path / "r.jsonl", worked.records("calibrated"))
    assert metrics.main([str(path), "--targets", worked.spec, *flags]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"error: {message}" or (err.startswith(f"error: {message}") and "\n" not in err)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.jsonl"]


@pytest.mark.parametrize(("gold", "source", "reason"), [
    ("", "math", "gold answer for a math item must be a non-empty string"),
    ("  ", "hotpotqa", "gold answer for a qa item must be a non-empty string"),
])  # fmt: skip
def test_ungradable_gold_names_file_and_line_or_is_skipped(tmp_path: Path, worked, capsys, gold: str, source: str, reason: str) -> None:
    records = worked.records("calibrated", source=source)
    records[3] = dict(records[3], ground_truth=gold)
    path = atomic_write_jsonl(tmp_path / "r.jsonl", records)
    assert metrics.main([str(path), "--targets", worked.spec, "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: {path}:4: key 'ground_truth': {reason}") and "\n" not in err, err
    assert not (tmp_path / "r.metrics").exists()
    result = _run(path, tmp_path / "m", "--targets", worked.spec, "--no-plots", "--bootstrap", "0", "--skip-invalid")
    assert result["runs"]["r"]["records"]["invalid"] == [{"line": 4, "reason": f"key 'ground_truth': {reason}, got {gold!r}"}]


def test_an_all_bad_gold_file_is_one_line(tmp_path: Path, worked, capsys) -> None:
    path = atomic_write_jsonl(tmp_path / "r.jsonl", [dict(r, ground_truth=" ") for r in worked.records("calibrated", source="hotpotqa")])
    assert metrics.main([str(path), "--targets", worked.spec, "--quiet", "--skip-invalid"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: {path}: no scorable records") and "\n" not in err


@pytest.mark.parametrize("case", ["below_a_file", "unwritable", "foreign_files", "is_a_file"])
def test_out_dir_that_cannot_be_written_or_replaced_is_refused_first(tmp_path: Path, worked, capsys, case: str) -> None:
    path = atomic_write_jsonl(tmp_path / "r.jsonl", worked.records("calibrated"))
    out = {"below_a_file": tmp_path / "afile" / "m", "unwritable": Path("/sys/rlec-test/m"), "foreign_files": tmp_path,
           "is_a_file": tmp_path / "afile"}[case]
    (tmp_path / "afile").write_text("x")
    before = sorted(p.name for p in tmp_path.iterdir())
    assert metrics.main([str(path), "--out-dir", str(out), "--targets", worked.spec, "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    expected = {"below_a_file": "is a file, not a folder", "unwritable": "cannot write in /sys",
                "foreign_files": "holds files metrics did not write (afile, r.jsonl)", "is_a_file": "is a file, not a folder"}[case]
    assert err.startswith(f"error: --out-dir {out}: ") and expected in err and "\n" not in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == before


@pytest.mark.parametrize("failure", ["second_input_bad", "crash_while_writing"])
def test_outputs_of_one_invocation_appear_together_or_not_at_all(tmp_path: Path, worked, monkeypatch, failure: str) -> None:
    first = atomic_write_jsonl(tmp_path / "a.jsonl", worked.records("calibrated", qid_prefix="q"))
    second = atomic_write_jsonl(tmp_path / "b.jsonl", worked.records("always_answer", qid_prefix="q"))
    out = tmp_path / "cmp"
    args = [str(first), "--compare", str(second), "--out-dir", str(out), "--targets", worked.spec, "--quiet", "--bootstrap", "0"]
    assert metrics.main([*args, "--no-plots"]) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    if failure == "second_input_bad":
        second.write_text(second.read_text() + "{broken\n")
        assert metrics.main(args) == 2
    else:
        def crash(*_a, **_k):
            raise KeyboardInterrupt

        monkeypatch.setattr("rlec.eval.plots.write_plots", crash)
        assert metrics.main(args) == 130
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # the previous outputs, whole
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.jsonl", "b.jsonl", "cmp"]  # no temporary folder or lock left


def test_default_out_dirs_of_different_record_files_never_collide(tmp_path: Path, worked, capsys) -> None:
    a = atomic_write_jsonl(tmp_path / "base.jsonl", worked.records("always_answer", qid_prefix="q"))
    b = atomic_write_jsonl(tmp_path / "tuned.jsonl", worked.records("calibrated", qid_prefix="q"))
    common = ["--targets", worked.spec, "--quiet", "--bootstrap", "0", "--no-plots"]
    assert metrics.main([str(a), *common]) == 0 and metrics.main([str(b), *common]) == 0
    assert metrics.main([str(a), "--compare", str(b), *common]) == 0
    assert metrics.default_out_dir([a]) == tmp_path / "base.metrics"
    runs = {d.name: list(json.loads((d / "metrics.json").read_text())["runs"]) for d in tmp_path.glob("*.metrics")}
    assert runs == {"base.metrics": ["base"], "tuned.metrics": ["tuned"], "base-vs-tuned.metrics": ["base", "tuned"]}
    capsys.readouterr()
    assert metrics.main([str(b), "--out-dir", str(tmp_path / "base.metrics"), *common]) == 0  # asked for: replaced, and said so
    assert f"note: replaced the metrics of {a} in {tmp_path / 'base.metrics'}" in capsys.readouterr().err


def test_records_that_are_not_utf8_or_a_folder_are_named(tmp_path: Path, worked, capsys) -> None:
    path = atomic_write_jsonl(tmp_path / "r.jsonl", worked.records("calibrated"))
    path.write_bytes(path.read_bytes().replace(b'"(prompt)"', b'"\xff(prompt)"', 1))
    assert metrics.main([str(path), "--targets", worked.spec]) == 2
    assert f"error: {path}:1: not UTF-8 text (byte 0xff at column " in capsys.readouterr().err
    assert metrics.main([str(tmp_path), "--targets", worked.spec]) == 2
    assert f"error: record file {tmp_path} is a folder" in capsys.readouterr().err
