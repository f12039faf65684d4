"""Read the parallel layout and training settings out of a verl trainer config.

The bridge between verl's config keys (a composed ``DictConfig`` or a plain nested dict) and
rlec's memory arithmetic (:mod:`rlec.memory`): ``layout_of(cfg)`` and ``training_settings_of(cfg)``
feed :func:`rlec.memory.estimate_memory`, for ``rlec.config_check`` and for cost models.
"""

from __future__ import annotations

from typing import Any

from rlec.memory import ParallelLayout, TrainingSettings

ACTOR = "actor_rollout_ref.actor"
MEGATRON = f"{ACTOR}.megatron"
ROLLOUT = "actor_rollout_ref.rollout"
ENV_VARS = "ray_kwargs.ray_init.runtime_env.env_vars"

__all__ = ["ACTOR", "ENV_VARS", "MEGATRON", "ROLLOUT", "get", "layout_of", "max_seq_len", "training_settings_of"]


def get(cfg: Any, dotted: str, default: Any = None) -> Any:
    """``cfg[a][b][c]`` for ``"a.b.c"``, or ``default`` when a level is missing or None."""
    node = cfg
    for part in dotted.split("."):
        try:
            node = node[part]
        except (KeyError, TypeError, IndexError, AttributeError):
            return default
        if node is None:
            return default
    return node


def layout_of(cfg: Any) -> ParallelLayout:
    """The parallel layout and offload flags of a verl config."""
    optim_override = get(cfg, f"{ACTOR}.optim.override_optimizer_config", {}) or {}
    cpu_fraction = 0.0
    if optim_override.get("optimizer_cpu_offload"):
        cpu_fraction = float(optim_override.get("optimizer_offload_fraction", 1.0))
    override_tf = get(cfg, f"{MEGATRON}.override_transformer_config", {}) or {}
    return ParallelLayout(
        world_size=int(get(cfg, "trainer.nnodes", 1)) * int(get(cfg, "trainer.n_gpus_per_node", 1)),
        tp=int(get(cfg, f"{MEGATRON}.tensor_model_parallel_size", 1)),
        pp=int(get(cfg, f"{MEGATRON}.pipeline_model_parallel_size", 1)),
        cp=int(get(cfg, f"{MEGATRON}.context_parallel_size", 1)),
        ep=int(get(cfg, f"{MEGATRON}.expert_model_parallel_size", 1)),
        etp=get(cfg, f"{MEGATRON}.expert_tensor_parallel_size"),
        vpp=get(cfg, f"{MEGATRON}.virtual_pipeline_model_parallel_size"),
        first_stage_layers=override_tf.get("num_layers_in_first_pipeline_stage"),
        last_stage_layers=override_tf.get("num_layers_in_last_pipeline_stage"),
        distributed_optimizer=bool(get(cfg, f"{MEGATRON}.use_distributed_optimizer", True)),
        param_offload=bool(get(cfg, f"{MEGATRON}.param_offload", False)),
        optimizer_offload=bool(get(cfg, f"{MEGATRON}.optimizer_offload", False)),
        optimizer_cpu_fraction=cpu_fraction,
        rollout_tp=int(get(cfg, f"{ROLLOUT}.tensor_model_parallel_size", 1)),
        rollout_dp=int(get(cfg, f"{ROLLOUT}.data_parallel_size", 1)),
        rollout_ep=int(get(cfg, f"{ROLLOUT}.expert_parallel_size", 1)),
        rollout_gpu_memory_utilization=float(get(cfg, f"{ROLLOUT}.gpu_memory_utilization", 0.5)),
        rollout_weight_bytes=1.0 if get(cfg, f"{ROLLOUT}.quantization") == "fp8" else 2.0,
    )


def max_seq_len(cfg: Any) -> int:
    """``data.max_prompt_length + data.max_response_length`` (tokens)."""
    return int(get(cfg, "data.max_prompt_length", 0)) + int(get(cfg, "data.max_response_length", 0))


def training_settings_of(cfg: Any) -> TrainingSettings:
    """Tokens per micro-batch, recompute and optimizer dtypes of a verl config."""
    if get(cfg, f"{ACTOR}.use_dynamic_bsz", False):
        tokens = int(get(cfg, f"{ACTOR}.ppo_max_token_len_per_gpu", 0))
    else:
        tokens = int(get(cfg, f"{ACTOR}.ppo_micro_batch_size_per_gpu", 1) or 1) * max_seq_len(cfg)
    override_tf = get(cfg, f"{MEGATRON}.override_transformer_config", {}) or {}
    granularity = override_tf.get("recompute_granularity") or "none"
    modules = tuple(override_tf.get("recompute_modules") or ()) if granularity == "selective" else ()
    optim = get(cfg, f"{ACTOR}.optim", {}) or {}
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
