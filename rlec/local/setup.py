"""Before the local run's first step: checks that fail fast, the data, the model, the output folder.

The output-folder rule (the same as the cluster launcher's ``trainer.resume_mode=auto``):

- a compatible checkpoint in ``trainer.default_local_dir`` is resumed (``resume_mode=auto``, the
  default); one written with settings that change what the run optimises is refused with the
  differing settings named (:func:`rlec.config.resume_differences`);
- otherwise a folder holding an earlier run's outputs is moved aside to ``<dir>.old-<time>``
  (announced) before the fresh run starts, so outputs of two runs never mix and nothing is
  deleted; ``resume_mode=disable`` always starts fresh this way.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlec.config import pinned_schedule_end, resume_differences, select
from rlec.local import checkpoint as ckpt
from rlec.local.config import train_files
from rlec.megatron.parallel import barrier, broadcast_object, is_rank0
from rlec.settings import RlecSettings

# what makes a folder an earlier run's output
RUN_OUTPUTS = ("checkpoints", "metrics.jsonl", "config.yaml", "hf_final", "eval", "tensorboard", "training_curves.png")


class LocalRunError(ValueError):
    """Bad input found before any work starts (printed without a traceback, exit status 2)."""


def log0(msg: str) -> None:
    """One line on stderr from rank 0."""
    if is_rank0():
        print(f"[rlec.local] {msg}", file=sys.stderr, flush=True)


def check_model_path(path: str | os.PathLike[str]) -> Path:
    """A local HF Qwen3 / Qwen3-MoE folder with complete weights (``actor_rollout_ref.model.path``).

    Raises:
        LocalRunError: not a Hugging Face model folder, another ``model_type``, or weights that
            are truncated or do not match its config (the converter's full check,
            :func:`rlec.megatron.preflight.check_hf_weights`).
    """
    from rlec.megatron.preflight import check_hf_weights
    from rlec.models import SUPPORTED_MODEL_TYPES, check_model_folder

    label = "actor_rollout_ref.model.path (MODEL_PATH)"
    try:
        folder = check_model_folder(path, label=label, model_types=SUPPORTED_MODEL_TYPES)
        check_hf_weights(folder)
    except (OSError, ValueError) as exc:
        raise LocalRunError(str(exc)) from None
    return folder


def preflight(cfg: Any, world: int) -> Any:
    """Check the layout, the batch, the model, the data and the output folder before any heavy work.

    Returns:
        The :class:`rlec.megatron.ParallelLayout`.

    Raises:
        LocalRunError: the layout does not fit the process count, the batch does not split into
            PPO mini-batches over the data-parallel ranks, the model folder is unusable, the data
            is missing and may not be prepared, or the output folder is not writable.
    """
    from rlec import megatron as meg

    mg = "actor_rollout_ref.actor.megatron"
    layout = meg.ParallelLayout(tp=select(cfg, f"{mg}.tensor_model_parallel_size"), ep=select(cfg, f"{mg}.expert_model_parallel_size"),
                                etp=select(cfg, f"{mg}.expert_tensor_parallel_size"),
                                pp=select(cfg, f"{mg}.pipeline_model_parallel_size"), world_size=world)
    try:
        layout.check()
    except ValueError as exc:
        raise LocalRunError(f"layout {dict(tp=layout.tp, ep=layout.ep, etp=layout.expert_tp, pp=layout.pp)} does not fit {world} "
                            f"process(es): {exc}; NPROC must be a multiple of TP x PP and of EP x ETP x PP") from None
    prompts, mini_prompts, n = int(cfg.data.train_batch_size), int(cfg.actor_rollout_ref.actor.ppo_mini_batch_size), int(cfg.actor_rollout_ref.rollout.n)
    if prompts % mini_prompts or (mini_prompts * n) % layout.dp:
        raise LocalRunError(
            f"actor_rollout_ref.actor.ppo_mini_batch_size={mini_prompts} must divide data.train_batch_size={prompts}, and a "
            f"mini-batch of {mini_prompts * n} responses must split over {layout.dp} data-parallel ranks")
    if select(cfg, "actor_rollout_ref.model.path"):
        check_model_path(cfg.actor_rollout_ref.model.path)
    may_prepare = RlecSettings.from_config(cfg).local.prepare_data_if_missing
    for train in map(Path, train_files(cfg)):
        if not train.is_file() and not (may_prepare and _is_default_data(train)):
            raise LocalRunError(f"data.train_files={train} is missing: run `python -m rlec.data.prepare --output-dir {train.parent}`")
    out_dir = Path(str(cfg.trainer.default_local_dir))
    try:
        out_dir.parent.mkdir(parents=True, exist_ok=True)
        probe = out_dir.parent / f".rlec-write-probe-{os.getpid()}"
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        raise LocalRunError(f"trainer.default_local_dir={out_dir} (OUTPUT_DIR) is not writable: {exc.strerror or exc}") from None
    return layout


def _is_default_data(train: Path) -> bool:
    """The train file is data.prepare's default output name (the shipped samples may be prepared)."""
    return train.name == "train.parquet"


def ensure_data(cfg: Any) -> list[Path]:
    """The train parquet files; rank 0 prepares the shipped samples first when one is missing and allowed."""
    files = [Path(f) for f in train_files(cfg)]
    for train in files:
        if not train.is_file() and is_rank0():
            log0(f"{train} missing: preparing the shipped sample data into {train.parent}")
            from rlec.data.prepare import main as prepare_main

            if prepare_main(["--output-dir", str(train.parent)]) != 0:
                raise RuntimeError("data preparation failed (see its output above)")
    barrier()
    return files


def ensure_model(cfg: Any, out_dir: Path, settings: RlecSettings | None = None) -> Path:
    """``actor_rollout_ref.model.path``, or the tiny random Qwen3-MoE, built once by rank 0 under ``out_dir``
    (its seed ``rlec.local.tiny_seed`` from ``settings``, the caller's parse of ``cfg``, else read here)."""
    from rlec.models import build_tiny_model

    if select(cfg, "actor_rollout_ref.model.path"):
        return Path(str(cfg.actor_rollout_ref.model.path))
    path = out_dir / "tiny_model"
    if is_rank0() and not path.exists():
        seed = (settings or RlecSettings.from_config(cfg)).local.tiny_seed
        log0(f"building the tiny random Qwen3-MoE (seed {seed}) in {path}")
        build_tiny_model(path, seed=seed)
    barrier()
    return path


@dataclass
class RunStart:
    """How the run starts: the checkpoint to resume (or None) and what to tell the user.

    Attributes:
        resume_from: the checkpoint folder, or None for a fresh start.
        notes: one line each (recovered damage, settings that changed, a moved-aside run).
        schedule_end: the b schedule's end step to keep (see :func:`rlec.config.pinned_schedule_end`).
    """

    resume_from: Path | None = None
    notes: list[str] = field(default_factory=list)
    schedule_end: int | None = None


def plan_start(cfg: Any, out_dir: Path) -> RunStart:
    """Apply the output-folder rule (module docstring); every rank calls, rank 0 decides and moves.

    Raises:
        LocalRunError: the folder holds a checkpoint whose settings differ in what the run optimises.
    """
    start = RunStart()
    if is_rank0():
        start = _plan_on_rank0(cfg, out_dir)
    start = broadcast_object(start)
    if isinstance(start, LocalRunError):
        raise start
    return start


def _plan_on_rank0(cfg: Any, out_dir: Path) -> RunStart | LocalRunError:
    resume = str(cfg.trainer.resume_mode) == "auto"
    found, notes = ckpt.find_resume(out_dir) if resume else (None, [])
    if found is not None:
        saved = ckpt.saved_config(found)
        refused, noted = resume_differences(saved, cfg)
        if refused:
            return LocalRunError(
                f"{out_dir} holds a run with other settings ({'; '.join(refused)}): restore them to resume it, choose "
                "another OUTPUT_DIR, or set RESUME=disable to move that run aside and start fresh")
        end = pinned_schedule_end(saved, cfg)
        if end is not None:
            noted.append(f"the b schedule keeps its original length: b reaches 1 at step {end} "
                         "(set rlec.schedule.end_step to re-plan it)")
        return RunStart(found, notes + noted, end)
    if out_dir.exists() and any((out_dir / name).exists() for name in RUN_OUTPUTS):
        aside = out_dir.with_name(f"{out_dir.name}.old-{time.strftime('%Y%m%dT%H%M%S')}")
        os.rename(out_dir, aside)
        why = "no checkpoint to resume" if resume else "trainer.resume_mode=disable"
        notes.append(f"{why}: moved the earlier run's outputs in {out_dir} aside to {aside}")
    return RunStart(None, notes)
