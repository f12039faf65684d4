"""rlec's Megatron boundary: Qwen3 / Qwen3-MoE on megatron-core 0.16.1 through mbridge 0.15.1.

The API the converter, verl's engine on CPU (:mod:`rlec.cpu.verl_shims`) and the update benchmark share (names resolve lazily, so importing
``rlec.megatron`` does not import Megatron):

- layout and process groups: :class:`ParallelLayout`, :func:`init_parallel`,
  :func:`destroy_parallel` (gloo on CPU, NCCL on GPU; torchrun or a single process);
- the model: :func:`build_model` -> :class:`MegatronModel` (TE spec + bf16 on GPU, local spec +
  fp32 on CPU), :func:`load_hf_weights`, :func:`export_hf_weights` (HF names, for the weight sync),
  :func:`load_into_hf_model` (into a live transformers model);
- log-probs: :func:`compute_log_probs` (micro-batched, vocab-parallel), :func:`compute_logits`;
- training: :func:`build_optimizer`, :func:`train_step`, :func:`forward_backward`,
  :class:`StepResult`;
- checkpoints: :func:`save_dist_checkpoint`, :func:`load_dist_checkpoint` (the layout verl loads as
  ``dist_checkpointing_path``; optimizer state for resume);
- checks: :func:`verify_against_hf` -> :class:`ParityReport`.

CPU runs need the CPU wing's Megatron shims (:mod:`rlec.cpu.megatron_core`); :func:`init_parallel` imports and
applies them when CUDA is absent.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "ParallelLayout": "parallel",
    "init_parallel": "parallel",
    "destroy_parallel": "parallel",
    "MegatronModel": "model",
    "build_model": "model",
    "load_hf_weights": "model",
    "export_hf_weights": "model",
    "load_into_hf_model": "hf_sync",
    "compute_log_probs": "logprobs",
    "compute_logits": "logprobs",
    "build_optimizer": "training",
    "train_step": "training",
    "forward_backward": "training",
    "StepResult": "training",
    "save_dist_checkpoint": "checkpoint",
    "load_dist_checkpoint": "checkpoint",
    "verify_against_hf": "verify",
    "ParityReport": "verify",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'rlec.megatron' has no attribute {name!r}")
    return getattr(importlib.import_module(f"rlec.megatron.{_EXPORTS[name]}"), name)
