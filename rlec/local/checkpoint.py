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

LATEST_FILE = "latest_checkpointed_iteration.txt"


def checkpoint_dir(out_dir: Path, step: int) -> Path:
    """Folder of the checkpoint after ``step``."""
    return Path(out_dir) / "checkpoints" / f"global_step_{step}"


def latest(out_dir: Path) -> Path | None:
    """The newest complete checkpoint, or None."""
    pointer = Path(out_dir) / "checkpoints" / LATEST_FILE
    if not pointer.is_file():
        return None
    path = checkpoint_dir(out_dir, int(pointer.read_text().strip()))
    return path if path.is_dir() else None


def save(policy: Any, optimizer: Any, out_dir: Path, step: int, user_state: dict[str, Any], *, keep: int = 2,
         config: dict[str, Any] | None = None) -> Path:
    """Write the checkpoint after ``step`` (every rank calls), point ``latest`` at it, prune old ones.

    Args:
        keep: checkpoints to keep (older ones are deleted after the new one is complete), >= 1.
    """
    from rlec import megatron as meg

    path = checkpoint_dir(out_dir, step)
    meg.save_dist_checkpoint(policy, path, optimizer=optimizer, step=step, user_state=user_state,
                             metadata={"step": step, "local_run_config": config or {}}, overwrite=True)
    if not torch.distributed.is_initialized() or torch.distributed.get_rank() == 0:
        pointer = path.parent / LATEST_FILE
        tmp = pointer.with_suffix(".tmp")
        tmp.write_text(f"{step}\n")
        tmp.replace(pointer)
        steps = sorted(int(p.name.rsplit("_", 1)[1]) for p in path.parent.glob("global_step_*") if p.is_dir())
        for old in steps[: max(0, len(steps) - max(1, keep))]:
            shutil.rmtree(checkpoint_dir(out_dir, old), ignore_errors=True)
    if torch.distributed.is_initialized():
        torch.distributed.barrier()
    return path
