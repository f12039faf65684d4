"""benchmarks/reward_throughput.py: the generator is seeded and labelled, the CLI runs."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("reward_throughput", ROOT / "benchmarks" / "reward_throughput.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["reward_throughput"] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_batch_is_seeded_and_mixed(bench) -> None:
    a, b = bench.make_batch(500, seed=3), bench.make_batch(500, seed=3)
    assert [i.response for i in a] == [i.response for i in b]
    assert sum(i.kind.startswith("pathological") for i in a) == 5
    kinds = {i.expected for i in a}
    assert kinds == {"correct", "incorrect", "abstain"}
    assert 0.3 < sum(i.data_source == "math_dapo" for i in a) / 500 < 0.7
    with pytest.raises(ValueError):
        bench.make_batch(0)


def test_rlec_grader_agrees_with_expected_verdicts(bench) -> None:
    from rlec.grading import grade_batch

    items = bench.make_batch(300, seed=1, pathological_frac=0.0)
    got = grade_batch([i.response for i in items], [i.gold for i in items], [i.data_source for i in items])
    wrong = [(i.response[-60:], i.gold, i.expected, g.outcome.value) for i, g in zip(items, got) if g.outcome.value != i.expected]
    assert not wrong, wrong[:5]


@pytest.mark.slow  # grades 40 responses with each of 3 graders, verl's in worker processes (~6 CPU-s in children)
def test_cli_smoke_writes_json(bench, tmp_path: Path, capsys) -> None:
    out = tmp_path / "rt.json"
    assert bench.main(["--n", "40", "--pathological-frac", "0.05", "--timeout-s", "2", "--json", str(out)]) == 0
    table = capsys.readouterr().out
    assert "| rlec | 40/40 |" in table and "verl math_dapo" in table and "verl math-verify" in table
    assert "rlec decided by: " in table and "rlec / verl math-verify: " in table
    rows = json.loads(out.read_text())["rows"]
    assert [r["grader"] for r in rows] == ["rlec", "verl math_dapo", "verl math-verify"]
    assert rows[0]["max_ms"] < (2 + 1) * 1000  # no item past the timeout + 1 s


def test_every_hostile_kind_is_decided_without_a_timeout(bench, tmp_path: Path) -> None:
    out = tmp_path / "rt.json"
    # 6 hostile items in 40: one of each kind, the power tower included (rlec only: verl's wrapper waits 30 s on it)
    assert bench.main(["--n", "40", "--pathological-frac", "0.15", "--timeout-s", "2", "--skip-verl", "--json", str(out)]) == 0
    (rlec,) = json.loads(out.read_text())["rows"]
    assert rlec["timeouts"] == 0 and rlec["paths"].get("screened", 0) >= 1 and rlec["grader_errors"] == 0
    assert rlec["max_ms"] < 1000 and rlec["agree_3way"] == 1.0
