"""Projected cost of an RLEC step for a model shape and a parallel layout: FLOPs, EP traffic, tokens/s.

Pure arithmetic, no GPU, no torch (memory comes from :mod:`rlec.rules.memory`). Used by
``benchmarks/throughput.py`` to print projections for the committed layouts next to published
anchors. Every projection is an ideal-case figure under the stated :class:`Assumptions`.

FLOPs (verl's formula, ``verl/utils/flops_counter.py``, ``_estimate_qwen2_moe_flops``, which verl
0.9.1 uses for ``qwen3_moe``: top-k experts only, the router, Q/K/V/O, embedding and output
layer counted as matmuls, and full-sequence attention), for ``T`` tokens in sequences ``s_i``::

    N      = L (3 h k m + h E + h (q + 2 kv + q)) + 2 V h          (q = heads x head_dim)
    train  = 6 N T + 6 (sum_i s_i^2) head_dim heads L              (forward + backward)
    fwd    = train / 3                                             (log-prob forward, prefill)

Kaplan et al. 2020 ("Scaling Laws for Neural Language Models", Sec. 2.1) is the source of the
2-forward / 4-backward FLOPs per parameter and token. verl counts the vocabulary projection on
every token; with a logit window (``rlec.megatron.compute_log_probs(..., logit_window=K)``) only
``K`` positions per row run it, which :func:`train_flops` can count instead.

Decode (vLLM, one replica of ``rollout_tp x rollout_dp`` GPUs) is a roofline: each decode step
reads the dense weights, the experts touched by the batch (``1 - (1 - k/E)^B`` of them, uniform
routing) and the KV cache of all ``B`` running sequences; it takes
``max(bytes / (bandwidth x efficiency), FLOPs / (peak x mfu))`` (Williams et al., "Roofline",
CACM 2009). A synchronous step's generation lasts as long as each vLLM wave's longest response
(``longest_response_tokens`` decode steps per wave of ``B`` sequences), not its mean: the batch
drains while the last responses finish, and a memory-bound decode step costs about the same at a
small batch (weights dominate the bytes). EP all-to-all: every MoE layer sends each token's hidden state to its ``k`` experts
and back (dispatch + combine), a share ``(EP - 1) / EP`` of it to other GPUs, in three passes per
step (log-prob forward, update forward, update backward).

Calibration against the published anchors (:data:`ANCHORS`, FACTS.md "Throughput anchors";
:func:`anchor_comparison` prints each beside the projected row with the ratio). Without the long
tail (decode for the mean response only) the 4x8 H100 projection was 3,117 RL tokens/s/GPU,
2.8x NeMo-RL's measured 1,102, with generation 53% of the step against verl's measured 70%. The
assumption that explains most of it is that ideal decode: counting each wave's longest response
(4,096 tokens, the committed ``data.max_response_length``) gives 1,687 tokens/s/GPU (1.5x the
anchor) and a generation share of 74% (verl: 70%). The remaining 1.5x is not attributable from
published figures (NeMo-RL gives no per-phase split; its batch and generation layout differ):
an RL update below pretraining's MFU (ragged lengths, the reference-policy forward), the weight
sync and reward that are not modelled, and expert load imbalance. The projection stays an upper
bound; the printed ratio says by how much.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Sequence

from rlec.layout import ParallelLayout
from rlec.rules.memory import GIB, MemoryEstimate
from rlec.model_shape import ModelShape

__all__ = ["ANCHORS", "DEVICES", "Assumptions", "Device", "FlopCount", "anchor_comparison", "decode_roofline",
           "ep_alltoall_bytes", "project_step", "train_flops", "verl_flops_params"]

ANCHORS = [  # published, none measured here (/shared FACTS.md "Throughput anchors"); key = the projected field compared
    {"name": "NeMo-RL v0.6 GRPO Qwen3-30B-A3B, 32 H100 BF16 (gen TP2, train EP8), max len 4096", "key": "tokens_per_s_per_gpu",
     "metric": "RL step tokens/s/GPU", "value": 1102.0, "device": "H100", "gpus": 32,
     "note": "192 s/step on-policy; 1,414 with 1-step off-policy"},
    {"name": "verl fully-async doc, Qwen3-30B-A3B-Base, 128 H20, n=16, batch 512, 8k response", "key": "generation_share",
     "metric": "generation share of step time", "value": 0.70, "device": "H20", "gpus": 128,
     "note": "498 s/step: generation 348 s, actor update 86 s"},
    {"name": "Megatron-Bridge pretraining Qwen3-30B-A3B, 16 H100 FP8, seq 4096", "key": "update_tflops_per_gpu",
     "metric": "update TFLOP/s/GPU", "value": [203.0, 241.0], "device": "H100", "gpus": 16, "note": "8.8-10.5k tokens/s/GPU"},
    {"name": "vLLM Qwen3-30B-A3B on 2 H100 (EP2, ~920-token outputs)", "key": "rollout_peak_tokens_per_s_per_gpu",
     "metric": "rollout output tokens/s/GPU", "value": 6300.0, "device": "H100", "gpus": 2, "note": "full batch"},
]


@dataclass(frozen=True)
class Device:
    """A GPU: dense BF16 peak (FLOP/s, as verl's ``get_device_flops`` lists it), HBM bandwidth (B/s)."""

    name: str
    peak_flops: float
    hbm_bandwidth: float
    memory_gib: float


DEVICES = {
    # NVIDIA H100 SXM5 / H200 SXM datasheets: 989 TFLOP/s dense BF16; 3.35 / 4.8 TB/s HBM3(e)
    "H100": Device("H100 SXM 80GB", 989e12, 3.35e12, 80),
    "H200": Device("H200 SXM 141GB", 989e12, 4.8e12, 141),
}


@dataclass(frozen=True)
class Assumptions:
    """What the projections assume (printed with every projection; CLI flags change them).

    Attributes:
        update_mfu: model FLOPs utilisation of the Megatron update and log-prob forward, in (0, 1].
            Default 0.20: Megatron-Bridge's Qwen3-30B-A3B pretraining reaches 203-241 TFLOP/s per
            H100 (0.21-0.24 of 989) at fixed length 4096; RL batches have ragged lengths.
        prefill_mfu: utilisation of vLLM's prefill (compute-bound), in (0, 1].
        decode_bandwidth_efficiency: share of HBM bandwidth vLLM's decode achieves, in (0, 1].
        decode_mfu: utilisation when a decode step is compute-bound, in (0, 1].
        max_num_seqs: running sequences per vLLM replica at most (vLLM's ``max_num_seqs``).
        prompt_tokens, response_tokens: mean lengths per response (tokens).
        longest_response_tokens: decode steps of one vLLM wave: its longest response (tokens,
            >= ``response_tokens``). Default 4096, the committed ``data.max_response_length``: in
            a wave of hundreds of sampled responses some reach the cap. Set it to
            ``response_tokens`` for the ideal, tail-free figure.
        alltoall_bandwidth_intra, alltoall_bandwidth_inter: achieved all-to-all bandwidth per GPU
            (bytes/s, one direction) inside a node (NVLink) and across nodes (InfiniBand).
        activation_bytes: bytes per element of the dispatched hidden states (bf16: 2).
    """

    update_mfu: float = 0.20
    prefill_mfu: float = 0.30
    decode_bandwidth_efficiency: float = 0.50
    decode_mfu: float = 0.30
    max_num_seqs: int = 256
    prompt_tokens: int = 512
    response_tokens: int = 1536
    longest_response_tokens: int = 4096
    alltoall_bandwidth_intra: float = 150e9
    alltoall_bandwidth_inter: float = 40e9
    activation_bytes: int = 2

    def as_dict(self) -> dict[str, Any]:
        """Plain dict (for the JSON output)."""
        return asdict(self)


@dataclass(frozen=True)
class FlopCount:
    """FLOPs of one pass over a batch, split as verl's formula adds them up (fwd + bwd unless stated)."""

    linear: float  # attention and expert projections, router (6 N_layers T)
    vocab: float  # embedding + output layer (6 * 2 V h T, or the window's share of the output layer)
    attention: float  # 6 sum(s^2) head_dim heads L

    @property
    def total(self) -> float:
        """All FLOPs."""
        return self.linear + self.vocab + self.attention


def verl_flops_params(shape: ModelShape) -> tuple[int, int]:
    """``(N_layers, N_vocab)``: the parameter counts verl's formula multiplies by 6 T.

    ``N_layers = L (3 h k m + h E + h (2q + 2kv))`` for MoE (``3 h I`` instead of the experts for a
    dense model), ``N_vocab = 2 V h``. Qwen3-30B-A3B: 2,730,491,904 and 622,329,856.
    """
    h, q, kv = shape.hidden_size, shape.num_attention_heads * shape.head_dim, shape.num_kv_heads * shape.head_dim
    attn = h * (2 * q + 2 * kv)
    if shape.num_experts:
        mlp = 3 * h * shape.experts_per_token * shape.moe_intermediate_size + h * shape.num_experts
    else:
        mlp = 3 * h * shape.intermediate_size
    return shape.num_layers * (attn + mlp), 2 * shape.vocab_size * h


def train_flops(shape: ModelShape, seqlens: Sequence[int], logit_tokens: int | None = None) -> FlopCount:
    """Forward + backward FLOPs of a batch of sequences (verl's formula, see the module docstring).

    Args:
        shape: the model.
        seqlens: valid tokens of each sequence (>= 0).
        logit_tokens: positions that run the output layer (a logit window); ``None`` = every
            token, as verl counts. The embedding half of ``N_vocab`` stays counted on every token.

    Returns:
        A :class:`FlopCount`; divide by 3 for a forward pass alone.

    Raises:
        ValueError: a negative length, or ``logit_tokens`` outside ``[0, sum(seqlens)]``.
    """
    if any(s < 0 for s in seqlens):
        raise ValueError(f"sequence lengths must be >= 0, got {list(seqlens)}")
    tokens = sum(seqlens)
    if logit_tokens is not None and not 0 <= logit_tokens <= tokens:
        raise ValueError(f"logit_tokens={logit_tokens} must be within [0, {tokens}]")
    n_layers, n_vocab = verl_flops_params(shape)
    vocab = 6 * n_vocab * tokens
    if logit_tokens is not None:
        vocab = 6 * (n_vocab // 2) * (tokens + logit_tokens)
    attention = 6 * sum(s * s for s in seqlens) * shape.head_dim * shape.num_attention_heads * shape.num_layers
    return FlopCount(linear=6.0 * n_layers * tokens, vocab=float(vocab), attention=float(attention))


def ep_alltoall_bytes(shape: ModelShape, layout: ParallelLayout, tokens: int, activation_bytes: int = 2, passes: int = 3) -> float:
    """Bytes each GPU sends to other GPUs in the MoE all-to-all during one step (uniform routing).

    ``tokens / world`` tokens per GPU (data x tensor parallel under sequence parallelism; a
    pipeline stage holds ``L / PP`` layers of ``PP`` times as many tokens), per MoE layer
    ``2 k h`` elements (dispatch + combine), ``(EP - 1) / EP`` of them remote, ``passes`` times.

    Raises:
        ValueError: ``tokens`` or ``passes`` negative.
    """
    if tokens < 0 or passes < 0:
        raise ValueError(f"tokens and passes must be >= 0, got {tokens}, {passes}")
    if not shape.num_experts or layout.ep == 1:
        return 0.0
    per_token_layer = 2 * shape.experts_per_token * shape.hidden_size * activation_bytes * (layout.ep - 1) / layout.ep
    return tokens / layout.world * shape.moe_layers * per_token_layer * passes


def decode_roofline(shape: ModelShape, layout: ParallelLayout, mem: MemoryEstimate, device: Device, a: Assumptions,
                    sequences: int) -> dict[str, float]:
    """One vLLM replica's decode: batch, step time and output tokens/s per GPU (roofline).

    Args:
        mem: :func:`rlec.rules.memory.estimate_memory` of the layout (vLLM weights and KV cache per GPU).
        sequences: responses this replica has to generate in the step.

    Returns:
        ``batch`` (running sequences), ``kv_capacity_seqs``, ``experts_touched`` (share),
        ``bytes_per_step`` (per GPU), ``step_s``, ``bound`` (1 = memory, 0 = compute),
        ``tokens_per_s_per_gpu``.

    Raises:
        ValueError: the KV cache cannot hold one sequence (the layout is unusable).
    """
    context = a.prompt_tokens + a.response_tokens
    capacity = int(mem.kv_cache // (mem.kv_bytes_per_token * context)) if mem.kv_bytes_per_token else 0
    if capacity < 1:
        raise ValueError(f"KV cache of {mem.kv_cache / GIB:.1f} GiB per GPU cannot hold one {context}-token sequence")
    batch = max(1, min(a.max_num_seqs, capacity, sequences))
    replica_gpus = layout.rollout_tp * layout.rollout_dp
    expert_bytes = shape.moe_layers * shape.num_experts * shape.expert_params * layout.rollout_weight_bytes
    expert_split = layout.rollout_ep if layout.rollout_ep > 1 else layout.rollout_tp
    expert_bytes_gpu = expert_bytes / expert_split
    touched = 1.0 - (1.0 - shape.experts_per_token / shape.num_experts) ** batch if shape.num_experts else 1.0
    dense_bytes_gpu = mem.vllm_weights - expert_bytes_gpu
    mean_context = a.prompt_tokens + a.response_tokens / 2
    # each GPU of the replica holds its heads' KV for every running sequence
    per_gpu = dense_bytes_gpu + touched * expert_bytes_gpu + batch * mean_context * mem.kv_bytes_per_token
    n_layers, n_vocab = verl_flops_params(shape)
    flops = batch * (2 * (n_layers + n_vocab / 2) + 4 * mean_context * shape.head_dim * shape.num_attention_heads * shape.num_layers)
    t_mem = per_gpu / (device.hbm_bandwidth * a.decode_bandwidth_efficiency)
    t_compute = flops / replica_gpus / (device.peak_flops * a.decode_mfu)
    step = max(t_mem, t_compute)
    return {"batch": batch, "kv_capacity_seqs": capacity, "experts_touched": touched, "bytes_per_step": per_gpu,
            "step_s": step, "bound": 1.0 if t_mem >= t_compute else 0.0, "tokens_per_s_per_gpu": batch / step / replica_gpus}


def project_step(shape: ModelShape, layout: ParallelLayout, mem: MemoryEstimate, device: Device, a: Assumptions,
                 responses: int, gpus_per_node: int) -> dict[str, float]:
    """Ideal time of one colocated RL step (rollout, old log-probs, update) and tokens/s per GPU.

    Generation: each vLLM wave lasts ``longest_response_tokens`` decode steps (the long tail, see
    the module docstring). Not modelled: weight sync, reward, data loading, pipeline bubbles, load
    imbalance across experts.

    Args:
        responses: responses per step (``data.train_batch_size x rollout.n``).
        gpus_per_node: for the all-to-all bandwidth (intra- or inter-node EP group).

    Returns:
        Seconds per phase, tokens/s per GPU (verl's ``perf/throughput`` = prompt + response
        tokens / (step time x GPUs)), update and rollout tokens/s per GPU (the rollout's over the
        whole generation, long tail included; ``rollout_peak_...`` at the full decode batch),
        generation share, update TFLOP/s per GPU, FLOPs per token, EP all-to-all bytes per GPU
        and its time.
    """
    seq = a.prompt_tokens + a.response_tokens
    tokens = responses * seq
    per_seq = train_flops(shape, [seq])
    train = per_seq.total * responses
    world = layout.world
    update_s = train / (world * device.peak_flops * a.update_mfu)
    logprob_s = update_s / 3
    replicas = max(1, world // (layout.rollout_tp * layout.rollout_dp))
    per_replica = math.ceil(responses / replicas)
    decode = decode_roofline(shape, layout, mem, device, a, per_replica)
    waves = math.ceil(per_replica / decode["batch"])
    decode_s = waves * max(a.response_tokens, a.longest_response_tokens) * decode["step_s"]
    prefill_s = train_flops(shape, [a.prompt_tokens]).total / 3 * responses / (world * device.peak_flops * a.prefill_mfu)
    rollout_s = decode_s + prefill_s
    a2a = ep_alltoall_bytes(shape, layout, tokens, a.activation_bytes)
    intra = layout.ep * layout.expert_tp <= gpus_per_node
    a2a_s = a2a / (a.alltoall_bandwidth_intra if intra else a.alltoall_bandwidth_inter)
    step_s = rollout_s + logprob_s + update_s
    return {
        "tokens_per_step": tokens, "train_flops_per_token": per_seq.total / seq,
        "rollout_s": rollout_s, "prefill_s": prefill_s, "logprob_s": logprob_s, "update_s": update_s, "step_s": step_s,
        "generation_share": rollout_s / step_s, "tokens_per_s_per_gpu": tokens / (step_s * world),
        "update_tokens_per_s_per_gpu": tokens / ((update_s + logprob_s) * world),
        "rollout_tokens_per_s_per_gpu": responses * a.response_tokens / (decode_s * world),
        "rollout_peak_tokens_per_s_per_gpu": decode["tokens_per_s_per_gpu"], "decode_waves": waves,
        "update_tflops_per_gpu": device.peak_flops * a.update_mfu / 1e12,
        "decode_batch": decode["batch"], "decode_step_ms": decode["step_s"] * 1e3, "decode_memory_bound": decode["bound"],
        "experts_touched": decode["experts_touched"], "kv_capacity_seqs": decode["kv_capacity_seqs"],
        "alltoall_bytes_per_gpu": a2a, "alltoall_s": a2a_s, "alltoall_intra_node": float(intra),
    }


def anchor_comparison(row: dict[str, Any], device: str, gpus: int) -> list[dict[str, Any]]:
    """Each published anchor (:data:`ANCHORS`) beside the projected value it measures, with the ratio.

    Args:
        row: a projection with the anchors' keys (:func:`project_step`'s result).
        device: the row's GPU (``"H100"``, ``"H200"``).
        gpus: the row's number of GPUs.

    Returns:
        One dict per anchor: ``metric``, ``projected``, ``anchor`` (a range's midpoint),
        ``ratio`` (projected / anchor), ``same_setup`` (same GPU and GPU count; otherwise the
        ratio compares different set-ups and says only how far apart they are), ``source``.
    """
    out = []
    for x in ANCHORS:
        if x["key"] not in row:
            continue
        value = x["value"]
        anchor = sum(value) / len(value) if isinstance(value, list) else float(value)
        projected = float(row[x["key"]])
        out.append({"metric": x["metric"], "projected": projected, "anchor": anchor, "ratio": projected / anchor,
                    "same_setup": x["device"] == device and x["gpus"] == gpus, "source": x["name"]})
    return out
