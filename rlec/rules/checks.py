"""rlec's checks of a composed verl trainer config: layout, batch sizes, plugin wiring, memory.

Each rule returns :class:`Finding` s (``error`` refuses the run, ``warning`` is printed). The
rules read verl's config keys (a composed ``DictConfig`` or a plain nested dict) and a
:class:`rlec.model_shape.ModelShape`; they never start Megatron or a GPU. The parallel-size
rules are the one rule set of :mod:`rlec.layout` (the Megatron side raises on the same
findings), reported here under verl's keys; this module adds what only a verl config has:

- TP > 1 with MoE needs sequence parallel (Megatron); the vLLM rollout has no pipeline parallel;
- batches split evenly over data-parallel ranks (otherwise verl pads with duplicated samples),
  one full sequence fits a dynamic-batch micro-batch, rollout.n >= 2 (group mean);
- the plugin module reaches Ray workers; FP8 settings are complete; Megatron override keys exist
  (field names from :mod:`rlec.megatron.fields`, passed in by the caller); MoE router settings are explicit;
- memory per GPU (:func:`rlec.rules.memory.estimate_memory`) fits both phases;
- Ray's logical CPUs cover TransferQueue and the worker bundles (:mod:`rlec.rules.resources`),
  and a fixed LR warm-up is shorter than the run;
- every registered algorithm (:func:`algorithm_overlay_rules`): each algorithm's own
  ``check`` (:mod:`rlec.algorithms.registry`);
- known failures of the same stack in public reports (:func:`known_issue_rules`): Blackwell GPUs
  with an MoE model (vLLM 0.24's MoE weight sync, verl#7978) and Megatron's CPU-offloaded
  optimizer with resume (verl#6690; under expert parallel also Megatron-LM#1842).
"""

from __future__ import annotations

import importlib.util
from typing import Any, Mapping

from rlec.config_writes import RLEC_MODE_PREFIX
from rlec.layout import (
    Finding,
    ParallelLayout,
    model_findings,
    rollout_findings,
    size_findings,
)
from rlec.rules.memory import GIB, MemoryEstimate, estimate_memory
from rlec.rules.moe import moe_stability_rules
from rlec.rules.resources import cpu_demand
from rlec.model_shape import ModelShape
from rlec.rules.verl_keys import LAYOUT_KEYS, layout_of, max_seq_len, training_settings_of
from rlec.run_config import ACTOR, ENV_VARS, MEGATRON, ROLLOUT, RunConfig, VerlKeys
from rlec.settings import RlecSettings, SettingError, compute_capability, plain

PLUGIN_MODULE = "rlec.verl_plugin"
CUDA_RESERVE_BYTES = 2 * GIB  # CUDA context, NCCL buffers, allocator fragmentation

__all__ = ["Finding", "algorithm_overlay_rules", "check_layout", "known_issue_rules", "verl_algorithm_section"]

GPU_ARCH_KEY = "rlec.check.gpu_arch"
CPU_OFFLOAD_KEY = f"{ACTOR}.optim.override_optimizer_config.optimizer_cpu_offload"
VERL_7978 = ("verl#7978: on Blackwell vLLM 0.24 selects the FlashInfer TRT-LLM MoE kernel, whose 4-D expert layout "
             "breaks verl's weight sync at the first sync (ValueError: shard_dim=0 ...); the fix (verl PR #7987) is not "
             "in verl 0.9.1")
VERL_6690 = ("verl#6690: resuming with a CPU-offloaded optimizer crashes in offload_megatron_model_to_cpu "
             "(cudaErrorInvalidValue)")
MEGATRON_1842 = ("Megatron-LM#1842: an MoE run resumed with optimizer_cpu_offload restarts from a corrupted optimizer "
                 "(loss 0.31 -> 10)")


class _Findings(list):
    """A list of findings with shorthands."""

    def error(self, key: str, message: str) -> None:
        self.append(Finding("error", key, message))

    def warning(self, key: str, message: str) -> None:
        self.append(Finding("warning", key, message))


def _parallel_rules(k: VerlKeys, shape: ModelShape, lay: ParallelLayout) -> _Findings:
    out = _Findings(size_findings(lay, LAYOUT_KEYS) + model_findings(lay, shape, LAYOUT_KEYS))
    if shape.num_experts and lay.tp > 1 and not k.sequence_parallel:
        out.error(f"{MEGATRON}.sequence_parallel", "sequence parallel must be on when TP > 1 with MoE layers (Megatron)")
    return out


def _rollout_rules(k: VerlKeys, shape: ModelShape, lay: ParallelLayout) -> _Findings:
    per_node = int(k.n_gpus_per_node)
    out = _Findings(rollout_findings(lay, shape, LAYOUT_KEYS, gpus_per_node=per_node))
    if int(k.rollout_pp) > 1:
        out.error(f"{ROLLOUT}.pipeline_model_parallel_size", "verl's vLLM rollout has no pipeline parallel")
    if int(k.rollout_n) < 2:
        out.error(f"{ROLLOUT}.n", "rollout.n must be >= 2: the group-mean advantage of a group of one is always 0")
    return out


def _batch_rules(k: VerlKeys, seq: int, lay: ParallelLayout) -> _Findings:
    out = _Findings()
    if lay.world % (lay.tp * lay.pp * lay.cp):
        return out  # reported by the parallel rules
    dp = lay.dp
    n, tbs = int(k.rollout_n), int(1 if k.train_batch_size is None else k.train_batch_size)
    mini = int(k.ppo_mini_batch_size)
    if tbs % mini:
        out.error("data.train_batch_size", f"{tbs} must be a multiple of actor.ppo_mini_batch_size {mini}")
    if (mini * n) % dp:
        out.error(f"{ACTOR}.ppo_mini_batch_size", f"ppo_mini_batch_size x rollout.n = {mini} x {n} = {mini * n} "
                  f"responses must split evenly over the {dp} data-parallel ranks (verl would pad with "
                  "duplicated samples)")
    if k.use_dynamic_bsz:
        for name in ("ppo_max_token_len_per_gpu", "log_prob_max_token_len_per_gpu"):
            tokens = getattr(k, name)
            if int(0 if tokens is None else tokens) < seq:
                out.error(VerlKeys.key_of(name), f"{tokens} tokens cannot hold one sequence of max_prompt_length + "
                          f"max_response_length = {seq}")
    else:
        micro = k.ppo_micro_batch_size_per_gpu
        if micro and (mini * n // dp) % int(micro):
            out.error(f"{ACTOR}.ppo_micro_batch_size_per_gpu", f"{micro} must divide the {mini * n // dp} "
                      "responses of a mini-batch on each data-parallel rank")
    return out


def _startup_rules(k: VerlKeys, settings: RlecSettings | None) -> _Findings:
    """Ray's logical CPUs (:mod:`rlec.rules.resources`) and the LR warm-up against the run's length."""
    out = _Findings()
    demand = cpu_demand(k, settings.check_.cpus_per_node if settings is not None else None)
    if demand.available is not None and demand.total > demand.available:
        out.error("ray_kwargs.ray_init.num_cpus", demand.message())
    warmup, steps = k.lr_warmup_steps, k.total_training_steps
    if warmup is not None and int(warmup) > 0 and steps is not None and int(warmup) >= int(steps):
        out.error(f"{ACTOR}.optim.lr_warmup_steps", f"{warmup} warm-up steps must be fewer than trainer.total_training_steps = "
                  f"{steps} (Megatron's scheduler asserts lr_warmup_steps < lr_decay_steps); use "
                  f"{ACTOR}.optim.lr_warmup_steps=-1 with lr_warmup_steps_ratio")
    ratio = k.lr_warmup_steps_ratio
    if ratio is not None and not 0.0 <= float(ratio) < 1.0:
        out.error(f"{ACTOR}.optim.lr_warmup_steps_ratio", f"{ratio} must be in [0, 1): the warm-up must end before the run does")
    return out


def _wiring_rules(k: VerlKeys, hf_config: Mapping[str, Any] | None) -> _Findings:
    out = _Findings()
    env = k.env_vars or {}
    mode = str(k.verl_trainer_mode)
    uses_plugin = k.reward_manager == "rlec" or mode.startswith(RLEC_MODE_PREFIX)
    if uses_plugin and PLUGIN_MODULE not in str(env.get("VERL_USE_EXTERNAL_MODULES", "")).split(","):
        out.error(f"{ENV_VARS}.VERL_USE_EXTERNAL_MODULES", f"must list {PLUGIN_MODULE} so every Ray worker "
                  "registers rlec's reward manager and trainer")
    if not k.use_mbridge:
        out.error(f"{MEGATRON}.use_mbridge", "must be true (verl 0.9.1 loads Megatron models through a bridge)")
    vanilla = bool(k.vanilla_mbridge)
    if not vanilla and importlib.util.find_spec("megatron.bridge") is None:
        out.error(f"{MEGATRON}.vanilla_mbridge", "false selects Megatron-Bridge, which is not installed "
                  "(requirements-gpu.txt installs mbridge): set it to true")
    if vanilla and hf_config is not None:
        want = hf_config.get("rope_theta") or (hf_config.get("rope_parameters") or {}).get("rope_theta")
        have = k.rope_theta
        if want is not None and (have is None or float(have) != float(want)):
            out.error("actor_rollout_ref.model.override_config.rope_theta", f"is {have}, the model's is {want}: "
                      "mbridge 0.15.1 reads hf_config.rope_theta, which transformers 5 keeps in rope_parameters, "
                      "so set it to the model's value")
    override_tf = k.override_transformer_config or {}
    recipe = override_tf.get("fp8_recipe")
    if override_tf.get("fp8"):
        if not recipe:
            out.error(f"{MEGATRON}.override_transformer_config.fp8_recipe", "FP8 training needs a recipe")
        optim_recipe = k.optimizer_fp8_recipe
        if optim_recipe != recipe:
            out.error(f"{ACTOR}.optim.override_optimizer_config.fp8_recipe",
                      f"is {optim_recipe}, the model's fp8_recipe is {recipe}")
        if recipe == "blockwise" and str(env.get("NVTE_FP8_BLOCK_SCALING_FP32_SCALES")) != "1":
            out.error(f"{ENV_VARS}.NVTE_FP8_BLOCK_SCALING_FP32_SCALES",
                      "must be '1' for Transformer Engine's blockwise FP8 recipe")
    return out


def _megatron_key_rules(k: VerlKeys, fields: tuple[frozenset[str], frozenset[str]] | None) -> _Findings:
    out = _Findings()
    if fields is None:
        out.warning(MEGATRON, "megatron-core is not installed: override keys not checked")
        return out
    for name, known in (("override_transformer_config", fields[0]), ("override_optimizer_config", fields[1])):
        key = VerlKeys.key_of(name)
        unknown = sorted(set(getattr(k, name) or {}) - known)
        if unknown:
            out.error(key, f"not fields of Megatron's config: {unknown}")
    return out


def _moe_router_rules(k: VerlKeys, shape: ModelShape) -> _Findings:
    out = _Findings()
    override_tf = k.override_transformer_config or {}
    need = ["moe_router_load_balancing_type", "moe_token_dispatcher_type", "moe_router_dtype"]
    if override_tf.get("moe_router_load_balancing_type") == "aux_loss":
        need.append("moe_aux_loss_coeff")
    missing = [k for k in need if override_tf.get(k) is None]
    if shape.num_experts and missing:
        out.error(f"{MEGATRON}.override_transformer_config", f"set {missing} explicitly: the weight bridges "
                  "default differently (mbridge: no load balancing; Megatron-Bridge: aux loss)")
    return out


def _algorithm_rules(k: VerlKeys) -> _Findings:
    from rlec.algorithms.registry import sets_verl_value

    out = _Findings()
    rlec_algorithm = {"adv_estimator": "grpo", "norm_adv_by_std_in_grpo": False, "use_kl_in_reward": False,
                      "use_kl_loss": False}
    for name, want in rlec_algorithm.items():
        key, value = VerlKeys.key_of(name), getattr(k, name)
        if sets_verl_value(key, value):
            continue  # an algorithm's overlay (Algorithm.verl_values); its check, in algorithm_overlay_rules, judges it
        if value != want:
            out.warning(key, f"is {value!r}; RLEC's mean-only group advantage uses {want!r}")
    return out  # the b schedule's length: rlec.rules.settings_rules (the early rule set)


def verl_algorithm_section(algorithm: Any) -> Any:
    """verl's ``algorithm`` section without the keys the registered algorithms add to it
    (:func:`rlec.algorithms.registry.verl_algorithm_keys`; verl's AlgoConfig has no such fields, verl's
    trainer never converts the section, config_check drops them before converting it)."""
    from omegaconf import DictConfig, OmegaConf

    from rlec.algorithms.registry import verl_algorithm_keys

    own = verl_algorithm_keys()
    if isinstance(algorithm, DictConfig):
        return OmegaConf.create({k: v for k, v in plain(algorithm).items() if k not in own})
    return {k: v for k, v in dict(algorithm).items() if k not in own}


def algorithm_overlay_rules(run: RunConfig) -> list[Finding]:
    """Every registered algorithm's findings: :func:`rlec.algorithms.registry.check_all`,
    the one rule set that DRY_RUN, the launcher and verl's trainer apply."""
    from rlec.algorithms.registry import check_all

    return check_all(run)


def _settings(run: RunConfig) -> RlecSettings | None:
    """rlec's settings of ``run``, or None when the schema refuses them (reported by :mod:`rlec.rules.settings_rules`)."""
    try:
        return run.rlec
    except SettingError:
        return None


def known_issue_rules(k: VerlKeys, settings: RlecSettings | None, shape: ModelShape, lay: ParallelLayout) -> list[Finding]:
    """Refuse set-ups that public reports show fail on this stack (verl 0.9.1, vLLM 0.24, megatron-core).

    Errors:

    - ``rlec.check.gpu_arch`` is Blackwell (compute capability 10.0 or above: B200 ``sm_100``,
      GB300 ``sm_103``, RTX Pro ``sm_120``) with an MoE model and the vLLM rollout: :data:`VERL_7978`.
      The launcher sets the key from ``nvidia-smi`` (or ``GPU_ARCH``); DRY_RUN assumes ``sm_90``
      (H100 / H200) unless told. An unreadable value is refused by the settings schema
      (:class:`rlec.settings.CheckSettings`).
    - Megatron's CPU optimizer (``optim.override_optimizer_config.optimizer_cpu_offload=true``,
      a ``HybridDeviceOptimizer``) with ``trainer.resume_mode`` other than ``disable``:
      :data:`VERL_6690`, and with expert parallel > 1 :data:`MEGATRON_1842`. With
      ``resume_mode=disable`` it is a warning (this run starts fresh, but its checkpoints cannot be
      resumed either). verl's own rollout-phase offload (``megatron.optimizer_offload``, which the
      committed layouts use) moves the states between phases and is not what these reports cover.
    """
    out = _Findings()
    arch = settings.check_.gpu_arch if settings is not None else ""
    capability = compute_capability(arch)  # None: refused by the settings schema (rlec.rules.settings_rules)
    if capability is not None and capability >= 100 and shape.num_experts and str(k.rollout_name) == "vllm":
        out.error(GPU_ARCH_KEY, f"{arch} is a Blackwell GPU: {VERL_7978}; train this MoE model on Hopper (sm_90: H100 / "
                  "H200) until rlec moves to a verl release with the fix")
    if k.optimizer_cpu_offload:
        reports = VERL_6690 + (f"; {MEGATRON_1842}" if lay.ep > 1 else "")
        resume = str(k.resume_mode)
        if resume != "disable":
            out.error(CPU_OFFLOAD_KEY, f"true with trainer.resume_mode={resume} and expert parallel {lay.ep}: {reports}; "
                      "use more GPUs (or nodes) instead, or RESUME=disable for a run that is never resumed")
        else:
            out.warning(CPU_OFFLOAD_KEY, f"true: this run starts fresh, but its checkpoints cannot be resumed ({reports})")
    return list(out)


def _memory_rules(est: MemoryEstimate, gpu_bytes: float, fraction: float, seq: int) -> _Findings:
    out = _Findings()
    g = est.as_gib()
    budget = fraction * gpu_bytes
    if est.train_total > budget:
        out.error("memory.update", f"{g['train_total']} GiB per GPU > {budget / GIB:.1f} GiB ({fraction:.0%} of "
                  f"{gpu_bytes / GIB:.0f}): params {g['params']} + grads {g['grads']} + optimizer {g['optimizer']} "
                  f"+ activations {g['activations']} + logits {g['logits']}; raise EP/TP/PP or the number of GPUs, "
                  "use recompute, or fewer tokens per micro-batch (Megatron's optimizer_cpu_offload cannot be "
                  "resumed: verl#6690, Megatron-LM#1842)")
    usable = gpu_bytes - CUDA_RESERVE_BYTES
    if est.rollout_total > usable:
        out.error("memory.rollout", f"Megatron state left on the GPU ({g['rollout_resident']} GiB) + vLLM's share "
                  f"({g['rollout_share']} GiB) > {usable / GIB:.1f} GiB: lower rollout.gpu_memory_utilization or "
                  "turn on param_offload / optimizer_offload")
    if est.kv_cache < seq * est.kv_bytes_per_token:
        out.error(f"{ROLLOUT}.gpu_memory_utilization", f"vLLM's share ({g['rollout_share']} GiB) leaves "
                  f"{g['kv_cache']} GiB after weights ({g['vllm_weights']} GiB): less than one {seq}-token sequence")
    return out


def check_layout(
    run: RunConfig,
    shape: ModelShape,
    gpu_memory_gib: float,
    *,
    memory_fraction: float = 0.9,
    hf_config: Mapping[str, Any] | None = None,
    megatron_fields: tuple[frozenset[str], frozenset[str]] | None,
) -> tuple[list[Finding], MemoryEstimate | None]:
    """Run every rlec rule on a composed verl config.

    Args:
        run: the process's :class:`rlec.run_config.RunConfig` of the composed trainer config.
        shape: the model's shape.
        gpu_memory_gib: memory of one GPU in GiB (80 for H100, 141 for H200).
        memory_fraction: share of GPU memory the update phase may fill (the rest absorbs MoE
            routing imbalance and allocator fragmentation).
        hf_config: the model's ``config.json`` dict, when available (enables the rope_theta rule).
        megatron_fields: the field names of Megatron's ``TransformerConfig`` and ``OptimizerConfig``
            (:func:`rlec.megatron.fields.config_field_names`; the caller asks, so this package imports no
            ``rlec.megatron``), or None when megatron-core is not installed (override keys not checked: a warning).

    Returns:
        ``(findings, memory estimate)``; the estimate is None when a parallel size is invalid
        (the layout cannot be sized).
    """
    cfg = run.tree
    k, lay, seq, settings = run.keys, layout_of(cfg), max_seq_len(cfg), _settings(run)  # read once
    parallel = _parallel_rules(k, shape, lay)
    findings = parallel + _rollout_rules(k, shape, lay) + _batch_rules(k, seq, lay) + _algorithm_rules(k)
    findings += _wiring_rules(k, hf_config) + _megatron_key_rules(k, megatron_fields) + _moe_router_rules(k, shape)
    findings += _startup_rules(k, settings)
    findings += algorithm_overlay_rules(run)
    findings += known_issue_rules(k, settings, shape, lay)
    findings += moe_stability_rules(k, shape.num_experts)
    if parallel:
        return list(findings), None
    est = estimate_memory(shape, lay, training_settings_of(cfg), gpu_memory_gib * GIB)
    findings += _memory_rules(est, gpu_memory_gib * GIB, memory_fraction, seq)
    return list(findings), est
