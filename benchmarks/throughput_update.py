"""Update-throughput worker of ``benchmarks/throughput.py``: one torchrun launch, one or more layouts.

    torchrun --nproc_per_node W benchmarks/throughput_update.py SPEC.json OUT.json

Every layout in ``SPEC["layouts"]`` must use all W processes (they share one launch: on 2 shared
cores, importing torch + Megatron + mbridge costs ~20 CPU-seconds per process, more than the
measurement). Between layouts Megatron's parallel state is rebuilt on the same process group.

Per (layout, precision, logits variant) it times, with barriers (and CUDA synchronisation) around
each part so the slowest rank sets the time, the pieces of a Megatron PPO update (the order verl's Megatron
actor runs them; :mod:`rlec.megatron.training`):

- ``logprob_s``: ``rlec.megatron.compute_log_probs`` (verl's ``old_log_prob`` phase, no grad);
- ``fwd_bwd_s``: ``rlec.megatron.forward_backward`` with verl's ``vanilla`` policy loss
  (:func:`policy_loss_fn`, normalised as verl's Megatron engine does): Megatron schedule, DDP,
  ``finalize_model_grads``;
- ``optimizer_s``: ``optimizer.step()`` (Megatron Adam, grad clipping).

Logits variants: ``full`` (vocabulary projection on every position, as verl's Megatron actor
does and as verl's FLOPs formula counts) and ``window`` (``logit_window`` = response length, as
verl's trainer on CPU does with rlec's ``response_only_logits`` shim; not applicable when the output layer runs sequence parallel, i.e. TP > 1).
Rank 0 writes OUT.json (atomically) with one record per measurement; a failing measurement is
recorded with its error and the others still run.
"""

from __future__ import annotations

import gc
import json
import os
import statistics
import sys
import time
import traceback
import warnings
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
warnings.filterwarnings("ignore")

FP8_OVERRIDES = {"fp8": "e4m3", "fp8_recipe": "blockwise", "moe_router_padding_for_fp8": True}
# what megatron_configs/layout/*.yaml set for the GPU model (router in fp32, alltoall dispatcher)
GPU_OVERRIDES = {"moe_token_dispatcher_type": "alltoall", "moe_router_dtype": "fp32"}


def summarize(values: list[float]) -> dict[str, Any]:
    """Median, min, max and relative spread ((max - min) / median) of repeated timings in seconds."""
    med = statistics.median(values)
    return {"median": med, "min": min(values), "max": max(values), "spread": (max(values) - min(values)) / med if med else 0.0,
            "values": values}


def _sync() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()
    torch.distributed.barrier()


def _timed(fn: Any) -> float:
    """Seconds of ``fn()`` on the slowest rank."""
    import torch

    _sync()
    start = time.perf_counter()
    fn()
    _sync()
    elapsed = torch.tensor([time.perf_counter() - start], dtype=torch.float64)
    torch.distributed.all_reduce(elapsed, op=torch.distributed.ReduceOp.MAX)
    return float(elapsed)


def _peak_memory_bytes() -> int:
    """Peak GPU memory allocated (since the last reset), else the process's peak RSS; max over ranks."""
    import resource

    import torch

    value = torch.cuda.max_memory_allocated() if torch.cuda.is_available() else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    t = torch.tensor([value], dtype=torch.float64)
    torch.distributed.all_reduce(t, op=torch.distributed.ReduceOp.MAX)
    return int(t)


def make_batch(spec: dict[str, Any], seed: int) -> dict[str, Any]:
    """The fixed global batch: ``batch`` rows of ``prompt_len + response_len`` random token ids
    (every token valid), advantages +-1 per row, loss mask on the response."""
    import torch

    g = torch.Generator().manual_seed(seed)
    b, p, r = int(spec["batch"]), int(spec["prompt_len"]), int(spec["response_len"])
    ids = torch.randint(0, int(spec["vocab_size"]), (b, p + r), generator=g)
    resp = torch.zeros(b, p + r)
    resp[:, p:] = 1.0
    adv = (torch.randint(0, 2, (b, 1), generator=g).float() * 2 - 1) * resp
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "loss_mask": resp, "advantages": adv}


def policy_loss_fn(config: Any, num_micro_batches: int, dp_size: int, global_tokens: int,
                   global_sequences: int) -> Callable[[Any, dict[str, Any]], tuple[Any, dict[str, Any]]]:
    """The configured verl policy loss on one Megatron micro-batch, normalised as verl's Megatron engine does.

    ``config.global_batch_info`` gives ``agg_loss`` the mini-batch's token and sequence counts over all
    data-parallel ranks (token-mean divides by the global token count and multiplies by ``dp_size``: DDP
    averages over DP ranks); the result is multiplied by the number of micro-batches because Megatron's
    schedule divides each micro-batch loss by it (``verl/workers/engine/megatron/transformer_impl.py``,
    ``postprocess_micro_batch_func``).

    Args:
        config: verl's actor config (:func:`rlec.verl_plugin.typed_config.actor_config`).
        num_micro_batches: micro-batches of this rank in the mini-batch.
        dp_size: data-parallel size.
        global_tokens, global_sequences: response tokens and non-empty responses of the whole mini-batch.

    Returns:
        ``loss_fn(log_probs, micro_batch) -> (loss, metrics)`` for :func:`rlec.megatron.training.forward_backward`.
    """
    import torch
    from verl.trainer.ppo.core_algos import get_policy_loss_fn

    config.global_batch_info.update({"dp_size": dp_size, "batch_num_tokens": global_tokens,
                                     "global_batch_size": global_sequences, "loss_scale_factor": config.loss_scale_factor})
    loss = get_policy_loss_fn(config.policy_loss.get("loss_mode", "vanilla"))

    def loss_fn(log_probs: torch.Tensor, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, Any]]:
        value, metrics = loss(old_log_prob=batch["old_log_probs"], log_prob=log_probs, advantages=batch["advantages"],
                              response_mask=batch["loss_mask"].bool(), loss_agg_mode=config.loss_agg_mode, config=config,
                              rollout_is_weights=None)
        return value * num_micro_batches, metrics

    return loss_fn


def measure(policy: Any, optimizer: Any, batch: dict[str, Any], spec: dict[str, Any], window: int | None) -> dict[str, Any]:
    """Warm-up, then timed repeats of log-prob forward, forward-backward and optimizer step."""
    import math

    from rlec.config import CPU_LAYOUT, compose
    from rlec.verl_plugin.typed_config import actor_config
    from rlec.megatron.logprobs import compute_log_probs
    from rlec.megatron.parallel import data_parallel_rank_and_size
    from rlec.megatron.training import forward_backward

    dp_rank, dp = data_parallel_rank_and_size()
    n = batch["input_ids"].shape[0]
    if n % dp:
        raise ValueError(f"batch of {n} rows does not split over {dp} data-parallel ranks")
    rows = slice(dp_rank * n // dp, (dp_rank + 1) * n // dp)
    ids, attn = batch["input_ids"][rows], batch["attention_mask"][rows]
    mbs = int(spec["micro_batch_size"])
    # the recipe's policy loss (the precision overlay changes no loss key; verl's engine dataclass refuses fp32 here)
    config = actor_config(compose([f"layout={CPU_LAYOUT}"]))
    loss_mask = batch["loss_mask"]
    loss_fn = policy_loss_fn(config, math.ceil(ids.shape[0] / mbs), dp, int(loss_mask.sum()), int((loss_mask.sum(dim=1) > 0).sum()))
    parts: dict[str, list[float]] = {"logprob_s": [], "fwd_bwd_s": [], "optimizer_s": []}
    box: dict[str, Any] = {}
    for i in range(int(spec["warmup"]) + int(spec["repeats"])):
        def logprob() -> None:
            box["old"] = compute_log_probs(policy, ids, attn, micro_batch_size=mbs, logit_window=window)

        def fwd_bwd() -> None:
            extra = {"loss_mask": batch["loss_mask"][rows], "advantages": batch["advantages"][rows], "old_log_probs": box["old"]}
            box["result"] = forward_backward(policy, ids, attn, loss_fn, extra=extra, micro_batch_size=mbs, logit_window=window)

        times = {"logprob_s": _timed(logprob)}
        optimizer.zero_grad()
        times["fwd_bwd_s"] = _timed(fwd_bwd)
        times["optimizer_s"] = _timed(lambda: box.setdefault("step", []).append(optimizer.step()))
        if i >= int(spec["warmup"]):
            for key, value in times.items():
                parts[key].append(value)
    update_ok, grad_norm, _ = box["step"][-1]
    step = [a + b for a, b in zip(parts["fwd_bwd_s"], parts["optimizer_s"])]
    return {**{k: summarize(v) for k, v in parts.items()}, "update_s": summarize(step),
            "loss": box["result"].loss, "grad_norm": None if grad_norm is None else float(grad_norm), "update_applied": bool(update_ok)}


def run(spec: dict[str, Any]) -> list[dict[str, Any]]:
    """All measurements of ``spec`` (see the module docstring); every rank returns the records."""
    import torch

    from rlec.megatron import build_model, build_optimizer
    from rlec.megatron.parallel import ParallelLayout, destroy_parallel, init_parallel

    world = int(os.environ.get("WORLD_SIZE", "1"))
    has_weights = bool(spec.get("load_weights", True)) and any(Path(spec["model"]).glob("*.safetensors"))
    records = []
    for lay in spec["layouts"]:
        layout = ParallelLayout(tp=lay["tp"], ep=lay["ep"], etp=lay.get("etp"), pp=lay.get("pp", 1), world_size=world)
        destroy_parallel(process_group=False)
        init_parallel(layout, seed=int(spec["seed"]))
        batch = make_batch(spec, int(spec["seed"]))
        for precision in spec["precisions"]:
            overrides = dict(GPU_OVERRIDES) if torch.cuda.is_available() else {}
            if precision == "fp8":
                overrides.update(FP8_OVERRIDES)
            policy = optimizer = None
            try:
                policy = build_model(spec["model"], layout, load_weights=has_weights, wrap_ddp=True, config_overrides=overrides or None,
                                     use_te=spec.get("use_te"))
                optimizer = build_optimizer(policy, lr=1e-6, clip_grad=1.0)
                sequence_parallel = bool(policy.config.sequence_parallel)
                for variant in lay.get("variants", ["full"]):
                    rec = {"layout": lay["name"], "layout_sizes": layout.as_dict(), "precision": precision, "logits": variant,
                           "dtype": str(policy.dtype).replace("torch.", ""), "layer_spec": "te" if policy.use_te else "local",
                           "sequence_parallel": sequence_parallel, "weights": "loaded" if has_weights else "random init"}
                    if variant == "window" and sequence_parallel:
                        records.append({**rec, "skipped": "logit_window is not applied when the output layer runs "
                                                          "sequence parallel (TP > 1): same work as 'full'"})
                        continue
                    window = int(spec["response_len"]) if variant == "window" else None
                    if torch.cuda.is_available():
                        torch.cuda.reset_peak_memory_stats()  # per variant (model + optimizer states included)
                    _log(f"[update] {lay['name']} {precision} logits={variant}: {spec['warmup']} warm-up + {spec['repeats']} repeats")
                    try:
                        rec.update(measure(policy, optimizer, batch, spec, window))
                    except Exception as exc:  # record and go on with the other measurements
                        rec["error"] = f"{type(exc).__name__}: {exc}"
                        _log(traceback.format_exc())
                    rec["peak_memory_bytes"] = _peak_memory_bytes()
                    records.append(rec)
            except Exception as exc:
                records.append({"layout": lay["name"], "layout_sizes": layout.as_dict(), "precision": precision,
                                "logits": "all", "error": f"{type(exc).__name__}: {exc}"})
                _log(traceback.format_exc())
            del policy, optimizer
            gc.collect()
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
    return records


def _log(message: str) -> None:
    if int(os.environ.get("RANK", "0")) == 0:
        print(message, file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    spec = json.loads(Path(argv[0]).read_text())
    from rlec.megatron.parallel import destroy_parallel, init_distributed

    init_distributed()
    try:
        records = run(spec)
    finally:
        destroy_parallel()
    if int(os.environ.get("RANK", "0")) == 0:
        from rlec.io import atomic_write_text

        atomic_write_text(argv[1], json.dumps(records, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
