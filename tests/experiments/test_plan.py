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


def test_passks_shared_data_is_the_pool_and_its_folder_can_be_claimed_again(tmp_path: Path, monkeypatch) -> None:
    import json

    import pyarrow.parquet as pq

    from rlec.demo import warm_start
    from rlec.experiments import core

    exp = cli.load("passk").quick(cli.QUICK_BATCH)
    built = []
    monkeypatch.setattr(warm_start, "build", lambda out, cfg, **k: built.append(cfg) or Path(out))  # no training here
    paths = core.prepare_shared(tmp_path, exp)
    assert built == [exp.warm_start] and exp.warm_start.pair_sum_share > 0
    rows = pq.read_table(paths["train"]).to_pylist()
    assert len(rows) == exp.train_rows == 64 and {r["data_source"] for r in rows} == {"rlve/pair_sum"}
    assert all(r["extra_info"]["objective"] == "binary" for r in rows)
    summary = json.loads((tmp_path / "shared" / "data" / "summary.json").read_text())
    assert len(summary["right_answers_per_row"]["train"]) == 64 and summary["right_answers"]["test"]["d1"]["rows"] == 32
    stamp = core.settings_stamp(exp, 4)
    assert stamp["pool"] == {"environment": "pair_sum", "difficulties": [0, 1], "test_per_difficulty": 32}
    assert stamp["warm_start_key"] == warm_start.folder_key(exp.warm_start)
    core.claim_folder(tmp_path, stamp)
    core.claim_folder(tmp_path, stamp)  # the stamp read back from JSON equals the spec's: a rerun is not refused
