"""Algorithm state saved beside verl's checkpoint: one JSON file per algorithm in ``global_step_<N>/``.

verl 0.9.1's V1 trainer saves the actor, the critic and the dataloader (``data.pt``) into
``<trainer.default_local_dir>/global_step_<N>/`` and, on resume, sets ``global_steps = N`` from
the folder it picks (``trainer.resume_mode``: ``auto`` = the latest under ``default_local_dir``,
``resume_path`` = ``trainer.resume_from_path``). rlec's trainer mixins write their state there
too, atomically and *before* verl writes ``latest_checkpointed_iteration.txt``, so a checkpoint
that verl resumes from always holds it.
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any

from rlec.io import atomic_write_text

logger = logging.getLogger(__name__)

__all__ = ["load_state", "resumed_folder", "save_state", "saving_folder"]


def saving_folder(config: Any, global_steps: int) -> str:
    """The folder verl's ``_save_checkpoint`` writes step ``global_steps`` to."""
    return os.path.join(config.trainer.default_local_dir, f"global_step_{global_steps}")


def resumed_folder(config: Any, global_steps: int) -> str | None:
    """The folder verl's ``_load_checkpoint`` resumed from (None when it started from scratch)."""
    if global_steps <= 0 or config.trainer.resume_mode == "disable":
        return None
    if config.trainer.resume_mode == "resume_path":
        folder = str(config.trainer.resume_from_path)
    else:
        folder = saving_folder(config, global_steps)
    return folder if os.path.isabs(folder) else os.path.join(os.getcwd(), folder)


def save_state(folder: str, name: str, state: dict[str, Any]) -> str:
    """Write ``state`` as ``<folder>/<name>`` (JSON, atomic); returns the path."""
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, name)
    atomic_write_text(path, json.dumps(state))
    return path


def load_state(folder: str | None, name: str) -> dict[str, Any] | None:
    """``<folder>/<name>`` as a dict; None (with a warning) when the checkpoint has no such file.

    Raises:
        ValueError: the file is not valid JSON (names the file).
    """
    if folder is None:
        return None
    path = os.path.join(folder, name)
    if not os.path.exists(path):
        logger.warning("%s: missing (a checkpoint written without this algorithm); its state starts fresh", path)
        return None
    try:
        with open(path) as f:
            return json.load(f)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not valid JSON ({exc})") from None
