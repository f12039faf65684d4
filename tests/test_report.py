"""rlec.report: the durable metrics.jsonl (resume truncation, torn line) and the summary on verl's metric names."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlec.report import METRICS_FILE, MetricsFile, read_metrics, step_time_split, time_split, training_table


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
    split = step_time_split(VERL_STEP, phases=("gen", "old_log_prob", "adv", "update_actor", "save_checkpoint",
                                               "update_weights"))
    assert split["other"] == pytest.approx(1.2)
    text = time_split([VERL_STEP])
    # verl times the checkpoint inside the step and the validation after it
    assert "save_checkpoint 6.0s (14%)" in text and "other 1.2s (3%)" in text and "testing (after the step) 10.0s" in text
    local = dict(VERL_STEP)
    for key in ("training/global_step", "perf/time_per_step"):
        local.pop(key)
    assert "save_checkpoint" not in time_split([local])  # the local run saves outside its timed step
