"""benchmarks/mismatch.py without a launch: a launch's metrics.jsonl read into the table's columns, the R3 arm's
router disagreement stated as replayed, bad arguments refused before any launch."""

from __future__ import annotations

import json
import sys

import pytest


@pytest.fixture(scope="module")
def bench(repo_root):
    sys.path.insert(0, str(repo_root / "benchmarks"))
    import mismatch

    return mismatch


def test_the_launchs_metrics_file_becomes_the_tables_rows(bench, tmp_path):
    (tmp_path / "metrics.jsonl").write_text(json.dumps({
        "step": 2, "rollout_corr/kl": -0.0002, "rollout_corr/k3_kl": 0.0011, "rlec/router_disagreement": 0.17,
        "training/global_step": 2, "note": "text", "flag": True}) + "\n" + '{"step": 3, "torn')
    steps = bench.step_metrics(tmp_path)
    assert steps == {2: {"step": 2.0, "rollout_corr/kl": -0.0002, "rollout_corr/k3_kl": 0.0011,
                         "rlec/router_disagreement": 0.17, "training/global_step": 2.0}}
    assert bench.step_metrics(tmp_path / "missing") == {}
    rows = {2: {col: steps[2].get(key) for col, key in bench.COLUMNS.items()}}
    text = bench.table({"arms": [{"arm": "none", "noise": 0.05, "steps": rows, "returncode": 0, "log": "x"}]})
    assert "| none | 0.05 | 2 | -0.0002 | 0.0011 |" in text and "| 0.17 |" in text
    r3 = bench.table({"arms": [{"arm": "r3", "noise": 0.05, "steps": rows, "returncode": 0, "log": "x"}]})
    assert "| 0 (replayed; rollout vs exact 0.17) |" in r3 and "router_replay=r3" in bench.ARMS["r3"]["overrides"]


@pytest.mark.parametrize("argv, message", [(["--arms", "none,r4"], "--arms"), (["--steps", "0"], "--steps"),
                                           (["--noise", "0"], "--noise"), (["--noise", "2"], "--noise")])
def test_bad_arguments_are_refused_before_any_launch(bench, argv, message, capsys):
    with pytest.raises(SystemExit) as exc:
        bench.parse_args(argv)
    assert exc.value.code == 2 and message in capsys.readouterr().err
