"""benchmarks/eval_metrics.py: the process order, the summary's medians and cost, bad input, and make run's arguments."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from rlec.report import final_metrics_args

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("eval_metrics_benchmark", REPO / "benchmarks" / "eval_metrics.py")
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)


def test_the_variants_alternate_in_abba_pairs() -> None:
    assert bench.order(3) == ["on", "off", "off", "on", "on", "off"]


def test_summary_medians_and_the_calibrations_cost() -> None:
    runs = [{"variant": "on", "first_s": 10.0, "warm_s": 4.0, "load": 5.0},
            {"variant": "off", "first_s": 7.0, "warm_s": 3.0, "load": 6.0},
            {"variant": "off", "first_s": 9.0, "warm_s": 3.5, "load": 7.0},
            {"variant": "on", "first_s": 14.0, "warm_s": 5.0, "load": 8.0},
            {"variant": "on", "first_s": 11.0, "warm_s": 4.5, "load": 9.0},
            {"variant": "off", "first_s": 8.0, "warm_s": 2.0, "load": 4.0}]
    s = bench.summarize(runs)
    assert (s["on"]["first_s"], s["on"]["warm_s"]) == (11.0, 4.5)  # medians of 10, 14, 11 and 4, 5, 4.5
    assert (s["off"]["first_s"], s["off"]["warm_s"]) == (8.0, 3.0)
    assert s["cost"] == {"first_s": 3.0, "warm_s": 1.5}
    assert s["on"]["load"] == [5.0, 8.0, 9.0]
    text = bench.table(s)
    assert "| calibration on (make run's call) | 11.00 [10.00, 14.00, 11.00] | 4.50 [4.00, 5.00, 4.50] |" in text
    assert "| calibration's cost (on - off) | +3.00 | +1.50 |" in text


def test_bad_input_is_refused_in_one_line(tmp_path, capsys) -> None:
    assert bench.main([str(tmp_path / "missing.jsonl")]) == 2
    assert capsys.readouterr().err.strip() == f"error: records {tmp_path / 'missing.jsonl'}: no such file"
    (tmp_path / "r.jsonl").write_text("")
    assert bench.main([str(tmp_path / "r.jsonl"), "--repeats", "0"]) == 2
    assert "--repeats must be >= 1, got 0" in capsys.readouterr().err


@pytest.mark.parametrize("out_dir", [None, Path("/elsewhere/m")])
def test_the_final_evaluations_metrics_arguments(out_dir) -> None:
    records = Path("/run/eval/records.jsonl")
    expected = str(out_dir) if out_dir else "/run/eval/metrics"
    assert final_metrics_args(records, out_dir) == [str(records), "--bootstrap", "200", "--out-dir", expected]
