"""An induced train-inference mismatch for the CPU rollout ``rlec_hf``, and the router disagreement it causes.

On CPU the rollout and the trainer run the same fp32 weights through the same maths: the rollout's log-probs
equal the trainer's old log-probs within fp32 tolerance and the routers choose the same experts (issue 32,
``tests/verl_plugin/test_cpu_rollout.py``, ``tests/megatron/test_router_routes.py``), so rollout correction
and routing replay have nothing to correct. On GPUs the two differ (vLLM's kernels and BF16 / FP8 against
Megatron's): the R3 paper (arXiv 2510.11370) measures a train-inference KL of 1.5e-3 and ~10 % of router
choices differing on Qwen3-30B-A3B. To show the effect of the corrections on CPU, ``rlec.cpu.rollout_weight_noise``
= sigma > 0 perturbs the rollout's copy of the weights after every weight sync (and at start-up):

    W_rollout = W + sigma * rms(W) * eps,   eps ~ N(0, 1), seeded by (rlec.cpu.rollout_noise_seed, sync count)

for every floating tensor W (rms = sqrt(mean(W^2)), so the noise is relative to each tensor's scale and
layer-norm gains are perturbed too). The rollout server keeps the exact synced weights beside the
perturbed copy and, for each response, compares the experts the rollout's routers chose with those the
exact weights' routers choose for the same tokens (:func:`router_disagreement`): the trainer's router on
the trainer's weights, since the HF router equals Megatron's for the same weights (the tests above).
The share reaches the step's metrics as ``rlec/router_disagreement`` (:func:`disagreement_metrics`, read from the
step's TransferQueue batch by :func:`step_router_disagreement`).

Functions of tensors and plain values (no verl, no Ray); :func:`step_router_disagreement` reads TransferQueue.
"""

from __future__ import annotations

import hashlib
from typing import Any, Iterable, Mapping

import numpy as np
import torch

__all__ = ["DIFF_FIELD", "DISAGREEMENT_KEY", "TOTAL_FIELD", "disagreement_metrics", "perturb_weights", "router_disagreement",
           "step_router_disagreement"]

# per-response counts the rollout server puts into TokenOutput.extra_fields (they reach TransferQueue's extra_fields)
DIFF_FIELD = "rlec_router_diff"
TOTAL_FIELD = "rlec_router_total"
DISAGREEMENT_KEY = "rlec/router_disagreement"


def _seed(seed: int, version: int) -> int:
    text = f"rlec-rollout-noise/{int(seed)}/{int(version)}"
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big") >> 1


def perturb_weights(model: torch.nn.Module, scale: float, seed: int, version: int) -> int:
    """Add ``scale * rms(W) * N(0, 1)`` noise to every floating parameter ``W`` of ``model``, in place.

    Args:
        model: the rollout's model (its parameters are changed).
        scale: sigma, the noise's standard deviation relative to each tensor's RMS (>= 0; 0 changes nothing).
        seed: ``rlec.cpu.rollout_noise_seed``.
        version: the weight sync count (0 at start-up): each sync gets fresh noise, the same in every run.

    Returns:
        The number of tensors perturbed (0 when ``scale`` is 0).

    Raises:
        ValueError: a negative or non-finite ``scale``.
    """
    if not (np.isfinite(scale) and scale >= 0):
        raise ValueError(f"rollout weight noise must be a finite relative scale >= 0, got {scale!r}")
    if scale == 0:
        return 0
    gen = torch.Generator().manual_seed(_seed(seed, version))
    count = 0
    with torch.no_grad():
        for _, param in sorted(model.named_parameters(), key=lambda item: item[0]):  # a fixed order: the same draws
            if not param.is_floating_point():
                continue
            rms = param.detach().float().pow(2).mean().sqrt()
            noise = torch.randn(param.shape, generator=gen, dtype=torch.float32)
            param.add_((noise * (float(scale) * rms)).to(param.dtype))
            count += 1
    return count


def router_disagreement(rollout_routes: np.ndarray, train_routes: np.ndarray) -> tuple[int, int]:
    """How many token-layer top-k sets differ between two routings of the same tokens.

    Args:
        rollout_routes: int ``(tokens, layers, top_k)``, the experts the rollout's routers chose (verl's
            ``routed_experts`` layout); the order within a top-k does not matter.
        train_routes: the same shape, the training router's choices for the same tokens.

    Returns:
        ``(differing, total)``: token-layer pairs whose expert sets differ, and ``tokens x layers``.

    Raises:
        ValueError: different shapes, or not 3-dimensional.
    """
    a, b = np.asarray(rollout_routes), np.asarray(train_routes)
    if a.shape != b.shape or a.ndim != 3:
        raise ValueError(f"routes must both be (tokens, layers, top_k), got {a.shape} and {b.shape}")
    differ = np.any(np.sort(a, axis=-1) != np.sort(b, axis=-1), axis=-1)
    return int(differ.sum()), int(differ.size)


def disagreement_metrics(extra_fields: Iterable[Mapping[str, Any]]) -> dict[str, float]:
    """The step's router disagreement from its responses' ``extra_fields``: sum of differing / sum of total.

    Returns:
        ``{DISAGREEMENT_KEY: share in [0, 1]}``, or ``{}`` when no response carries the counts (no induced
        mismatch: the rollout and the trainer route identically, nothing was compared).
    """
    diff = total = 0
    for fields in extra_fields:
        if isinstance(fields, Mapping) and fields.get(TOTAL_FIELD) is not None:
            diff += int(fields[DIFF_FIELD])
            total += int(fields[TOTAL_FIELD])
    return {DISAGREEMENT_KEY: diff / total} if total else {}


def step_router_disagreement(batch: Any, settings: Any) -> dict[str, float]:
    """``rlec/router_disagreement`` of the step's non-padding responses, from their TransferQueue ``extra_fields``
    (:func:`disagreement_metrics`); ``{}`` without an induced mismatch (``rlec.cpu.rollout_weight_noise`` = 0: the
    rollout server compared no routers). One of :data:`rlec.verl_plugin.mismatch.STEP_METRICS` on the CPU platform
    (:mod:`rlec.cpu` registers it), called by the mismatch alarm before the actor update.

    Args:
        batch: verl's step batch (TransferQueue keys, partition id and tags).
        settings: the run's :class:`rlec.settings.RlecSettings`.
    """
    if not settings.cpu.rollout_weight_noise > 0:
        return {}
    import transfer_queue as tq

    data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=["extra_fields"])
    column = data["extra_fields"]
    rows = [getattr(item, "data", item) for item in (column.tolist() if hasattr(column, "tolist") else list(column))]
    keep = [row for row, tag in zip(rows, batch.tags, strict=True) if not tag.get("is_padding", False)]
    return disagreement_metrics(keep)
