"""benchmarks/mismatch.py without a launch: verl's console step lines parsed into the table's columns, the R3 arm's
router disagreement stated as replayed, bad arguments refused before any launch."""

from __future__ import annotations

import sys

import pytest


@pytest.fixture(scope="module")
def bench(repo_root):
    sys.path.insert(0, str(repo_root / "benchmarks"))
    import mismatch

    return mismatch


def test_console_step_lines_become_the_tables_rows(bench):
    log = ("(TaskRunner pid=1) step:2 - rollout_corr/kl:np.float64(-0.0002) - rollout_corr/k3_kl:0.0011 - "
           "rlec/router_disagreement:0.17 - training/global_step:2 - note:text\nother line\n")
    steps = bench.step_metrics(log)
    assert steps == {2: {"rollout_corr/kl": -0.0002, "rollout_corr/k3_kl": 0.0011, "rlec/router_disagreement": 0.17,
                         "training/global_step": 2.0}}
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
