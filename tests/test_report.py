"""rlec.report: the durable metrics.jsonl (resume truncation, torn line) and the summary on verl's metric names:
the data behind the curves plot (not its pixels), the time split, the step table."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlec.report import (METRICS_FILE, REWARD_NOTE, STEP_PHASES, MetricsFile, curve_series, plot_curves, read_metrics,
                         step_time_split, time_split, training_table)
from rlec.run_config import RunConfig


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_resume_drops_the_steps_after_the_resumed_one_and_keeps_the_earlier_lines_byte_for_byte(tmp_path: Path) -> None:
    first = MetricsFile(tmp_path, resume_step=0)
    for step in (1, 2, 3, 4):
        first.log({"actor/pg_loss": 0.1 * step}, step)
    before = (tmp_path / METRICS_FILE).read_text().splitlines()
    resumed = MetricsFile(tmp_path, resume_step=2)  # checkpoint of step 2: steps 3-4 will be trained again
    assert [r["step"] for r in _lines(resumed.path)] == [1, 2]
    assert resumed.path.read_text().splitlines() == before[:2] and not resumed.notes
    resumed.log({"actor/pg_loss": 9.0}, 3)
    assert [r["step"] for r in read_metrics(resumed.path)] == [1, 2, 3]
    assert read_metrics(resumed.path)[-1]["actor/pg_loss"] == 9.0


def test_a_torn_last_line_is_dropped_with_a_note(tmp_path: Path) -> None:
    MetricsFile(tmp_path, resume_step=0).log({"x": 1.0}, 1)
    path = tmp_path / METRICS_FILE
    with open(path, "a") as f:
        f.write('{"step": 2, "x": 1.')  # a write cut by SIGKILL
    assert [r["step"] for r in read_metrics(path)] == [1]  # the reader skips it too
    kept = MetricsFile(tmp_path, resume_step=5)
    assert [r["step"] for r in _lines(path)] == [1]
    assert len(kept.notes) == 1 and "line 2" in kept.notes[0]


def test_a_new_run_starts_an_empty_file_and_values_are_plain_json(tmp_path: Path) -> None:
    np = pytest.importorskip("numpy")
    old = MetricsFile(tmp_path, resume_step=0)
    old.log({"x": 1.0}, 1)
    inode = old.path.stat().st_ino
    new = MetricsFile(tmp_path, resume_step=0)  # RESUME=disable, or no checkpoint: every old line goes
    assert new.path.read_text() == "" and new.path.stat().st_ino != inode  # rewritten: a reader sees a new file
    new.log({"a": np.float64(0.5), "b": np.int64(3), "c": float("nan"), "step": 99}, 1)
    (record,) = _lines(new.path)
    assert record == {"step": 1, "a": 0.5, "b": 3, "c": None}


# one step as verl's trainer logs it (names from a real run of layout=cpu with algorithm=[e3,passk])
VERL_STEP = {"step": 1, "training/global_step": 1, "rlec/b": 0.0, "rlec/reward/mean": -0.35, "rlec/coverage": 0.81,
             "rlec/accuracy": 0.06, "actor/entropy": 11.9, "actor/pg_loss": 0.13, "actor/grad_norm": 0.25,
             "e3/temperature": 0.97, "passk/active_k": 2, "timing_s/gen": 14.0, "timing_s/old_log_prob": 7.0,
             "timing_s/adv": 0.1, "timing_s/update_actor": 13.0, "timing_s/save_checkpoint": 6.0,
             "timing_s/update_weights": 0.7, "timing_s/step": 42.0, "timing_s/testing": 10.0,
             "perf/time_per_step": 42.0}


def test_the_summary_reads_verls_metric_names_with_the_algorithms_columns() -> None:
    header, _, row = training_table([VERL_STEP]).splitlines()
    assert "E3 T" in header and "pass@k k" in header and "step s" in header
    assert "0.970" in row and "| 2 |" in row and "42.0" in row
    split = step_time_split(VERL_STEP)
    assert split["other"] == pytest.approx(1.2)
    text = time_split([VERL_STEP])
    # verl times the checkpoint inside the step and the validation after it
    assert "save_checkpoint 6.0s (14%)" in text and "other 1.2s (3%)" in text and "testing (after the step) 10.0s" in text


def _record(step: int, b: float) -> dict:
    # a random policy: the same outcomes every step (reward at b = 1 flat), the step's reward moving with b alone
    return {"step": step, "rlec/b": b, "rlec/reward/mean": -0.7 + 0.4 * b, "rlec/reward_b1/mean": -0.3,
            "rlec/coverage": 0.9, "timing_s/gen": 2.0, "timing_s/reward": 0.5, "timing_s/adv": 0.1,
            "timing_s/old_log_prob": 1.5, "timing_s/update_actor": 3.0, "timing_s/update_weights": 0.4,
            "timing_s/save_checkpoint": 0.0, "timing_s/step": 8.0}


RECORDS = [_record(step, (step - 1) / 4) for step in range(1, 6)]


def test_time_split_covers_the_whole_step() -> None:
    # issue 26 item 12: the panel stacked gen, reward, update_actor, update_weights only (5.9 of 8.0 s here)
    split = step_time_split(RECORDS[0])
    assert set(split) == {*STEP_PHASES, "other"}
    assert split["old_log_prob"] == 1.5 and split["adv"] == 0.1 and split["other"] == pytest.approx(0.5)
    assert sum(split.values()) == pytest.approx(RECORDS[0]["timing_s/step"])
    text = time_split(RECORDS)
    assert "old_log_prob 7.5s (19%)" in text and "other 2.5s (6%)" in text and "gen 10.0s (25%)" in text


def test_time_split_without_a_step_time_has_no_negative_rest() -> None:
    split = step_time_split({"timing_s/gen": 1.0})
    assert split["other"] == 0.0 and sum(split.values()) == 1.0


def test_reward_panel_shows_reward_at_fixed_b_and_says_the_rise_is_the_schedule() -> None:
    series = curve_series(RECORDS)
    assert list(series) == ["reward (b of the step)", "reward at b = 1", "b", "coverage"]
    assert series["reward (b of the step)"] == pytest.approx([-0.7, -0.6, -0.5, -0.4, -0.3])  # rises with b only
    assert series["reward at b = 1"] == [-0.3] * 5  # flat: nothing was learned
    assert "b schedule" in REWARD_NOTE and "b = 1" in REWARD_NOTE
    assert "reward at b = 1" not in curve_series([{"step": 1, "rlec/reward/mean": 0.1}])  # older metrics files


def test_plot_is_written(tmp_path: Path) -> None:
    png = plot_curves(RECORDS, tmp_path / "curves.png")
    assert png is not None and png.stat().st_size > 0 and plot_curves([], tmp_path / "none.png") is None


def test_the_table_shows_each_enabled_algorithms_figures_and_nothing_of_the_others() -> None:
    plain = training_table([{"step": 1, "rlec/b": 0.0}])
    assert "E3 T" not in plain and "pass@k" not in plain
    table = training_table([{"step": 1, "e3/temperature": 0.95, "passk/active_k": 2, "rlve/maze/difficulty": 3}])
    header, _, row = table.splitlines()
    assert "E3 T" in header and "pass@k k" in header and "maze d" in header
    assert "0.950" in row and "| 2 |" in row and "| 3 |" in row



# ---------------------------------------------------------------------------------------------- final evaluation
def _eval_config(val_file: Path, model: Path):
    from omegaconf import OmegaConf

    return OmegaConf.create({"data": {"val_files": str(val_file), "seed": 1},
                             "actor_rollout_ref": {"model": {"path": str(model)}},
                             "rlec": {"cpu": {"eval": {"max_questions": 1, "max_new_tokens": 2}}}})


USER_RECORDS = '{"a user\'s": "finished records"}\n' * 132


def test_the_final_evaluation_keeps_a_users_records_in_its_folder_and_says_where(tmp_path: Path, tiny_moe_dir: Path,
                                                                                sample_data_dir: Path, capsys) -> None:
    """Issue 55 item 1: ``python -m rlec.eval.evaluate --out OUTPUT_DIR/eval/records.jsonl`` (132 finished records)
    then a launch's final evaluation into the same folder: the user's file is moved aside, byte for byte, under a
    name the console gives, and the new records are the new model's (before: unlinked without a word)."""
    import os

    from rlec.eval.records import read_records
    from rlec.report import evaluate_final

    records = tmp_path / "eval" / "records.jsonl"
    records.parent.mkdir()
    records.write_text(USER_RECORDS)
    os.utime(records, (1796622360, 1796622360))  # 2026-12-07 05:46:00 UTC: the aside name says when it was written
    cfg = _eval_config(sample_data_dir / "test.parquet", tiny_moe_dir)
    assert evaluate_final(RunConfig(cfg), tmp_path, tiny_moe_dir, random_model=True) == 0
    out = capsys.readouterr().out
    kept = tmp_path / "eval" / "records.20261207T054600Z.jsonl"
    assert f"{records} held records written before this evaluation: kept as {kept}" in out
    assert kept.read_text() == USER_RECORDS
    new, _ = read_records(records)
    assert new and {r["model"] for r in new} == {str(tiny_moe_dir)}
    assert (tmp_path / "eval" / "metrics" / "metrics.json").is_file()
    assert not list((tmp_path / "eval").glob(".*.lock"))  # released


def test_the_final_evaluation_refuses_a_live_writer_of_its_records_naming_its_pid(tmp_path: Path, tiny_moe_dir: Path,
                                                                                  sample_data_dir: Path, capsys) -> None:
    """Issue 55 item 1: a ``python -m rlec.eval.evaluate`` still writing ``OUTPUT_DIR/eval/records.jsonl`` (it holds the
    records' output lock) makes the launch's final evaluation refuse in one line naming that pid: the file, the
    folder and the writer's lock untouched, no metrics written."""
    import os
    import subprocess
    import sys
    import time

    from rlec.io import lock_path
    from rlec.report import evaluate_final

    records = tmp_path / "eval" / "records.jsonl"
    records.parent.mkdir()
    records.write_text(USER_RECORDS[:40])  # a writer in the middle of its run
    ready = tmp_path / "ready"
    code = (f"import time, pathlib\nfrom rlec.io import output_lock\nlock = output_lock({str(records)!r}).acquire()\n"
            f"pathlib.Path({str(ready)!r}).touch()\ntime.sleep(600)")
    writer = subprocess.Popen([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
    try:
        deadline = time.monotonic() + 60
        while not ready.exists():
            assert writer.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        holder = lock_path(records).read_text()
        assert evaluate_final(RunConfig(_eval_config(sample_data_dir / "test.parquet", tiny_moe_dir)), tmp_path, tiny_moe_dir) == 2
        err = capsys.readouterr().err
        lines = [line for line in err.splitlines() if line.startswith("error:")]
        assert len(lines) == 1, err
        assert f"in use by pid {writer.pid} " in lines[0] and str(records) in lines[0], lines
        assert "the final evaluation did not run" in lines[0]
        assert records.read_text() == USER_RECORDS[:40] and lock_path(records).read_text() == holder
        assert sorted(p.name for p in records.parent.iterdir()) == [".records.jsonl.lock", "records.jsonl"]
    finally:
        writer.kill()
        writer.wait(timeout=30)


def test_a_final_evaluation_folder_that_is_a_file_is_one_error_line(tmp_path: Path, tiny_moe_dir: Path,
                                                                     sample_data_dir: Path, capsys) -> None:
    from rlec.report import evaluate_final

    (tmp_path / "eval").write_text("not a folder")
    assert evaluate_final(RunConfig(_eval_config(sample_data_dir / "test.parquet", tiny_moe_dir)), tmp_path, tiny_moe_dir) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and str(tmp_path / "eval") in err and len(err.strip().splitlines()) == 1, err
    assert (tmp_path / "eval").read_text() == "not a folder"
