"""The data-throughput benchmark runs end to end (small size; the figures are not checked here)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


@pytest.mark.slow  # the benchmark in a child process (~5 CPU-s)
def test_benchmark_runs_and_reports_figures(repo_root, tmp_path):
    out = tmp_path / "figures.json"
    res = subprocess.run(
        [sys.executable, str(repo_root / "benchmarks" / "data_throughput.py"), "--rows", "400", "--json", str(out)],
        capture_output=True, text=True, cwd=repo_root, timeout=600,
    )
    assert res.returncode == 0, res.stderr[-2000:]
    figures = json.loads(out.read_text())
    assert figures["input_rows"] == 400
    # 200 math rows (40 held out) + 200 HotpotQA rows, 5 repeats; + 15 HotpotQA test and 40 math test rows
    assert figures["output_rows"] == 5 * (160 + 200) + 15 + 40
    assert figures["wall_s"] > 0 and 0 < figures["peak_rss_gib"] < 64
    assert "rows_per_s" in res.stdout and "peak_rss_gib" in res.stdout
