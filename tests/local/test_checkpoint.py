"""Local checkpoints: pruning, intact checks, and resume that recovers from damage or refuses another run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from rlec.io import MANIFEST_FILE, write_manifest
from rlec.local.checkpoint import LATEST_FILE, checkpoint_dir, find_resume, is_intact, prune


def _write(out: Path, step: int, config: dict | None = None) -> Path:
    """A real torch dist checkpoint (one process) with the files a Megatron save leaves, and rlec's metadata."""
    import torch.distributed.checkpoint as dcp

    path = checkpoint_dir(out, step)
    path.mkdir(parents=True)
    dcp.save({"w": torch.arange(1000, dtype=torch.float32) + step}, storage_writer=dcp.FileSystemWriter(str(path)), no_dist=True)
    (path / "metadata.json").write_text("{}")
    torch.save({"rlec": {"step": step}}, path / "common.pt")
    (path / "rlec_checkpoint.json").write_text(json.dumps({"step": step, "config": config or {}}))
    write_manifest(path)  # as rlec.megatron.save_dist_checkpoint does before the folder is renamed into place
    return path


def _point(out: Path, text: str) -> None:
    (out / "checkpoints" / LATEST_FILE).write_text(text)


def test_prune_keeps_the_newest_at_or_below_the_step_and_drops_stale_higher_ones(tmp_path: Path) -> None:
    for s in (5, 10, 3):  # 5 and 10 were left by an earlier, longer run
        checkpoint_dir(tmp_path, s).mkdir(parents=True)
    assert prune(tmp_path, 3, keep=2) == [3]
    assert not checkpoint_dir(tmp_path, 10).exists() and checkpoint_dir(tmp_path, 3).exists()
    for s in (6, 9):
        checkpoint_dir(tmp_path, s).mkdir(parents=True)
    assert prune(tmp_path, 9, keep=2) == [6, 9]


def test_intact_needs_every_shard_byte_the_metadata_names(tmp_path: Path) -> None:
    path = _write(tmp_path, 1)
    assert is_intact(path)
    shard = next(path.glob("*.distcp"))
    shard.write_bytes(shard.read_bytes()[:100])  # a write cut short
    assert not is_intact(path)
    shard.unlink()
    assert not is_intact(path)
    assert not is_intact(_write(tmp_path, 2).parent / "global_step_9")


def test_a_shard_overwritten_in_place_is_not_intact_and_the_reason_names_it(tmp_path: Path) -> None:
    """Same size, torch's metadata still agrees: only the manifest's hash sees it (issue 26, item 1)."""
    from rlec.local.checkpoint import damage

    path = _write(tmp_path, 3)
    shard = path / "__0_0.distcp"
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF
    shard.write_bytes(bytes(data))
    assert not is_intact(path)
    assert damage(path) == "damaged (__0_0.distcp: content differs from the manifest (sha256))"


def test_resume_follows_the_tracker(tmp_path: Path) -> None:
    assert find_resume(tmp_path) == (None, [])
    _write(tmp_path, 2)
    _write(tmp_path, 4)
    _point(tmp_path, "4\n")
    assert find_resume(tmp_path) == (checkpoint_dir(tmp_path, 4), [])


@pytest.mark.parametrize(
    ("damage", "note"),
    [
        ("garbage", "is unreadable"),
        ("dangling", "names a checkpoint folder that does not exist"),
        ("missing_shard", "is incomplete"),
        ("overwritten_shard", "__0_0.distcp: content differs from the manifest"),
        ("no_manifest", "no rlec_manifest.json"),
        ("no_tracker", None),
    ],
)
def test_resume_falls_back_to_the_newest_intact_checkpoint(tmp_path: Path, damage: str, note: str | None) -> None:
    _write(tmp_path, 2)
    newest = _write(tmp_path, 4)
    _point(tmp_path, {"garbage": "\x00zz\n", "dangling": "7\n", "no_tracker": "4\n"}.get(damage, "4\n"))
    shard = newest / "__0_0.distcp"
    if damage == "missing_shard":
        shard.unlink()
    if damage == "overwritten_shard":  # issue 26: bytes overwritten in place; size and torch's metadata still agree
        data = bytearray(shard.read_bytes())
        middle = len(data) // 2
        data[middle: middle + 64] = bytes(64)
        shard.write_bytes(bytes(data))
    if damage == "no_manifest":  # a save that stopped before its manifest
        (newest / MANIFEST_FILE).unlink()
    if damage == "no_tracker":
        (tmp_path / "checkpoints" / LATEST_FILE).unlink()
    found, notes = find_resume(tmp_path)
    want = checkpoint_dir(tmp_path, 2) if damage in ("missing_shard", "overwritten_shard", "no_manifest") else newest
    assert found == want
    if note:
        assert any(note in n for n in notes) and any(want.name in n for n in notes)
    if damage in ("overwritten_shard", "no_manifest"):
        assert any(n.startswith(f"WARNING: {newest} is damaged") for n in notes)


def test_start_resumes_a_compatible_run_refuses_another_and_moves_a_finished_one_aside(tmp_path: Path) -> None:
    from rlec.local.config import as_dict, load_config
    from rlec.local.setup import LocalRunError, plan_start

    out = tmp_path / "run"
    cfg = load_config([f"trainer.default_local_dir={out}", "trainer.total_training_steps=4"], env={})
    _write(out, 2, config=as_dict(cfg))
    _point(out, "2\n")
    start = plan_start(cfg, out)
    assert start.resume_from == checkpoint_dir(out, 2) and start.schedule_end is None
    longer = load_config([f"trainer.default_local_dir={out}", "trainer.total_training_steps=6"], env={})
    start = plan_start(longer, out)
    assert start.schedule_end == 4 and any("keeps its original length" in n for n in start.notes)
    other = load_config([f"trainer.default_local_dir={out}", "trainer.total_training_steps=4", "data.seed=7"], env={})
    with pytest.raises(LocalRunError, match=r"holds a run with other settings \(data.seed: 42 -> 7\)"):
        plan_start(other, out)
    fresh = load_config([f"trainer.default_local_dir={out}", "trainer.resume_mode=disable"], env={})
    start = plan_start(fresh, out)
    assert start.resume_from is None and not out.exists()
    (aside,) = tmp_path.glob("run.old-*")
    assert (aside / "checkpoints").is_dir() and any(str(aside) in n for n in start.notes)


def test_a_checkpoint_bigger_than_the_free_space_is_enospc_even_when_the_writer_freed_its_partial_shard(
        tmp_path: Path, monkeypatch) -> None:
    """Issue 34 item 2 (a faked ENOSPC at the writer): torch's writer loses the errno and frees its partial shard
    before the error arrives, leaving 135 MiB free; the previous checkpoint (200 MiB) says the new one cannot fit.
    The error names ENOSPC and the folder, nothing of the partial checkpoint is left, the tracker is untouched."""
    import errno

    from rlec import io as rio
    from rlec.megatron import checkpoint as mc

    out = tmp_path / "run"
    previous = _write(out, 1)
    _point(out, "1")
    with open(previous / "padding.bin", "wb") as f:  # sparse: 200 MiB by size, nothing on disk
        f.truncate(200 * 2**20)

    def writer_that_frees_its_partial_shard(policy, folder, **kw):
        (Path(folder) / "__0_0.distcp").write_bytes(b"x" * 1000)
        (Path(folder) / "__0_0.distcp").unlink()  # torch's writer cleans up before the error reaches the caller
        raise RuntimeError("Worker failure: [enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598")

    monkeypatch.setattr(mc, "write_dist_checkpoint", writer_that_frees_its_partial_shard)
    monkeypatch.setattr(rio, "_free_bytes", lambda path: 135 * 2**20)
    path = checkpoint_dir(out, 2)
    with pytest.raises(OSError) as info:
        mc.save_dist_checkpoint(torch.nn.Linear(2, 2), path, step=2)
    assert info.value.errno == errno.ENOSPC and info.value.filename == str(path)
    assert "the output needs ~200.0 MiB; 135.0 MiB were free when it began" in str(info.value)
    assert not path.exists() and sorted(p.name for p in (out / "checkpoints").iterdir()) == ["global_step_1", LATEST_FILE]
    assert (out / "checkpoints" / LATEST_FILE).read_text() == "1"  # the tracker moves only after a complete save
    monkeypatch.setattr(rio, "_free_bytes", lambda path: 10 * 2**30)  # room after all: the writer's own error
    with pytest.raises(RuntimeError, match="unexpected pos"):
        mc.save_dist_checkpoint(torch.nn.Linear(2, 2), path, step=2)
