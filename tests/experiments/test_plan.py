"""``python -m rlec.experiments <name> --plan`` (alias ``--dry-run``) shows the task and settings and writes nothing;
the specs' new pieces (issue 57 items 5 and 8) are reachable through it; RLVE's primary metric reads the level above
the low static arm's range."""

from __future__ import annotations

import re
from pathlib import Path

from rlec.experiments import cli, report


def test_passk_plan_shows_the_many_answer_task_and_writes_nothing(tmp_path: Path, capsys) -> None:
    out = tmp_path / "o"
    assert cli.main(["passk", "--dry-run", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    exp = cli.load("passk")
    assert exp.data == "pool" and exp.pool.environment == "pair_sum" and exp.warm_start.pair_sum_share > 0
    assert "task: pair_sum (many right answers" in text and "'pair_sum_share': 0.5" in text
    assert report.format_paper_settings(exp) in text and "| pass1 (baseline) |" in text
    assert "distinct right answers" in text and not out.exists()
    # --quick trains the same recipe for a few steps (the wiring, in seconds)
    assert exp.quick(cli.QUICK_BATCH).warm_start.steps == 20 and exp.warm_start.steps == 800


def test_rlec_claims_plans_name_their_metrics(capsys) -> None:
    assert cli.main(["rlec_advantage", "--plan", "--arms", "std_norm,mean_only"]) == 0
    text = capsys.readouterr().out
    assert "primary metric: per-question agreement with 'answer iff q > p'" in text
    assert "secondary (paired, no verdict): held-out coverage gap" in text and "targets [0.1, 0.8, 'binary'], 16 samples" in text
    assert cli.main(["rlec_schedule", "--plan"]) == 0
    assert "seed spread: critic/score/mean: final (last 20%), SD over seeds" in capsys.readouterr().out


def test_rlves_primary_reads_the_level_above_the_low_static_range() -> None:
    exp = cli.load("rlve")
    (pin,) = [o for o in exp.arm("low_static").overrides if "maximum:" in o]
    top = int(re.search(r"maximum:(\d+)", pin).group(1))
    assert exp.primary.requires == (f"held-out accuracy d={top + 1}",)
    assert f"accuracy d={top + 1}" in exp.heldout.figures
