"""The rules' reader of verl's raw keys: the layout and the training settings the memory arithmetic reads.

The bridge between verl's config keys (a composed ``DictConfig`` or a plain nested dict) and rlec's rules
and memory arithmetic:

- :class:`rlec.run_config.VerlKeys` (imported from there, with the section prefixes ``ACTOR``, ``MEGATRON``, ...):
  each verl key the rules of :mod:`rlec.rules.checks`, :mod:`rlec.rules.moe` and :mod:`rlec.rules.resources`
  judge, read once per check into one named field; the value stays raw (as composed), since a rule must see a bad
  value to refuse it naming its key, where verl's dataclasses would raise on the first one (docs/hyperparameters.md,
  "Reading verl's keys");
- ``layout_of(cfg)`` (:class:`rlec.layout.ParallelLayout`) and ``training_settings_of(cfg)`` feed
  :mod:`rlec.layout` and :func:`rlec.rules.memory.estimate_memory`, for ``rlec.cluster.config_check`` and
  the cost model. :data:`LAYOUT_KEYS` names each layout field by its verl key, for messages.
"""

from __future__ import annotations

from typing import Any

from rlec.config import select
from rlec.layout import ParallelLayout
from rlec.rules.memory import TrainingSettings
from rlec.run_config import ACTOR, MEGATRON, ROLLOUT

__all__ = ["LAYOUT_KEYS", "layout_of", "max_seq_len", "training_settings_of"]

# verl's key of each ParallelLayout field (what a refusal names)
LAYOUT_KEYS = {
    "world_size": "trainer.nnodes x trainer.n_gpus_per_node",
    "tp": f"{MEGATRON}.tensor_model_parallel_size",
    "pp": f"{MEGATRON}.pipeline_model_parallel_size",
    "cp": f"{MEGATRON}.context_parallel_size",
    "ep": f"{MEGATRON}.expert_model_parallel_size",
    "etp": f"{MEGATRON}.expert_tensor_parallel_size",
    "vpp": f"{MEGATRON}.virtual_pipeline_model_parallel_size",
    "optimizer_cpu_fraction": f"{ACTOR}.optim.override_optimizer_config.optimizer_offload_fraction",
    "rollout_tp": f"{ROLLOUT}.tensor_model_parallel_size",
    "rollout_dp": f"{ROLLOUT}.data_parallel_size",
    "rollout_ep": f"{ROLLOUT}.expert_parallel_size",
    "rollout_gpu_memory_utilization": f"{ROLLOUT}.gpu_memory_utilization",
}


def layout_of(cfg: Any) -> ParallelLayout:
    """The parallel layout and offload flags of a verl config."""
    optim_override = select(cfg, f"{ACTOR}.optim.override_optimizer_config", {}) or {}
    cpu_fraction = 0.0
    if optim_override.get("optimizer_cpu_offload"):
        cpu_fraction = float(optim_override.get("optimizer_offload_fraction", 1.0))
    override_tf = select(cfg, f"{MEGATRON}.override_transformer_config", {}) or {}
    return ParallelLayout(
        world_size=int(select(cfg, "trainer.nnodes", 1)) * int(select(cfg, "trainer.n_gpus_per_node", 1)),
        tp=int(select(cfg, LAYOUT_KEYS["tp"], 1)),
        pp=int(select(cfg, LAYOUT_KEYS["pp"], 1)),
        cp=int(select(cfg, LAYOUT_KEYS["cp"], 1)),
        ep=int(select(cfg, LAYOUT_KEYS["ep"], 1)),
        etp=select(cfg, LAYOUT_KEYS["etp"]),
        vpp=select(cfg, LAYOUT_KEYS["vpp"]),
        first_stage_layers=override_tf.get("num_layers_in_first_pipeline_stage"),
        last_stage_layers=override_tf.get("num_layers_in_last_pipeline_stage"),
        distributed_optimizer=bool(select(cfg, f"{MEGATRON}.use_distributed_optimizer", True)),
        param_offload=bool(select(cfg, f"{MEGATRON}.param_offload", False)),
        optimizer_offload=bool(select(cfg, f"{MEGATRON}.optimizer_offload", False)),
        optimizer_cpu_fraction=cpu_fraction,
        rollout_tp=int(select(cfg, LAYOUT_KEYS["rollout_tp"], 1)),
        rollout_dp=int(select(cfg, LAYOUT_KEYS["rollout_dp"], 1)),
        rollout_ep=int(select(cfg, LAYOUT_KEYS["rollout_ep"], 1)),
        rollout_gpu_memory_utilization=float(select(cfg, LAYOUT_KEYS["rollout_gpu_memory_utilization"], 0.5)),
        rollout_quantization=select(cfg, f"{ROLLOUT}.quantization"),
    )


def max_seq_len(cfg: Any) -> int:
    """``data.max_prompt_length + data.max_response_length`` (tokens)."""
    return int(select(cfg, "data.max_prompt_length", 0)) + int(select(cfg, "data.max_response_length", 0))


def training_settings_of(cfg: Any) -> TrainingSettings:
    """Tokens per micro-batch, recompute and optimizer dtypes of a verl config."""
    if select(cfg, f"{ACTOR}.use_dynamic_bsz", False):
        tokens = int(select(cfg, f"{ACTOR}.ppo_max_token_len_per_gpu", 0))
    else:
        tokens = int(select(cfg, f"{ACTOR}.ppo_micro_batch_size_per_gpu", 1) or 1) * max_seq_len(cfg)
    override_tf = select(cfg, f"{MEGATRON}.override_transformer_config", {}) or {}
    granularity = override_tf.get("recompute_granularity") or "none"
    modules = tuple(override_tf.get("recompute_modules") or ()) if granularity == "selective" else ()
    optim = select(cfg, f"{ACTOR}.optim", {}) or {}
    low = bool(optim.get("use_precision_aware_optimizer", False))

    def size(key: str) -> int:
        return 2 if low and optim.get(key, "fp32") in ("bf16", "bfloat16") else 4

    return TrainingSettings(
        tokens_per_micro_batch=tokens,
        recompute=str(granularity),
        recompute_modules=modules,
        grad_bytes=size("main_grads_dtype"),
        adam_moment_bytes=(size("exp_avg_dtype"), size("exp_avg_sq_dtype")),
    )
