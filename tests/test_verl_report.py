"""rlec.verl_report: the driver's step lines from metrics.jsonl and the hf_final export (no Ray, no training)."""

from __future__ import annotations

import io
import json
import time
from pathlib import Path

import pytest

from rlec.report import MetricsFile
from rlec.verl_report import FINAL_MODEL, StepWatcher, export_final_model, step_line


def test_the_watcher_shows_only_the_steps_trained_after_the_trainers_rewrite(tmp_path: Path) -> None:
    old = MetricsFile(tmp_path, resume_step=0)
    for step in (1, 2, 3):  # a killed run: steps 1-3 logged, the checkpoint of step 2 kept
        old.log({"rlec/reward/mean": 0.1}, step)
    stream = io.StringIO()
    watcher = StepWatcher(tmp_path / "metrics.jsonl", 4, stream, poll_s=0.01)
    watcher.start()
    time.sleep(0.1)
    assert watcher.shown == []  # the old file is not this launch's progress
    new = MetricsFile(tmp_path, resume_step=2)  # what the trainer does at train begin
    time.sleep(0.1)
    for step in (3, 4):
        new.log({"rlec/reward/mean": -0.25, "actor/pg_loss": 0.5, "timing_s/step": 12.0, "e3/temperature": 0.9}, step)
    watcher.stop()
    assert watcher.shown == [3, 4]
    text = stream.getvalue()
    assert "resumed after step 2" in text and "step 4/4  reward -0.250" in text and "E3 T 0.900" in text
    assert "step 1/4" not in text and "step 2/4" not in text


def test_the_watcher_parses_each_line_once(tmp_path: Path, monkeypatch) -> None:
    """Polling re-parsed the whole metrics.jsonl every poll_s, a cost that grew with the run (0.13 CPU-s a parse at
    800 steps, twice a second): the file is read only when it changed, and then only its new lines."""
    import rlec.verl_report as verl_report

    offsets = []
    real = verl_report.read_metrics_from

    def counted(path, offset):
        offsets.append(offset)
        return real(path, offset)

    monkeypatch.setattr(verl_report, "read_metrics_from", counted)
    stream = io.StringIO()
    watcher = StepWatcher(tmp_path / "metrics.jsonl", 3, stream, poll_s=0.005)
    watcher.start()
    new = MetricsFile(tmp_path, resume_step=0)  # what the trainer does at train begin
    time.sleep(0.1)
    new.log({"rlec/reward/mean": 0.5}, 1)
    time.sleep(0.3)  # ~60 polls with the file unchanged
    after_one = len(offsets)
    new.log({"rlec/reward/mean": 0.25}, 2)
    time.sleep(0.3)
    watcher.stop()
    assert watcher.shown == [1, 2]
    assert after_one <= 3 and len(offsets) - after_one <= 2, offsets
    line_one = len((tmp_path / "metrics.jsonl").read_bytes().splitlines(keepends=True)[0])
    assert offsets == sorted(offsets) and line_one in offsets, offsets  # never back to 0; step 2 after step 1's line


def test_read_metrics_from_leaves_a_line_being_written_for_the_next_call(tmp_path: Path) -> None:
    from rlec.metrics_log import read_metrics_from

    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1}\n{"step": 2}\n{"step": 3, "a"')
    records, offset = read_metrics_from(path, 0)
    assert [r["step"] for r in records] == [1, 2] and offset == len('{"step": 1}\n{"step": 2}\n')
    with open(path, "a") as handle:
        handle.write(': 1}\n')
    assert read_metrics_from(path, offset) == ([{"step": 3, "a": 1}], path.stat().st_size)


def test_step_line_leaves_out_what_the_step_lacks() -> None:
    assert step_line({"step": 1, "actor/grad_norm": 0.25, "rlec/b": None}, None) == "step 1  grad_norm 0.250"


def test_step_line_takes_the_algorithms_columns_from_the_registry() -> None:
    """Issue 59: the line names no algorithm; it shows each one's first table column (RLVE's per-environment
    difficulties stay in the final table), the same line as before the move (pass@k's k logged as a float)."""
    record = {"step": 3, "rlec/b": 0.5, "e3/temperature": 0.9, "e3/rollout_n/mean": 4.0, "passk/active_k": 2.0,
              "rlve/maze/difficulty": 1.0, "timing_s/step": 12.34}
    assert step_line(record, 4) == "step 3/4  b 0.50  E3 T 0.900  pass@k k 2  step 12.3s"


def _checkpoint(out: Path, step: int) -> Path:
    hf = out / f"global_step_{step}" / "actor" / "model" / "huggingface"
    hf.mkdir(parents=True)
    (hf / "config.json").write_text(json.dumps({"step": step}))
    (hf / "model.safetensors").write_bytes(b"w" * step)
    (out / "latest_checkpointed_iteration.txt").write_text(f"{step}\n")
    return hf


def test_hf_final_is_the_latest_checkpoints_hf_folder_and_survives_its_rotation(tmp_path: Path) -> None:
    _checkpoint(tmp_path, 2)
    final, step = export_final_model(tmp_path)
    assert final == tmp_path / FINAL_MODEL and step == 2 and (final / "rlec_step.txt").read_text() == "2\n"
    _checkpoint(tmp_path, 4)
    import shutil

    final, step = export_final_model(tmp_path)
    shutil.rmtree(tmp_path / "global_step_4")  # verl's max_actor_ckpt_to_keep rotation
    assert step == 4 and json.loads((final / "config.json").read_text()) == {"step": 4}
    assert (final / "model.safetensors").read_bytes() == b"wwww" and not (tmp_path / "hf_final.partial").exists()


def test_no_checkpoint_or_no_hf_folder_is_named(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="latest_checkpointed_iteration.txt: missing"):
        export_final_model(tmp_path)
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("3")
    with pytest.raises(FileNotFoundError, match="global_step_3/actor/model/huggingface: no Hugging Face model"):
        export_final_model(tmp_path)


FAKE_RUN = r'''
import os, sys, time, warnings
from omegaconf import OmegaConf
from rlec.report import MetricsFile
from rlec.verl_report import run_with_report

out = sys.argv[1]
cfg = OmegaConf.create({"trainer": {"default_local_dir": out, "total_training_steps": 2},
                        "actor_rollout_ref": {"model": {"path": out + "/tiny_model"}},
                        "data": {"val_files": out + "/none.parquet", "seed": 1}})

def body(config):
    print("step:1 - actor/pg_loss:0.1 (verl's console backend)")
    os.write(2, b"C-level noise from Ray\n")
    warnings.warn("Apex is not installed")
    writer = MetricsFile(out, resume_step=0)  # the trainer's on_train_begin
    time.sleep(1.0)  # a step takes longer than the watcher's poll (0.5 s)
    for step in (1, 2):
        writer.log({"rlec/reward/mean": 0.5, "timing_s/step": 3.0, "timing_s/gen": 1.0}, step)
    hf = os.path.join(out, "global_step_2", "actor", "model", "huggingface")
    os.makedirs(hf)
    open(os.path.join(hf, "config.json"), "w").write("{}")
    open(os.path.join(out, "latest_checkpointed_iteration.txt"), "w").write("2")

run_with_report(cfg, body)
'''


def test_the_console_shows_rlecs_lines_and_the_log_keeps_the_rest(tmp_path: Path) -> None:
    """The driver's fds 1 and 2 (what Ray forwards from the workers, C-level output) go to the log; the
    console gets the start line, the step lines and the summary (no Ray, no training: a stand-in body)."""
    import os
    import subprocess
    import sys

    out, log = tmp_path / "run", tmp_path / "verl.log"
    env = {**os.environ, "RLEC_VERL_LOG": str(log), "EVAL_AT_END": "0"}
    env.pop("RLEC_VERBOSE", None)
    proc = subprocess.run([sys.executable, "-c", FAKE_RUN, str(out)], env=env, capture_output=True, text=True, timeout=240)
    console = proc.stdout + proc.stderr
    assert proc.returncode == 0, console[-3000:]
    assert "verl's trainer starting" in console and "step 2/2  reward +0.500" in console
    assert "## Training (verl's trainer)" in console and "time split over 2 steps" in console
    assert "step:1 - " not in console and "C-level noise" not in console and "Apex" not in console
    text = log.read_text()
    assert "step:1 - actor/pg_loss" in text and "C-level noise from Ray" in text
    assert (out / "hf_final" / "rlec_step.txt").read_text() == "2\n" and (out / "training_curves.png").is_file()


def test_a_run_with_checkpoints_off_ends_without_hf_final_and_a_run_that_lost_them_fails(tmp_path: Path, monkeypatch, capsys) -> None:
    """benchmarks/mismatch.py trains with trainer.save_freq=-1: the report ends after the summary, naming why there is
    no hf_final, instead of raising after a finished training; with checkpoints on, a missing one is an error."""
    from omegaconf import OmegaConf

    from rlec.verl_report import run_with_report

    monkeypatch.setenv("RLEC_VERBOSE", "1")  # no console redirection in a test
    trained = []

    def train(config) -> None:  # what verl's trainer leaves: one step's metrics
        trained.append(config)
        MetricsFile(tmp_path, resume_step=0).log({"rlec/reward/mean": 0.5, "timing_s/step": 1.0}, 1)

    cfg = OmegaConf.create({"trainer": {"default_local_dir": str(tmp_path), "total_training_steps": 1, "save_freq": -1},
                            "actor_rollout_ref": {"model": {"path": str(tmp_path / "model")}}})
    run_with_report(cfg, train)
    assert trained == [cfg] and "no checkpoint saved (trainer.save_freq=-1): no hf_final" in capsys.readouterr().out
    assert not (tmp_path / FINAL_MODEL).exists()
    cfg.trainer.save_freq = 5
    with pytest.raises(FileNotFoundError, match="saved no checkpoint"):
        run_with_report(cfg, train)
