"""Algorithm state files beside verl's checkpoints: which folder verl saves to and resumed from."""

from __future__ import annotations

import logging

import pytest
from omegaconf import OmegaConf

from rlec.run_config import RunConfig
from rlec.verl_plugin.state import load_state, resumed_folder, save_state, saving_folder


def config(tmp_path, mode="auto", path=None):
    return OmegaConf.create({"trainer": {"default_local_dir": str(tmp_path / "ckpt"), "resume_mode": mode,
                                         "resume_from_path": path}})


def test_folders_follow_verl_resume_modes(tmp_path, monkeypatch):
    assert saving_folder(config(tmp_path), 7) == str(tmp_path / "ckpt" / "global_step_7")
    assert resumed_folder(config(tmp_path), 0) is None  # trained from scratch
    assert resumed_folder(config(tmp_path), 7) == str(tmp_path / "ckpt" / "global_step_7")
    assert resumed_folder(config(tmp_path, "disable"), 7) is None
    assert resumed_folder(config(tmp_path, "resume_path", str(tmp_path / "x" / "global_step_3")), 3) == str(tmp_path / "x" / "global_step_3")
    monkeypatch.chdir(tmp_path)
    rel = OmegaConf.create({"trainer": {"default_local_dir": "ck", "resume_mode": "auto", "resume_from_path": None}})
    assert resumed_folder(rel, 2) == str(tmp_path / "ck" / "global_step_2")  # verl makes relative paths absolute


def test_round_trip_missing_and_broken_files(tmp_path, caplog):
    folder = saving_folder(config(tmp_path), 4)
    save_state(folder, "s.json", {"a": [1, 2.5], "b": None})
    assert load_state(folder, "s.json") == {"a": [1, 2.5], "b": None}
    assert load_state(None, "s.json") is None
    with caplog.at_level(logging.WARNING):
        assert load_state(folder, "other.json") is None
    assert "other.json: missing" in caplog.text
    (tmp_path / "ckpt" / "global_step_4" / "bad.json").write_text("{")
    with pytest.raises(ValueError, match="bad.json: not valid JSON"):
        load_state(folder, "bad.json")


def _checkpoint(root, step, payload=b"x" * 4096):
    from rlec.io import write_manifest

    folder = root / f"global_step_{step}" / "actor"
    folder.mkdir(parents=True)
    (folder / "__0_0.distcp").write_bytes(payload)
    write_manifest(root / f"global_step_{step}")
    (root / "latest_checkpointed_iteration.txt").write_text(str(step))


def test_damaged_latest_checkpoint_falls_back_to_the_newest_intact_one(tmp_path):
    from rlec.verl_plugin.state import intact_checkpoint

    _checkpoint(tmp_path, 2)
    _checkpoint(tmp_path, 3)
    shard = tmp_path / "global_step_3" / "actor" / "__0_0.distcp"
    data = bytearray(shard.read_bytes())
    data[1000:1100] = b"\0" * 100  # overwritten in the middle, same size
    shard.write_bytes(bytes(data))
    assert intact_checkpoint(str(tmp_path)) == 2
    assert (tmp_path / "latest_checkpointed_iteration.txt").read_text() == "2"  # verl now resumes step 2


def test_checkpoint_without_manifest_is_not_resumed_and_none_intact_is_refused(tmp_path):
    from rlec.io import ManifestError
    from rlec.verl_plugin.state import intact_checkpoint

    _checkpoint(tmp_path, 1)
    (tmp_path / "global_step_1" / "rlec_manifest.json").unlink()  # a save that did not finish
    with pytest.raises(ManifestError, match="global_step_1"):
        intact_checkpoint(str(tmp_path))
    assert intact_checkpoint(str(tmp_path / "fresh")) is None  # no tracker: a fresh run


@pytest.mark.parametrize("tracker", ["two", "", "7", "-1", "\x00\x00"])
def test_a_damaged_tracker_falls_back_to_the_newest_intact_step_with_a_warning(tmp_path, caplog, tracker):
    from rlec.verl_plugin.state import intact_checkpoint

    _checkpoint(tmp_path, 2)
    _checkpoint(tmp_path, 4)
    (tmp_path / "latest_checkpointed_iteration.txt").write_text(tracker)  # verl writes it in place: a kill leaves this
    with caplog.at_level(logging.WARNING):
        assert intact_checkpoint(str(tmp_path)) == 4
    assert (tmp_path / "latest_checkpointed_iteration.txt").read_text() == "4"
    assert "resuming from" in caplog.text and "global_step_4" in caplog.text


def test_a_damaged_tracker_skips_a_damaged_newest_step_and_is_refused_without_checkpoints(tmp_path):
    from rlec.io import ManifestError
    from rlec.verl_plugin.state import intact_checkpoint

    _checkpoint(tmp_path, 2)
    _checkpoint(tmp_path, 3)
    (tmp_path / "global_step_3" / "rlec_manifest.json").unlink()  # its save did not finish
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("two")
    assert intact_checkpoint(str(tmp_path)) == 2
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "latest_checkpointed_iteration.txt").write_text("")
    with pytest.raises(ManifestError, match="the tracker holds ''"):
        intact_checkpoint(str(empty))


def _metrics(root, *steps, torn=False):
    """``metrics.jsonl`` with one line per step (and a torn last line: a write cut by a kill)."""
    import json

    text = "".join(json.dumps({"step": s, "actor/pg_loss": 0.1}) + "\n" for s in steps)
    (root / "metrics.jsonl").write_text(text + ('{"step": 9, "actor/pg' if torn else ""))


@pytest.mark.parametrize("manifest", [True, False])
@pytest.mark.parametrize("torn", [False, True])
def test_a_checkpoint_saved_but_never_logged_is_trained_again_from_the_one_before(tmp_path, caplog, manifest, torn):
    """CI, 2026-12-05: a launch SIGKILLed in step 2's save left its Ray trainer alive long enough to finish the save and
    the tracker (verl logs a step's metrics only after saving it); the rerun resumed step 2, had nothing to train and
    exited 0 with step 2 missing from metrics.jsonl. Now the checkpoint newer than every logged step is skipped, with
    or without the manifest check, and the one before it resumed (step 2 is trained again)."""
    from rlec.verl_plugin.state import intact_checkpoint

    _checkpoint(tmp_path, 1)
    _checkpoint(tmp_path, 2)
    _metrics(tmp_path, 1, torn=torn)
    with caplog.at_level(logging.WARNING):
        assert intact_checkpoint(str(tmp_path), verify=manifest) == 1
    assert (tmp_path / "latest_checkpointed_iteration.txt").read_text() == "1"  # verl now resumes step 1
    assert "global_step_2 was saved but its step's metrics were never logged" in caplog.text
    assert "step 2 is trained again" in caplog.text


def test_unlogged_checkpoints_roll_back_to_the_newest_intact_one_at_or_before_the_last_logged_step(tmp_path, caplog):
    """save_freq 2 and 3 checkpoints saved past the last line (steps 5 and 6 unlogged), the one at step 4 damaged:
    the resume takes step 2 and names the steps trained again; the damage is named too."""
    from rlec.verl_plugin.state import intact_checkpoint

    for step in (2, 4, 5, 6):
        _checkpoint(tmp_path, step)
    (tmp_path / "global_step_4" / "rlec_manifest.json").unlink()  # damaged
    _metrics(tmp_path, 1, 2, 3, 4)
    with caplog.at_level(logging.WARNING):
        assert intact_checkpoint(str(tmp_path)) == 2
    assert "global_step_6 was saved but its step's metrics were never logged" in caplog.text
    assert "steps 3-6 are trained again" in caplog.text and "global_step_4 is damaged" in caplog.text
    assert (tmp_path / "latest_checkpointed_iteration.txt").read_text() == "2"
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("two")  # a damaged tracker: the same choice
    assert intact_checkpoint(str(tmp_path)) == 2
    (tmp_path / "global_step_2" / "rlec_manifest.json").unlink()  # nothing intact at or before step 4: keep step 6
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("6")
    assert intact_checkpoint(str(tmp_path)) == 6


def test_a_logged_checkpoint_is_resumed_and_an_unlogged_one_without_an_older_is_kept(tmp_path, caplog):
    from rlec.verl_plugin.state import intact_checkpoint

    _checkpoint(tmp_path, 2)
    _checkpoint(tmp_path, 4)
    _metrics(tmp_path, 1, 2, 3, 4)
    assert intact_checkpoint(str(tmp_path)) == 4  # every step logged: the tracker's step
    _metrics(tmp_path, 1, 2, 3, 4, 5)  # killed in step 5, after its line: still step 4
    assert intact_checkpoint(str(tmp_path)) == 4
    (tmp_path / "metrics.jsonl").unlink()  # no file (not rlec's trainer): the rule does not apply
    assert intact_checkpoint(str(tmp_path)) == 4
    only = tmp_path / "only"
    _checkpoint(only, 1)
    _metrics(only)  # killed after step 1's save, before its line: nothing older to train it again from
    with caplog.at_level(logging.WARNING):
        assert intact_checkpoint(str(only)) == 1
    assert "step 1's line stays missing" in caplog.text and "no intact checkpoint at or before step 0" in caplog.text


def test_verls_resume_finds_the_fallback_step_with_the_manifest_off(tmp_path):
    """verl's own find_latest_ckpt_path raises on ``two`` and gives up (step 0) on a missing folder; after the
    mixin's repair it finds the newest checkpoint, also with rlec.checkpoint.manifest=false."""
    from verl.utils.checkpoint.checkpoint_manager import find_latest_ckpt_path

    from rlec.verl_plugin.state import CheckpointIntegrityMixin

    found = []

    class Base:
        def _load_checkpoint(self):
            found.append(find_latest_ckpt_path(self.config.trainer.default_local_dir))

    class Trainer(CheckpointIntegrityMixin, Base):
        config = OmegaConf.create({"trainer": {"default_local_dir": str(tmp_path), "resume_mode": "auto"},
                                   "rlec": {"checkpoint": {"manifest": False}}, "actor_rollout_ref": {"actor": {}}})
        rlec_run = RunConfig(config)  # what rlec's trainers build at construction

    _checkpoint(tmp_path, 2)
    _checkpoint(tmp_path, 5)
    for tracker in ("two", "9"):
        (tmp_path / "latest_checkpointed_iteration.txt").write_text(tracker)
        if tracker == "two":
            with pytest.raises(ValueError):
                find_latest_ckpt_path(str(tmp_path))  # verl alone
        Trainer()._load_checkpoint()
    assert found == [str(tmp_path / "global_step_5")] * 2


def test_a_full_disk_during_verls_save_is_one_enospc_error_and_the_rerun_resumes_the_previous_step(tmp_path, monkeypatch):
    """Issue 34 item 2 on verl's path (a faked ENOSPC at the writer): torch's zip writer loses the errno; the
    previous checkpoint is bigger than the space left, so the error is ENOSPC naming the folder; the tracker
    stays on the previous step; the partial folder is removed before the finished step's metrics are logged (a real
    700 MB tmpfs: with the 88 MB partial folder in place the metrics line could not be written either)."""
    import errno

    from rlec import io as rio
    from rlec.verl_plugin.state import CheckpointIntegrityMixin, intact_checkpoint

    _checkpoint(tmp_path, 2)
    with open(tmp_path / "global_step_2" / "actor" / "optim.pt", "wb") as f:
        f.truncate(300 * 2**20)  # sparse: 300 MiB by size
    from rlec.io import write_manifest

    write_manifest(tmp_path / "global_step_2")

    logged = []

    class Logger:
        def log(self, data, step):  # on a real full disk this write fails until the partial folder is gone
            assert not (tmp_path / "global_step_3").exists(), "the metrics are logged after the partial folder is removed"
            logged.append((step, data))

    class Base:
        logger = Logger()

        def step(self, metrics, timing_raw):
            metrics["actor/pg_loss"] = 0.5  # what verl's step fills; fit logs it after the save
            return "batch"

        def _save_checkpoint(self):
            partial = tmp_path / f"global_step_{self.global_steps}" / "actor"
            partial.mkdir(parents=True)
            (partial / "__0_0.distcp").write_bytes(b"x" * 100)  # what the writer left before it failed
            raise RuntimeError("Worker failure: [enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598")

    class Trainer(CheckpointIntegrityMixin, Base):
        config = OmegaConf.create({"trainer": {"default_local_dir": str(tmp_path), "resume_mode": "auto"},
                                   "rlec": {"checkpoint": {"manifest": True}}, "actor_rollout_ref": {"actor": {}}})
        rlec_run = RunConfig(config)  # what rlec's trainers build at construction
        global_steps = 3

    monkeypatch.setattr(rio, "_free_bytes", lambda path: 135 * 2**20)  # the writer freed its shard: room, it seems
    trainer = Trainer()
    assert trainer.step({}, {}) == "batch"
    with pytest.raises(OSError) as info:
        trainer._save_checkpoint()
    assert logged == [(3, {"actor/pg_loss": 0.5})]  # the finished step's metrics, before the error
    assert info.value.errno == errno.ENOSPC and info.value.filename == str(tmp_path / "global_step_3")
    assert "No space left on device" in str(info.value)
    assert not (tmp_path / "global_step_3").exists()  # the partial folder removed: its room back, nothing to mistake
    assert (tmp_path / "global_step_2" / "actor" / "optim.pt").exists()  # the tracked checkpoint untouched
    assert (tmp_path / "latest_checkpointed_iteration.txt").read_text() == "2"
    assert intact_checkpoint(str(tmp_path)) == 2  # the rerun resumes step 2, not the partial step 3


def test_a_failed_save_never_removes_the_folder_the_tracker_names(tmp_path):
    """The partial folder of a failed save is removed, but never the tracked checkpoint (a re-save of the tracked step
    that fails must not delete the one checkpoint a rerun resumes)."""
    from rlec.verl_plugin.state import _remove_partial

    (tmp_path / "global_step_2" / "actor").mkdir(parents=True)
    (tmp_path / "global_step_3" / "actor").mkdir(parents=True)
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("2")
    _remove_partial(str(tmp_path / "global_step_2"), str(tmp_path))
    assert (tmp_path / "global_step_2" / "actor").is_dir()
    _remove_partial(str(tmp_path / "global_step_3"), str(tmp_path))
    assert not (tmp_path / "global_step_3").exists()
