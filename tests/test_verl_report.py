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


def test_step_line_leaves_out_what_the_step_lacks() -> None:
    assert step_line({"step": 1, "actor/grad_norm": 0.25, "rlec/b": None}, None) == "step 1  grad_norm 0.250"


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
