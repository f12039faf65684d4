"""Checkpoints of the local run: ``<output_dir>/checkpoints/global_step_<k>/`` (verl's naming).

Each holds a Megatron dist checkpoint (model + optimizer, written atomically by
``rlec.megatron.save_dist_checkpoint``) with the step and the sampler state as user state, and
``latest_checkpointed_iteration.txt`` (verl's file name) points at the newest complete one; it is
replaced atomically only after the checkpoint itself is complete, so an interruption at any
moment leaves a loadable latest checkpoint.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import torch

from rlec.io import atomic_write_text

LATEST_FILE = "latest_checkpointed_iteration.txt"


def checkpoint_dir(out_dir: Path, step: int) -> Path:
    """Folder of the checkpoint after ``step``."""
    return Path(out_dir) / "checkpoints" / f"global_step_{step}"


def latest(out_dir: Path) -> Path | None:
    """The newest complete checkpoint, or None when there is none.

    Raises:
        FileNotFoundError: the pointer file names a checkpoint folder that does not exist.
    """
    pointer = Path(out_dir) / "checkpoints" / LATEST_FILE
    if not pointer.is_file():
        return None
    path = checkpoint_dir(out_dir, int(pointer.read_text().strip()))
    if not path.is_dir():
        raise FileNotFoundError(f"{pointer} names {path.name}, which is missing: the checkpoint folder was changed by hand")
    return path


def save(policy: Any, optimizer: Any, out_dir: Path, step: int, user_state: dict[str, Any], *, keep: int = 2,
         config: dict[str, Any] | None = None) -> Path:
    """Write the checkpoint after ``step`` (every rank calls), point ``latest`` at it, prune.

    Pruning keeps the ``keep`` newest checkpoints at or below ``step`` (>= 1) and removes any
    numbered above it (left by a run this one does not continue).
    """
    from rlec import megatron as meg

    path = checkpoint_dir(out_dir, step)
    meg.save_dist_checkpoint(policy, path, optimizer=optimizer, step=step, user_state=user_state,
                             metadata={"step": step, "local_run_config": config or {}}, overwrite=True)
    if not torch.distributed.is_initialized() or torch.distributed.get_rank() == 0:
        atomic_write_text(path.parent / LATEST_FILE, f"{step}\n")
        prune(out_dir, step, keep)
    if torch.distributed.is_initialized():
        torch.distributed.barrier()
    return path


def prune(out_dir: Path, step: int, keep: int) -> list[int]:
    """Delete checkpoints numbered above ``step`` and all but the ``keep`` newest at or below it.

    Returns:
        The steps whose checkpoints remain, ascending.
    """
    root = Path(out_dir) / "checkpoints"
    steps = sorted(int(p.name.rsplit("_", 1)[1]) for p in root.glob("global_step_*") if p.is_dir())
    below = [s for s in steps if s <= step]
    kept = below[-max(1, keep):]
    for old in steps:
        if old not in kept:
            shutil.rmtree(checkpoint_dir(out_dir, old), ignore_errors=True)
    return kept
