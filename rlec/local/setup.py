"""Before the local run's first step: checks that fail fast, the data, the model, stale outputs."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import Any

import torch

from rlec.local import checkpoint as ckpt


class LocalRunError(ValueError):
    """Bad input found before any work starts (printed without a traceback, exit status 2)."""


def is_rank0() -> bool:
    """Rank 0 of torchrun (or a single process)."""
    return int(os.environ.get("RANK", "0")) == 0


def log0(msg: str) -> None:
    """One line on stderr from rank 0."""
    if is_rank0():
        print(f"[rlec.local] {msg}", file=sys.stderr, flush=True)


def _barrier() -> None:
    if torch.distributed.is_initialized():
        torch.distributed.barrier()


def check_model_path(path: str | os.PathLike[str]) -> Path:
    """A local HF Qwen3 / Qwen3-MoE folder (``model.path``, set by ``MODEL_PATH``).

    Raises:
        LocalRunError: not a Hugging Face model folder, or another ``model_type``
            (:func:`rlec.models.check_model_folder`).
    """
    from rlec.models import SUPPORTED_MODEL_TYPES, check_model_folder

    try:
        return check_model_folder(path, label="model.path (MODEL_PATH)", model_types=SUPPORTED_MODEL_TYPES)
    except (OSError, ValueError) as exc:
        raise LocalRunError(str(exc)) from None


def preflight(cfg: Any, world: int) -> Any:
    """Check the layout, the batch, the model and the data before anything heavy starts.

    Returns:
        The :class:`rlec.megatron.ParallelLayout`.

    Raises:
        LocalRunError: the layout does not fit the process count, the batch does not split
            into PPO mini-batches over the data-parallel ranks, ``model.path`` is not a Qwen3
            family model, or the data is missing and may not be prepared.
    """
    from rlec import megatron as meg

    layout = meg.ParallelLayout(tp=cfg.layout.tp, ep=cfg.layout.ep, etp=cfg.layout.etp, pp=cfg.layout.pp, world_size=world)
    try:
        layout.check()
    except ValueError as exc:
        raise LocalRunError(
            f"layout {dict(tp=layout.tp, ep=layout.ep, etp=layout.expert_tp, pp=layout.pp)} does not fit {world} process(es): "
            f"{exc}; NPROC must be a multiple of TP x PP and of EP x ETP x PP") from None
    mini = cfg.actor.ppo_mini_batch_size * cfg.rollout.n
    if cfg.rollout.prompts_per_step % cfg.actor.ppo_mini_batch_size or mini % layout.dp:
        raise LocalRunError(
            f"actor.ppo_mini_batch_size={cfg.actor.ppo_mini_batch_size} must divide rollout.prompts_per_step="
            f"{cfg.rollout.prompts_per_step}, and a mini-batch of {mini} responses must split over {layout.dp} data-parallel ranks")
    if cfg.model.path:
        check_model_path(cfg.model.path)
    train = Path(cfg.data.dir) / cfg.data.train_file
    if not train.is_file() and not cfg.data.prepare_if_missing:
        raise LocalRunError(f"{train} is missing and data.prepare_if_missing=false: run `python -m rlec.data.prepare --output-dir {cfg.data.dir}`")
    return layout


def ensure_data(cfg: Any) -> Path:
    """The train parquet; rank 0 prepares the shipped samples first when it is missing (see :func:`preflight`)."""
    data_dir = Path(cfg.data.dir)
    train = data_dir / cfg.data.train_file
    if not train.is_file() and is_rank0():
        log0(f"{train} missing: preparing the shipped sample data into {data_dir}")
        from rlec.data.prepare import main as prepare_main

        if prepare_main(["--output-dir", str(data_dir)]) != 0:
            raise RuntimeError("data preparation failed (see its output above)")
    _barrier()
    return train


def ensure_model(cfg: Any, out_dir: Path) -> Path:
    """``model.path``, or the tiny random Qwen3-MoE, built once by rank 0 under ``out_dir``."""
    from rlec.models import build_tiny_model

    if cfg.model.path:
        return Path(cfg.model.path)
    path = out_dir / "tiny_model"
    if is_rank0() and not path.exists():
        log0(f"building the tiny random Qwen3-MoE (seed {cfg.model.tiny_seed}) in {path}")
        build_tiny_model(path, seed=int(cfg.model.tiny_seed))
    _barrier()
    return path


def start_fresh_or_find_resume(cfg: Any, out_dir: Path) -> Path | None:
    """The checkpoint to resume from, or None for a fresh start.

    A fresh start (``trainer.resume=false``) removes the checkpoints an earlier run left in
    ``out_dir`` (announced), so they can neither shadow this run's checkpoints nor be pruned in
    their place.

    Raises:
        LocalRunError: ``latest_checkpointed_iteration.txt`` names a checkpoint that is missing.
    """
    try:
        latest = ckpt.latest(out_dir)
    except FileNotFoundError as exc:
        raise LocalRunError(str(exc)) from None
    if cfg.trainer.resume:
        if latest is None:
            log0(f"trainer.resume=true but no checkpoint in {out_dir / 'checkpoints'}: starting from step 0")
        return latest
    old = out_dir / "checkpoints"
    if is_rank0() and old.exists():
        log0(f"fresh start: removing the earlier run's checkpoints in {old} (RESUME=1 continues a run instead)")
        shutil.rmtree(old)
    _barrier()
    return None
