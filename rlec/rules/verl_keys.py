"""The rules' one reader of verl's raw keys: the layout, the training settings and every key a rule judges.

The bridge between verl's config keys (a composed ``DictConfig`` or a plain nested dict) and rlec's rules
and memory arithmetic:

- :class:`VerlKeys`: each verl key the rules of :mod:`rlec.rules.checks`, :mod:`rlec.rules.moe` and
  :mod:`rlec.rules.resources` judge, read once per check (:meth:`VerlKeys.read`) into one named field; the
  value stays raw (as composed), since a rule must see a bad value to refuse it naming its key, where verl's
  dataclasses would raise on the first one (docs/hyperparameters.md, "Reading verl's keys");
- ``layout_of(cfg)`` (:class:`rlec.layout.ParallelLayout`) and ``training_settings_of(cfg)`` feed
  :mod:`rlec.layout` and :func:`rlec.rules.memory.estimate_memory`, for ``rlec.cluster.config_check`` and
  the cost model. :data:`LAYOUT_KEYS` names each layout field by its verl key, for messages.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from rlec.layout import ParallelLayout
from rlec.rules.memory import TrainingSettings
from rlec.config import select

ACTOR = "actor_rollout_ref.actor"
MEGATRON = f"{ACTOR}.megatron"
ROLLOUT = "actor_rollout_ref.rollout"
ENV_VARS = "ray_kwargs.ray_init.runtime_env.env_vars"

CORRECTION = "algorithm.rollout_correction"

__all__ = ["ACTOR", "CORRECTION", "ENV_VARS", "LAYOUT_KEYS", "MEGATRON", "ROLLOUT", "VerlKeys", "layout_of", "max_seq_len",
           "training_settings_of"]

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
        tp=int(select(cfg, f"{MEGATRON}.tensor_model_parallel_size", 1)),
        pp=int(select(cfg, f"{MEGATRON}.pipeline_model_parallel_size", 1)),
        cp=int(select(cfg, f"{MEGATRON}.context_parallel_size", 1)),
        ep=int(select(cfg, f"{MEGATRON}.expert_model_parallel_size", 1)),
        etp=select(cfg, f"{MEGATRON}.expert_tensor_parallel_size"),
        vpp=select(cfg, f"{MEGATRON}.virtual_pipeline_model_parallel_size"),
        first_stage_layers=override_tf.get("num_layers_in_first_pipeline_stage"),
        last_stage_layers=override_tf.get("num_layers_in_last_pipeline_stage"),
        distributed_optimizer=bool(select(cfg, f"{MEGATRON}.use_distributed_optimizer", True)),
        param_offload=bool(select(cfg, f"{MEGATRON}.param_offload", False)),
        optimizer_offload=bool(select(cfg, f"{MEGATRON}.optimizer_offload", False)),
        optimizer_cpu_fraction=cpu_fraction,
        rollout_tp=int(select(cfg, f"{ROLLOUT}.tensor_model_parallel_size", 1)),
        rollout_dp=int(select(cfg, f"{ROLLOUT}.data_parallel_size", 1)),
        rollout_ep=int(select(cfg, f"{ROLLOUT}.expert_parallel_size", 1)),
        rollout_gpu_memory_utilization=float(select(cfg, f"{ROLLOUT}.gpu_memory_utilization", 0.5)),
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


def _key(dotted: str, default: Any = None) -> Any:
    """A :class:`VerlKeys` field: verl's dotted key and the value a missing (or null) key reads as."""
    return field(metadata={"key": dotted, "default": default})


@dataclass(frozen=True)
class VerlKeys:
    """The verl keys rlec's rules judge, each read once (:meth:`read`), raw as composed; a missing or null key is
    the field's default (``rlec.config_base.select``'s rule). A field's verl key: :meth:`key_of`."""

    # layout and batches (rlec.rules.checks)
    sequence_parallel: Any = _key(f"{MEGATRON}.sequence_parallel", False)
    n_gpus_per_node: Any = _key("trainer.n_gpus_per_node", 1)
    rollout_pp: Any = _key(f"{ROLLOUT}.pipeline_model_parallel_size", 1)
    rollout_n: Any = _key(f"{ROLLOUT}.n", 1)
    rollout_name: Any = _key(f"{ROLLOUT}.name", "vllm")
    train_batch_size: Any = _key("data.train_batch_size")  # None when unset (the rules count it as 1)
    ppo_mini_batch_size: Any = _key(f"{ACTOR}.ppo_mini_batch_size", 1)
    use_dynamic_bsz: Any = _key(f"{ACTOR}.use_dynamic_bsz", False)
    ppo_max_token_len_per_gpu: Any = _key(f"{ACTOR}.ppo_max_token_len_per_gpu")
    log_prob_max_token_len_per_gpu: Any = _key(f"{ROLLOUT}.log_prob_max_token_len_per_gpu")
    ppo_micro_batch_size_per_gpu: Any = _key(f"{ACTOR}.ppo_micro_batch_size_per_gpu")
    # the run's length and warm-up
    total_training_steps: Any = _key("trainer.total_training_steps")
    lr_warmup_steps: Any = _key(f"{ACTOR}.optim.lr_warmup_steps", -1)
    lr_warmup_steps_ratio: Any = _key(f"{ACTOR}.optim.lr_warmup_steps_ratio", 0.0)
    resume_mode: Any = _key("trainer.resume_mode", "auto")
    resume_from_path: Any = _key("trainer.resume_from_path")
    default_local_dir: Any = _key("trainer.default_local_dir")
    # the early rules' registries and ranges (rlec.rules.settings_rules)
    policy_loss_mode: Any = _key(f"{ACTOR}.policy_loss.loss_mode", "vanilla")
    loss_agg_mode: Any = _key(f"{ACTOR}.loss_agg_mode", "token-mean")
    clip_grad: Any = _key(f"{ACTOR}.optim.clip_grad", 1.0)
    async_save: Any = _key(f"{ACTOR}.checkpoint.async_save", False)
    # rlec's key, raw: the early rules judge it beside verl's async_save before rlec's settings are known valid
    checkpoint_manifest: Any = _key("rlec.checkpoint.manifest", True)
    # wiring: the plugin, the weight bridge, FP8, Megatron's overrides
    env_vars: Any = _key(ENV_VARS, {})
    trainer_mode: Any = _key("trainer.v1.trainer_mode", "")
    reward_manager: Any = _key("reward.reward_manager.name")
    use_mbridge: Any = _key(f"{MEGATRON}.use_mbridge", False)
    vanilla_mbridge: Any = _key(f"{MEGATRON}.vanilla_mbridge", False)
    rope_theta: Any = _key("actor_rollout_ref.model.override_config.rope_theta")
    override_transformer_config: Any = _key(f"{MEGATRON}.override_transformer_config", {})
    override_optimizer_config: Any = _key(f"{ACTOR}.optim.override_optimizer_config", {})
    optimizer_fp8_recipe: Any = _key(f"{ACTOR}.optim.override_optimizer_config.fp8_recipe")
    optimizer_cpu_offload: Any = _key(f"{ACTOR}.optim.override_optimizer_config.optimizer_cpu_offload", False)
    # the keys rlec's group advantage sets (rlec.rules.checks._algorithm_rules)
    adv_estimator: Any = _key("algorithm.adv_estimator")
    norm_adv_by_std_in_grpo: Any = _key("algorithm.norm_adv_by_std_in_grpo")
    use_kl_in_reward: Any = _key("algorithm.use_kl_in_reward")
    use_kl_loss: Any = _key(f"{ACTOR}.use_kl_loss")
    # rollout correction and routing replay (rlec.rules.moe)
    rollout_is: Any = _key(f"{CORRECTION}.rollout_is")
    rollout_rs: Any = _key(f"{CORRECTION}.rollout_rs")
    rollout_is_threshold: Any = _key(f"{CORRECTION}.rollout_is_threshold", 2.0)
    bypass_mode: Any = _key(f"{CORRECTION}.bypass_mode", False)
    correction_loss_type: Any = _key(f"{CORRECTION}.loss_type", "ppo_clip")
    calculate_log_probs: Any = _key(f"{ROLLOUT}.calculate_log_probs", False)
    router_replay_mode: Any = _key(f"{MEGATRON}.router_replay.mode", "disabled")
    rollout_routing_replay: Any = _key(f"{ROLLOUT}.enable_rollout_routing_replay", False)
    use_remove_padding: Any = _key(f"{MEGATRON}.use_remove_padding", True)
    device: Any = _key("trainer.device", "cuda")
    # the launcher's paths (rlec.cluster.paths): the model folder, the data files and how verl filters them
    model_path: Any = _key("actor_rollout_ref.model.path", "")
    use_dist_checkpointing: Any = _key(f"{MEGATRON}.use_dist_checkpointing", False)
    dist_checkpointing_path: Any = _key(f"{MEGATRON}.dist_checkpointing_path", "")
    train_files: Any = _key("data.train_files")
    val_files: Any = _key("data.val_files")
    gen_batch_size: Any = _key("data.gen_batch_size")
    total_epochs: Any = _key("trainer.total_epochs", 1)
    max_prompt_length: Any = _key("data.max_prompt_length")
    filter_overlong_prompts: Any = _key("data.filter_overlong_prompts", True)
    truncation: Any = _key("data.truncation", "error")
    trust_remote_code: Any = _key("data.trust_remote_code", False)
    apply_chat_template_kwargs: Any = _key("data.apply_chat_template_kwargs")
    # Ray's logical CPUs (rlec.rules.resources)
    storage_units: Any = _key("transfer_queue.backend.SimpleStorage.num_data_storage_units", 8)
    ray_num_cpus: Any = _key("ray_kwargs.ray_init.num_cpus")

    @classmethod
    def read(cls, cfg: Any) -> "VerlKeys":
        """Every field's key of ``cfg`` (a composed ``DictConfig`` or nested dict), raw; reads only."""
        return cls(**{f.name: select(cfg, f.metadata["key"], f.metadata["default"]) for f in dataclasses.fields(cls)})

    @classmethod
    def key_of(cls, name: str) -> str:
        """verl's dotted key of the field ``name`` (what a finding names)."""
        return next(f.metadata["key"] for f in dataclasses.fields(cls) if f.name == name)
