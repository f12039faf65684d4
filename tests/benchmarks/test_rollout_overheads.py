"""benchmarks/rollout_overheads.py without a model: the settings-read comparison on a small config gives both columns
and the same settings before and after; a run with neither input prints only the load."""

from __future__ import annotations

import sys

import pytest


@pytest.fixture(scope="module")
def bench(repo_root):
    sys.path.insert(0, str(repo_root / "benchmarks"))
    import rollout_overheads

    return rollout_overheads


def test_settings_read_times_both_ways_and_the_cached_read_is_the_fresh_one(bench, tmp_path, monkeypatch):
    from rlec import run_config

    monkeypatch.setattr(run_config, "_WORKER_RUN", None)
    path = tmp_path / "config.yaml"
    path.write_text("rlec:\n  cpu:\n    scripted_fraction: 0.25\n")
    figures = bench.settings_read(str(path), samples=4)
    assert set(figures) == {"before_wall", "before_cpu", "after_wall", "after_cpu"}
    assert all(v >= 0 for v in figures.values())
    assert run_config._WORKER_RUN is not None and run_config._WORKER_RUN.rlec.cpu.scripted_fraction == 0.25


def test_without_inputs_only_the_load_is_printed(bench, capsys):
    assert bench.main([]) == 0
    out = capsys.readouterr().out
    assert "load average at start" in out and "|" not in out
