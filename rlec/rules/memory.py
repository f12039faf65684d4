"""Per-GPU memory of Megatron training and vLLM rollout for a Qwen3 / Qwen3-MoE layout (estimates).

Pure arithmetic on a model shape and a parallel layout; no GPU, no Megatron. Used by
``rlec.cluster.config_check`` to refuse impossible layouts and by the throughput benchmark's cost model.

Model states per GPU (mixed-precision Adam, Megatron distributed optimizer; Rajbhandari et al.,
ZeRO, SC'20, Sec. 3: 2 + 2 + 12 bytes per parameter, here with fp32 gradients as Megatron and
verl accumulate them, ``grad_reduce_in_fp32``)::

    params     = P_local * param_bytes                    (bf16: 2)
    grads      = P_local * grad_bytes                     (fp32: 4; bf16 main grads: 2)
    optimizer  = P_dense / DP_dense * (4 + m + v)         (fp32 master + Adam moments, sharded
               + P_expert / DP_expert * (4 + m + v)        over the data-parallel ranks)

with ``P_local`` the parameters on the heaviest pipeline stage: dense weights split by TP,
expert weights by EP x ETP, layers by PP; ``DP_dense = world / (TP * PP)`` (the optimizer is
sharded over data x context parallel ranks) and ``DP_expert = world / (EP * ETP * PP)``.

Activations (rough, bf16, flash attention, sequence parallel; Korthikanti et al., "Reducing
Activation Recomputation in Large Transformer Models", MLSys 2023, Sec. 4, adapted to GQA and
top-k experts): per token and layer ``attn = 4h + 2(q + 2kv) + 2q`` and
``moe = 4h + k(2h + 6m)`` bytes (``dense mlp = 4h + 6I``), all / TP; full recompute keeps only
``2h / TP`` per layer plus one layer; 1F1B keeps PP micro-batches in flight on the first
stage. Logits: ``tokens * V / TP * 8`` (fp32 logits and their gradient).

Phases: during the update, parameters, gradients and optimizer states are on the GPU whatever
the offload settings (verl loads them back); during rollout only what is not offloaded stays,
beside vLLM's ``gpu_memory_utilization`` share.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from rlec.layout import ParallelLayout
from rlec.model_shape import ModelShape

GIB = 1024**3

__all__ = ["GIB", "MemoryEstimate", "TrainingSettings", "estimate_memory"]


@dataclass(frozen=True)
class TrainingSettings:
    """What sets activation memory and state dtypes of the update phase."""

    tokens_per_micro_batch: int
    recompute: str = "none"  # "none", "selective" or "full"
    recompute_modules: tuple[str, ...] = ()
    param_bytes: int = 2
    grad_bytes: int = 4
    adam_moment_bytes: tuple[int, int] = (4, 4)
    master_param_bytes: int = 4


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes per GPU on the heaviest pipeline stage; ``*_total`` are the phase sums."""

    params_local: int
    params: float
    grads: float
    optimizer: float
    activations: float
    logits: float
    train_total: float
    rollout_resident: float
    rollout_share: float
    rollout_total: float
    vllm_weights: float
    kv_cache: float
    kv_bytes_per_token: float
    notes: tuple[str, ...] = field(default_factory=tuple)

    def as_gib(self) -> dict[str, float]:
        """The byte figures in GiB, rounded to 0.1."""
        return {
            k: round(v / GIB, 1) for k, v in self.__dict__.items() if isinstance(v, float) and k != "kv_bytes_per_token"
        }


def _stage_layers(shape: ModelShape, layout: ParallelLayout) -> list[int]:
    if layout.pp == 1:
        return [shape.num_layers]
    first, last = layout.first_stage_layers, layout.last_stage_layers
    middle_stages = layout.pp - (first is not None) - (last is not None)
    rest = shape.num_layers - (first or 0) - (last or 0)
    per_middle = math.ceil(rest / middle_stages) if middle_stages else 0
    stages = [per_middle] * layout.pp
    if first is not None:
        stages[0] = first
    if last is not None:
        stages[-1] = last
    return stages


def _activation_bytes_per_token_layer(shape: ModelShape, settings: TrainingSettings) -> float:
    h = shape.hidden_size
    q, kv = shape.num_attention_heads * shape.head_dim, shape.num_kv_heads * shape.head_dim
    norms = 4 * h
    attn = 2 * (q + 2 * kv) + 2 * q
    if shape.num_experts:
        k, m = shape.experts_per_token, shape.moe_intermediate_size
        mlp = k * (2 * h + 6 * m) - (2 * k * m if "moe_act" in settings.recompute_modules else 0)
    else:
        mlp = 6 * shape.intermediate_size - (2 * shape.intermediate_size if "mlp" in settings.recompute_modules else 0)
    if "layernorm" in settings.recompute_modules:
        norms = 2 * h
    return norms + attn + norms + mlp


def estimate_memory(
    shape: ModelShape, layout: ParallelLayout, settings: TrainingSettings, gpu_bytes: float
) -> MemoryEstimate:
    """Estimate per-GPU memory of both phases of a colocated verl step (see the module docstring).

    Args:
        shape: the model.
        layout: parallel sizes and offload flags; sizes are assumed valid (``config_check``
            tests divisibility first).
        settings: tokens per micro-batch and per GPU (before context parallel), recompute and dtypes.
        gpu_bytes: memory of one GPU in bytes (vLLM's share is a fraction of it).

    Returns:
        A :class:`MemoryEstimate`. Activation and KV figures are estimates (+-30%); state figures
        are exact counts times dtype sizes.

    Raises:
        ZeroDivisionError: a parallel size of 0.
    """
    tp, pp, ep, etp = layout.tp, layout.pp, layout.ep, layout.expert_tp
    stages = _stage_layers(shape, layout)
    moe_fraction = shape.moe_layers / shape.num_layers
    per_layer_dense = shape.attention_params / tp + shape.replicated_layer_params
    per_layer_dense += (1 - moe_fraction) * shape.dense_mlp_params / tp
    per_layer_expert = moe_fraction * (shape.num_experts / ep) * shape.expert_params / etp
    out_params = 0 if (shape.tie_word_embeddings and pp == 1) else shape.embedding_params
    best = None
    for i, n_layers in enumerate(stages):
        dense = n_layers * per_layer_dense
        dense += shape.embedding_params / tp if i == 0 else 0
        dense += (out_params / tp + shape.hidden_size) if i == pp - 1 else 0
        expert = n_layers * per_layer_expert
        if best is None or dense + expert > best[0] + best[1]:
            best = (dense, expert, n_layers, i)
    dense, expert, n_layers, stage = best
    dp_dense = layout.world // (tp * pp)
    dp_expert = layout.world // (ep * etp * pp)
    state_bytes = settings.master_param_bytes + sum(settings.adam_moment_bytes)
    if layout.distributed_optimizer:
        optimizer = (dense / dp_dense + expert / dp_expert) * state_bytes
    else:
        optimizer = (dense + expert) * state_bytes
    optimizer *= 1.0 - layout.optimizer_cpu_fraction
    params = (dense + expert) * settings.param_bytes
    grads = (dense + expert) * settings.grad_bytes

    tokens = settings.tokens_per_micro_batch / layout.cp
    per_token_layer = _activation_bytes_per_token_layer(shape, settings) / tp
    in_flight = pp if pp > 1 else 1
    if settings.recompute == "full":
        activations = tokens * (2 * shape.hidden_size / tp * n_layers * in_flight + per_token_layer)
    else:
        activations = tokens * per_token_layer * n_layers * in_flight
    logits = tokens * shape.vocab_size / tp * 8 if stage == pp - 1 else 0.0
    train_total = params + grads + optimizer + activations + logits

    resident = 0.0 if layout.param_offload else params + grads
    resident += 0.0 if layout.optimizer_offload else optimizer
    share = layout.rollout_gpu_memory_utilization * gpu_bytes
    expert_split = layout.rollout_ep if layout.rollout_ep > 1 else layout.rollout_tp
    total_expert = shape.moe_layers * shape.num_experts * shape.expert_params
    embeddings = shape.embedding_params * (1 if shape.tie_word_embeddings else 2)  # stay bf16 under FP8
    linear_dense = shape.total_params() - total_expert - embeddings
    vllm_weights = (
        (linear_dense / layout.rollout_tp + total_expert / expert_split) * layout.rollout_weight_bytes
        + embeddings / layout.rollout_tp * 2
    )
    kv_heads_per_gpu = max(1, shape.num_kv_heads // layout.rollout_tp)
    kv_per_token = 2 * shape.num_layers * kv_heads_per_gpu * shape.head_dim * 2
    kv_cache = max(0.0, share - vllm_weights - 0.05 * gpu_bytes)  # ~5% for vLLM activations, CUDA graphs
    notes = ()
    if settings.recompute == "selective" and not settings.recompute_modules:
        notes = ("selective recompute without modules is counted as no recompute",)
    return MemoryEstimate(
        params_local=int(dense + expert),
        params=float(params),
        grads=float(grads),
        optimizer=float(optimizer),
        activations=float(activations),
        logits=float(logits),
        train_total=float(train_total),
        rollout_resident=float(resident),
        rollout_share=float(share),
        rollout_total=float(resident + share),
        vllm_weights=float(vllm_weights),
        kv_cache=float(kv_cache),
        kv_bytes_per_token=float(kv_per_token),
        notes=notes,
    )
