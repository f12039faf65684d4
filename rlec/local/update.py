"""The update half of a local step: advantages, batch hand-off, Megatron update, weight sync.

Everything here is verl's or Megatron's own machinery called in the order verl's trainer calls
it; this module only moves tensors between them:

- advantages: verl's registered ``grpo`` estimator with ``norm_adv_by_std_in_grpo=False``;
- update: old log-probs once from the pre-update policy, then one optimizer step per PPO
  mini-batch (``actor.ppo_mini_batch_size`` prompts, as verl's actor), each with verl's
  ``vanilla`` policy loss through ``rlec.megatron.training.train_step`` (Megatron's schedule,
  DDP and optimizer);
- weight sync: ``rlec.megatron.export_hf_weights`` (mbridge) into the HF rollout model.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from rlec.local.rollout import RolloutBatch

LOSS_AGG_MODES = ("token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")


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


def rollout_metrics(batch: RolloutBatch) -> dict[str, float]:
    """Generation figures of a batch (call before scripted answers replace any row)."""
    lengths = batch.response_mask.sum(dim=1)
    prompt_lengths = batch.attention_mask[:, : batch.prompts.shape[1]].sum(dim=1)
    return {
        "response_length/mean": float(lengths.mean()),
        "response_length/clip_ratio": sum(f == "length" for f in batch.finish_reasons) / len(batch.finish_reasons),
        "prompt_length/mean": float(prompt_lengths.float().mean()),
        "rollout/tokens_per_s": batch.response_tokens / max(batch.gen_seconds, 1e-9),
    }


def make_payload(batch: RolloutBatch, scores: list[float], infos: list[dict[str, Any]]) -> dict[str, Any]:
    """What rank 0 hands every rank after rollout and scoring (tensors + per-sample infos)."""
    _, advantages = mean_only_advantages(batch, scores)
    return {
        "input_ids": batch.input_ids,
        "attention_mask": batch.attention_mask,
        "response_mask": batch.response_mask,
        "advantages": advantages,
        "infos": infos,
        "metrics": {"critic/advantages/abs_mean": float((advantages.abs() * batch.response_mask).sum() / batch.response_mask.sum())},
    }


def broadcast(payload: dict[str, Any] | None) -> dict[str, Any]:
    """Rank 0's payload on every rank (pickled over the default process group)."""
    if not torch.distributed.is_initialized() or torch.distributed.get_world_size() == 1:
        assert payload is not None
        return payload
    box = [payload]
    torch.distributed.broadcast_object_list(box, src=0)
    return box[0]


def policy_loss_fn(cfg: Any, num_micro_batches: int, dp_size: int, global_tokens: int, global_sequences: int):
    """verl's ``vanilla`` policy loss on one Megatron micro-batch, normalised as verl's Megatron actor does.

    ``global_batch_info`` gives ``agg_loss`` the mini-batch's token and sequence counts over all
    data-parallel ranks, so e.g. token-mean divides by the global token count and multiplies by
    ``dp_size`` (DDP averages over DP ranks); the result is multiplied by the number of
    micro-batches because Megatron's schedule divides each micro-batch loss by it. The extra
    metric ``actor/entropy_mc`` (mean negative log-prob of the sampled tokens, a Monte Carlo
    estimate of the policy entropy at temperature 1) is normalised the same way, so its mean over
    micro-batches and ranks is the global token mean.
    """
    from omegaconf import OmegaConf
    from verl.trainer.ppo.core_algos import get_policy_loss_fn

    loss_config = OmegaConf.create({
        "clip_ratio": cfg.actor.clip_ratio_low, "clip_ratio_low": cfg.actor.clip_ratio_low,
        "clip_ratio_high": cfg.actor.clip_ratio_high, "clip_ratio_c": cfg.actor.clip_ratio_c,
        "global_batch_info": {"dp_size": dp_size, "batch_num_tokens": global_tokens, "global_batch_size": global_sequences},
    })
    vanilla = get_policy_loss_fn("vanilla")
    scale = num_micro_batches * dp_size / max(global_tokens, 1)

    def loss_fn(log_probs: torch.Tensor, batch: dict[str, torch.Tensor]):
        mask = batch["loss_mask"].float()
        loss, metrics = vanilla(old_log_prob=batch["old_log_probs"], log_prob=log_probs, advantages=batch["advantages"],
                                response_mask=mask, loss_agg_mode=cfg.actor.loss_agg_mode, config=loss_config)
        metrics["actor/entropy_mc"] = float(-(log_probs.detach() * mask).sum() * scale)
        return loss * num_micro_batches, metrics

    return loss_fn


def update_policy(policy: Any, optimizer: Any, payload: dict[str, Any], cfg: Any) -> dict[str, float]:
    """Old log-probs, then one optimizer step per PPO mini-batch, on this data-parallel rank's rows.

    The global batch (B = prompts x n rows, grouped by prompt) is cut into mini-batches of
    ``actor.ppo_mini_batch_size x n`` consecutive rows; each mini-batch is split evenly over the
    data-parallel ranks. With one mini-batch the update is on-policy (ratio 1); with more, the
    later ones see the clipped ratio, as on the cluster.

    Args:
        policy, optimizer: from ``rlec.megatron.build_model`` / ``build_optimizer``.
        payload: :func:`make_payload`'s dict (the whole global batch).
        cfg: the local-run config (``actor.*``, ``rollout.*``).

    Returns:
        ``actor/pg_loss``, ``actor/grad_norm``, the loss function's metrics, means over
        mini-batches (and over data-parallel ranks: equal on every rank).
    """
    from megatron.core import parallel_state as mpu

    from rlec.megatron.logprobs import compute_log_probs
    from rlec.megatron.training import train_step

    dp, dp_rank = mpu.get_data_parallel_world_size(), mpu.get_data_parallel_rank()
    mini = int(cfg.actor.ppo_mini_batch_size) * int(cfg.rollout.n)
    n = payload["input_ids"].shape[0]
    shard = mini // dp
    rows = torch.cat([torch.arange(start + dp_rank * shard, start + (dp_rank + 1) * shard) for start in range(0, n, mini)])
    ids, attn = payload["input_ids"][rows], payload["attention_mask"][rows]
    resp_mask, adv = payload["response_mask"][rows], payload["advantages"][rows]
    zeros = torch.zeros(ids.shape[0], ids.shape[1] - resp_mask.shape[1])
    mbs, temperature = int(cfg.actor.micro_batch_size), float(cfg.rollout.temperature)
    window = resp_mask.shape[1]  # only the response's log-probs matter: the vocabulary projection runs there only
    old = compute_log_probs(policy, ids, attn, micro_batch_size=mbs, temperature=temperature, logit_window=window)
    loss_mask = torch.cat([zeros, resp_mask], dim=1)
    advantages = torch.cat([zeros, adv], dim=1)
    per_mini: list[dict[str, float]] = []
    for k, start in enumerate(range(0, n, mini)):
        local = slice(k * shard, (k + 1) * shard)
        global_mask = payload["response_mask"][start : start + mini]
        loss_fn = policy_loss_fn(cfg, math.ceil(shard / mbs), dp, int(global_mask.sum()), int((global_mask.sum(dim=1) > 0).sum()))
        extra = {"loss_mask": loss_mask[local], "advantages": advantages[local], "old_log_probs": old[local]}
        result = train_step(policy, optimizer, ids[local], attn[local], loss_fn, extra=extra, micro_batch_size=mbs,
                            temperature=temperature, logit_window=window)
        # result.loss: this rank's mean over micro-batches of loss_fn's value; its mean over DP
        # ranks is the mini-batch's loss under loss_agg_mode (e.g. the global token mean)
        metrics = {"actor/pg_loss": result.loss, **{k2: v for k2, v in result.metrics.items() if k2 != "loss"}}
        metrics = _dp_mean(metrics)
        metrics["actor/grad_norm"] = float("nan") if result.grad_norm is None else result.grad_norm
        metrics["actor/update_applied"] = float(result.update_successful)
        per_mini.append(metrics)
    out = {key: sum(m[key] for m in per_mini) / len(per_mini) for key in per_mini[0]}
    out["actor/optimizer_steps"] = float(len(per_mini))
    return out


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
    ``check_index`` among the sorted names (so every tensor is checked over a run), with the
    rollout model's own copy of it, read back through transformers' weight conversion.

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
    hub = model_to_hub_state(rollout_model, rollout_model.state_dict())
    return bool(torch.equal(hub[name].float(), exported[name]))


def save_hf(model: torch.nn.Module, tokenizer: Any, folder: Any) -> Any:
    """Save the rollout model (= the trained policy after the last sync) as an HF folder, atomically."""
    from pathlib import Path

    from rlec.io import atomic_dir

    with atomic_dir(folder) as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
    return Path(folder)
