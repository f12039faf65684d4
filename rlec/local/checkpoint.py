"""Checkpoints of the local run: ``<output_dir>/checkpoints/global_step_<k>/`` (verl's naming).

Each holds a Megatron dist checkpoint (model + optimizer, written atomically by
``rlec.megatron.save_dist_checkpoint``) with the step, the prompt loader's state and the
algorithms' state as user state, and the resolved config in ``rlec_checkpoint.json``;
``latest_checkpointed_iteration.txt`` (verl's tracker file) points at the newest complete one and
is replaced atomically only after the checkpoint itself is complete.

Finding the checkpoint to resume from starts with verl's ``find_latest_ckpt_path`` and recovers
from damage an interruption or a hand edit can leave, saying what it did: an unreadable tracker
file, a tracker naming a missing folder, a newest checkpoint missing a shard, or one whose files
differ from its manifest (``rlec_manifest.json``: each file's size and SHA-256, written at save
before the tracker moves; a shard overwritten on disk) all fall back to the newest intact
checkpoint (:func:`is_intact`), with a warning naming the damaged file.
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
from pathlib import Path
from typing import Any

from rlec.io import ManifestError, atomic_write_text, step_folders, verify_manifest
from rlec.megatron.checkpoint import METADATA_FILE

LATEST_FILE = "latest_checkpointed_iteration.txt"


def checkpoint_dir(out_dir: str | Path, step: int) -> Path:
    """Folder of the checkpoint after ``step``."""
    return Path(out_dir) / "checkpoints" / f"global_step_{step}"


def _steps(out_dir: str | Path) -> list[int]:
    return sorted(step for step, _ in step_folders(Path(out_dir) / "checkpoints"))


def damage(path: str | Path) -> str | None:
    """Why ``path`` is not a usable checkpoint, or None when it is intact.

    Intact: Megatron's ``metadata.json``, ``common.pt``, rlec's metadata, every storage file
    torch's checkpoint metadata (``.metadata``) references, each long enough for the byte ranges
    it must hold, and every file equal to the manifest (:func:`rlec.io.verify_manifest`; a
    checkpoint without one did not finish its save, or predates manifests).
    """
    from torch.distributed.checkpoint import FileSystemReader

    path = Path(path)
    missing = [name for name in ("metadata.json", "common.pt", ".metadata", METADATA_FILE) if not (path / name).is_file()]
    if missing:
        return f"incomplete ({', '.join(missing)} missing)"
    try:
        storage = FileSystemReader(str(path)).read_metadata().storage_data
    except Exception as exc:  # noqa: BLE001 - any unreadable metadata means the checkpoint is not usable
        return f"incomplete (unreadable .metadata: {exc})"
    need: dict[str, int] = {}
    for info in storage.values():
        need[info.relative_path] = max(need.get(info.relative_path, 0), int(info.offset) + int(info.length))
    short = [rel for rel, size in need.items() if not (path / rel).is_file() or (path / rel).stat().st_size < size]
    if short:
        return f"incomplete (a shard is missing or cut short: {', '.join(sorted(short))})"
    try:
        verify_manifest(path)
    except ManifestError as exc:
        return f"damaged ({'; '.join(exc.problems)})"
    return None


def is_intact(path: str | Path) -> bool:
    """A complete, undamaged checkpoint (:func:`damage` is None)."""
    return damage(path) is None


def find_resume(out_dir: str | Path) -> tuple[Path | None, list[str]]:
    """The checkpoint to resume from, and notes on any damage recovered from.

    Returns:
        ``(path or None, notes)``: verl's tracker's checkpoint when it is intact, else the newest
        intact ``global_step_*`` folder (a note says which and why), else None.
    """
    from verl.utils.checkpoint.checkpoint_manager import find_latest_ckpt_path

    root = Path(out_dir) / "checkpoints"
    notes: list[str] = []
    tracked = None
    if (root / LATEST_FILE).exists():
        try:
            with contextlib.redirect_stdout(io.StringIO()):  # verl prints what it finds
                found = find_latest_ckpt_path(str(root))
            tracked = Path(found) if found else None
            if tracked is None:
                notes.append(f"{root / LATEST_FILE} names a checkpoint folder that does not exist")
        except (ValueError, OSError) as exc:
            notes.append(f"{root / LATEST_FILE} is unreadable ({exc})")
    problem = damage(tracked) if tracked is not None else None
    if tracked is not None and problem is None:
        return tracked, notes
    if tracked is not None:
        notes.append(f"WARNING: {tracked} is {problem}: not resuming from it")
    for step in reversed(_steps(out_dir)):
        candidate = checkpoint_dir(out_dir, step)
        if candidate == tracked:
            continue
        problem = damage(candidate)
        if problem is None:
            if notes:
                notes.append(f"resuming from the newest intact checkpoint, {candidate.name}")
            return candidate, notes
        if tracked is None:
            notes.append(f"WARNING: {candidate} is {problem}: not resuming from it")
    if _steps(out_dir):
        notes.append("no intact checkpoint is left")
    return None, notes


def saved_config(path: str | Path) -> dict[str, Any]:
    """The resolved config a checkpoint was written with (``{}`` for checkpoints without one)."""
    meta = Path(path) / METADATA_FILE
    try:
        return json.loads(meta.read_text()).get("config", {})
    except (OSError, ValueError):
        return {}


def save(policy: Any, optimizer: Any, out_dir: str | Path, step: int, user_state: dict[str, Any], *, keep: int = 2,
         config: dict[str, Any] | None = None) -> Path:
    """Write the checkpoint after ``step`` (every rank calls), point the tracker at it, prune.

    Pruning keeps the ``keep`` newest checkpoints at or below ``step`` (>= 1) and removes any
    numbered above it (left by a run this one does not continue).
    """
    from rlec import megatron as meg
    from rlec.megatron.parallel import barrier, is_rank0

    path = checkpoint_dir(out_dir, step)
    meg.save_dist_checkpoint(policy, path, optimizer=optimizer, step=step, user_state=user_state,
                             metadata={"step": step, "config": config or {}}, overwrite=True)
    if is_rank0():
        atomic_write_text(path.parent / LATEST_FILE, f"{step}\n")
        prune(out_dir, step, keep)
    barrier()
    return path


def prune(out_dir: str | Path, step: int, keep: int) -> list[int]:
    """Delete checkpoints numbered above ``step`` and all but the ``keep`` newest at or below it.

    Returns:
        The steps whose checkpoints remain, ascending.
    """
    steps = _steps(out_dir)
    kept = [s for s in steps if s <= step][-max(1, keep):]
    for old in steps:
        if old not in kept:
            shutil.rmtree(checkpoint_dir(out_dir, old), ignore_errors=True)
    return kept
