"""The update half of a local step: advantages, batch hand-off, Megatron update, weight sync.

Everything here is verl's or Megatron's own machinery called in the order verl's trainer calls
it; this module only moves tensors between them:

- advantages: verl's registered ``grpo`` estimator with ``norm_adv_by_std_in_grpo=False``;
- old log-probs and the update: ``rlec.megatron.compute_log_probs`` / ``train_step`` (Megatron's
  schedule, DDP and optimizer) with verl's ``vanilla`` policy loss;
- weight sync: ``rlec.megatron.export_hf_weights`` (mbridge) into the HF rollout model.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Callable

import torch

from rlec.local.rollout import RolloutBatch


def mean_only_advantages(batch: RolloutBatch, scores: list[float]) -> tuple[torch.Tensor, torch.Tensor]:
    """Token-level rewards and verl's mean-only GRPO advantages.

    The outcome reward sits on each response's last counted token (verl's convention).

    Returns:
        ``(token_level_rewards, advantages)``, both (B, R) float32.
    """
    from verl.trainer.ppo.core_algos import get_adv_estimator_fn

    mask = batch.response_mask
    last = (mask.sum(dim=1).long() - 1).clamp(min=0)
    rewards = torch.zeros_like(mask)
    rewards[torch.arange(len(scores)), last] = torch.tensor(scores, dtype=mask.dtype)
    advantages, _ = get_adv_estimator_fn("grpo")(
        token_level_rewards=rewards, response_mask=mask, index=batch.group_index, norm_adv_by_std_in_grpo=False
    )
    return rewards, advantages


def make_payload(batch: RolloutBatch, scores: list[float], infos: list[dict[str, Any]]) -> dict[str, Any]:
    """What rank 0 hands every rank after rollout and scoring (tensors + per-sample infos)."""
    _, advantages = mean_only_advantages(batch, scores)
    lengths = batch.response_mask.sum(dim=1)
    prompt_lengths = batch.attention_mask[:, : batch.prompts.shape[1]].sum(dim=1)
    rollout_metrics = {
        "response_length/mean": float(lengths.mean()),
        "response_length/clip_ratio": sum(f == "length" for f in batch.finish_reasons) / len(batch.finish_reasons),
        "prompt_length/mean": float(prompt_lengths.float().mean()),
        "rollout/tokens_per_s": batch.response_tokens / max(batch.gen_seconds, 1e-9),
        "critic/advantages/abs_mean": float((advantages.abs() * batch.response_mask).sum() / batch.response_mask.sum()),
    }
    return {
        "input_ids": batch.input_ids,
        "attention_mask": batch.attention_mask,
        "response_mask": batch.response_mask,
        "advantages": advantages,
        "infos": infos,
        "rollout_metrics": rollout_metrics,
    }


def broadcast(payload: dict[str, Any] | None) -> dict[str, Any]:
    """Rank 0's payload on every rank (pickled over the default process group)."""
    if not torch.distributed.is_initialized() or torch.distributed.get_world_size() == 1:
        assert payload is not None
        return payload
    box = [payload]
    torch.distributed.broadcast_object_list(box, src=0)
    return box[0]


def update_policy(policy: Any, optimizer: Any, payload: dict[str, Any], cfg: Any, loss_factory: Callable[..., Any]) -> dict[str, float]:
    """Old log-probs, then one optimizer step on this data-parallel rank's slice of the batch.

    Args:
        policy, optimizer: from ``rlec.megatron.build_model`` / ``build_optimizer``.
        payload: :func:`make_payload`'s dict (the whole global batch).
        cfg: the local-run config (``actor.*``, ``rollout.temperature``).
        loss_factory: ``(cfg, num_micro_batches, dp_size, global_tokens) -> loss_fn``.

    Returns:
        ``actor/pg_loss``, ``actor/grad_norm`` and the loss function's metrics, averaged over the
        data-parallel ranks (equal on every rank).

    Raises:
        ValueError: the batch does not split evenly over the data-parallel ranks.
    """
    from megatron.core import parallel_state as mpu

    from rlec.megatron.logprobs import compute_log_probs
    from rlec.megatron.training import train_step

    dp, dp_rank = mpu.get_data_parallel_world_size(), mpu.get_data_parallel_rank()
    n = payload["input_ids"].shape[0]
    if n % dp:
        raise ValueError(f"batch of {n} responses does not split over {dp} data-parallel ranks: "
                         "make rollout.prompts_per_step x rollout.n a multiple of the DP size")
    rows = slice(dp_rank * n // dp, (dp_rank + 1) * n // dp)
    ids, attn = payload["input_ids"][rows], payload["attention_mask"][rows]
    resp_mask, adv = payload["response_mask"][rows], payload["advantages"][rows]
    prompt_width = ids.shape[1] - resp_mask.shape[1]
    zeros = torch.zeros(ids.shape[0], prompt_width)
    mbs = int(cfg.actor.micro_batch_size)
    temperature = float(cfg.rollout.temperature)
    # only the response's log-probs matter: the vocabulary projection runs on those positions only
    window = resp_mask.shape[1]
    old = compute_log_probs(policy, ids, attn, micro_batch_size=mbs, temperature=temperature, logit_window=window)
    extra = {
        "loss_mask": torch.cat([zeros, resp_mask], dim=1),
        "advantages": torch.cat([zeros, adv], dim=1),
        "old_log_probs": old,
    }
    global_tokens = int(payload["response_mask"].sum())
    loss_fn = loss_factory(cfg, math.ceil(ids.shape[0] / mbs), dp, global_tokens)
    result = train_step(policy, optimizer, ids, attn, loss_fn, extra=extra, micro_batch_size=mbs, temperature=temperature,
                        logit_window=window)
    # result.loss is this rank's mean over micro-batches of loss_fn's value, i.e. (this rank's
    # token sum / global tokens) x dp_size: its mean over DP ranks is the global token-mean loss
    metrics = {"actor/pg_loss": result.loss, **{k: v for k, v in result.metrics.items() if k != "loss"}}
    metrics = _dp_mean(metrics)
    metrics["actor/grad_norm"] = float("nan") if result.grad_norm is None else result.grad_norm
    metrics["actor/update_applied"] = float(result.update_successful)
    return metrics


def _dp_mean(values: dict[str, float]) -> dict[str, float]:
    from megatron.core import parallel_state as mpu

    if mpu.get_data_parallel_world_size() == 1:
        return values
    keys = sorted(values)
    t = torch.tensor([values[k] for k in keys], dtype=torch.float64)
    torch.distributed.all_reduce(t, group=mpu.get_data_parallel_group())
    t /= mpu.get_data_parallel_world_size()
    return dict(zip(keys, t.tolist()))


@torch.no_grad()
def sync_weights(policy: Any, rollout_model: torch.nn.Module | None, check_index: int = 0) -> bool:
    """Export the Megatron weights (mbridge) into the HF rollout model; every rank calls this.

    Rank 0 (the one holding ``rollout_model``) then compares one exported tensor, chosen by
    ``check_index`` among the sorted names, with the rollout model's own copy of it.

    Returns:
        True on ranks without a rollout model; on rank 0, whether the checked tensor is
        bit-identical.
    """
    from rlec.megatron.hf_sync import load_into_hf_model, model_to_hub_state
    from rlec.megatron.model import export_hf_weights

    exported = {}
    for name, tensor in export_hf_weights(policy):  # every rank joins the gathers
        if rollout_model is not None:
            exported[name] = tensor.detach().to("cpu", torch.float32, copy=True)
    if rollout_model is None:
        return True
    load_into_hf_model(rollout_model, exported)
    name = sorted(exported)[check_index % len(exported)]
    hub = model_to_hub_state(rollout_model, {k: v for k, v in rollout_model.state_dict().items()})
    return bool(torch.equal(hub[name].float(), exported[name]))


def save_hf(model: torch.nn.Module, tokenizer: Any, folder: Path) -> Path:
    """Save the rollout model (= the trained policy after the last sync) as an HF folder, atomically."""
    import shutil
    import tempfile

    folder = Path(folder)
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.tmp-", dir=folder.parent))
    try:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        if folder.exists():
            shutil.rmtree(folder)
        tmp.rename(folder)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return folder
