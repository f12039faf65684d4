"""The update half of a local step: advantages, old log-probs, the Megatron update, the weight sync.

Each piece is verl's or Megatron's, called in the order verl's trainer calls them; this module
moves tensors between them:

- advantages: ``verl.trainer.ppo.ray_trainer.compute_advantage`` on the batch's ``DataProto``
  with ``algorithm.adv_estimator`` and the live ``algorithm`` config (what verl's V1 trainer calls
  for single-turn rollouts), so any registered estimator works (grpo mean-only by default);
- old log-probs and the exact policy entropy (``actor/entropy``, verl's ``agg_loss`` over the
  response tokens) from the pre-update policy, at the rollout temperature;
- update: one optimizer step per PPO mini-batch (``ppo_mini_batch_size x rollout.n`` rows,
  ``DataProto.split``), each data-parallel rank on its ``chunk`` of it, with the configured verl
  policy loss (``get_policy_loss_fn(policy_loss.loss_mode)``) normalised over the global
  mini-batch exactly as verl's Megatron engine does (``global_batch_info`` = dp size, global
  token and sequence counts; loss multiplied by the micro-batch count because Megatron's
  schedule divides by it), through Megatron's schedule, DDP and optimizer
  (:mod:`rlec.megatron.training`);
- weight sync: the Megatron weights exported through mbridge into the HF rollout model.
"""

from __future__ import annotations

import math
from typing import Any

import torch


def set_rewards(data: Any, scores: list[float]) -> None:
    """Put each response's scalar reward on its last response token (verl's ``token_level_scores``
    and, without a KL penalty, ``token_level_rewards``), in place."""
    mask = data.batch["response_mask"]
    last = (mask.sum(dim=1).long() - 1).clamp(min=0)
    rewards = torch.zeros(mask.shape, dtype=torch.float32)
    rewards[torch.arange(len(scores)), last] = torch.tensor(scores, dtype=torch.float32)
    data.batch["token_level_scores"] = rewards
    data.batch["token_level_rewards"] = rewards.clone()


def compute_advantages(data: Any, cfg: Any) -> Any:
    """verl's advantage computation on the rollout batch (``advantages``, ``returns``: (B, R)).

    Args:
        data: the ``DataProto`` with ``token_level_rewards``, ``response_mask`` and ``uid``.
        cfg: the composed config (``algorithm.*``, ``actor_rollout_ref.rollout.n``).

    Returns:
        ``data`` with ``advantages`` and ``returns`` set.
    """
    from verl.trainer.ppo.ray_trainer import compute_advantage

    algorithm = cfg.algorithm
    return compute_advantage(
        data,
        adv_estimator=algorithm.adv_estimator,
        gamma=algorithm.gamma,
        lam=algorithm.lam,
        num_repeat=int(cfg.actor_rollout_ref.rollout.n),
        norm_adv_by_std_in_grpo=bool(algorithm.get("norm_adv_by_std_in_grpo", True)),
        config=algorithm,
    )


def actor_config(cfg: Any) -> Any:
    """verl's ``McoreActorConfig`` of the composed config (what its policy losses read):
    :func:`rlec.verl_plugin.typed_config.actor_config`."""
    from rlec.verl_plugin.typed_config import actor_config as typed

    return typed(cfg)


def old_log_probs(policy: Any, data: Any, cfg: Any) -> dict[str, float]:
    """Old log-probs and entropies of the responses under the pre-update policy, in place.

    Sets ``data.batch["old_log_probs"]`` and ``data.batch["entropy"]`` ((B, R) float32, at the
    rollout temperature; every rank holds the whole batch).

    Returns:
        ``{"actor/entropy": ...}``: verl's ``agg_loss`` of the per-token entropy over the response
        mask with ``actor.loss_agg_mode`` (exactly the metric verl's trainer logs).
    """
    from verl.trainer.ppo.core_algos import agg_loss

    from rlec.megatron.logprobs import compute_log_probs

    window = data.batch["responses"].shape[1]
    actor = actor_config(cfg)  # verl's typed actor section: the values verl's workers read
    lp, ent = compute_log_probs(policy, data.batch["input_ids"], data.batch["attention_mask"],
                                micro_batch_size=int(actor.ppo_micro_batch_size_per_gpu),
                                temperature=float(data.meta_info["temperature"]), logit_window=window, with_entropy=True)
    data.batch["old_log_probs"] = lp[:, -window:]
    data.batch["entropy"] = ent[:, -window:]
    mask = data.batch["response_mask"].float()
    entropy = agg_loss(loss_mat=data.batch["entropy"], loss_mask=mask, loss_agg_mode=actor.loss_agg_mode)
    return {"actor/entropy": float(entropy)}


def policy_loss_fn(config: Any, num_micro_batches: int, dp_size: int, global_tokens: int, global_sequences: int):
    """The configured verl policy loss on one Megatron micro-batch, normalised as verl's Megatron engine does.

    ``config.global_batch_info`` gives ``agg_loss`` the mini-batch's token and sequence counts over
    all data-parallel ranks, so e.g. token-mean divides by the global token count and multiplies by
    ``dp_size`` (DDP averages over DP ranks); the result is multiplied by the number of
    micro-batches because Megatron's schedule divides each micro-batch loss by it
    (``verl/workers/engine/megatron/transformer_impl.py``, ``postprocess_micro_batch_func``).

    Args:
        config: verl's actor config (:func:`actor_config`).
        num_micro_batches: micro-batches of this rank in the mini-batch.
        dp_size: data-parallel size.
        global_tokens, global_sequences: response tokens and non-empty responses of the whole
            mini-batch (all DP ranks).

    Returns:
        ``loss_fn(log_probs, micro_batch) -> (loss, metrics)`` for :func:`rlec.megatron.train_step`;
        ``micro_batch`` carries ``loss_mask``, ``advantages`` and ``old_log_probs`` aligned like
        ``log_probs``.
    """
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


def update_policy(policy: Any, optimizer: Any, data: Any, cfg: Any, config: Any) -> dict[str, float]:
    """One optimizer step per PPO mini-batch, on this data-parallel rank's rows.

    The global batch (rows grouped by prompt, ``old_log_probs`` and ``advantages`` set) is cut
    into mini-batches of ``ppo_mini_batch_size x rollout.n`` consecutive rows (verl's rule; with
    E3's uneven groups the row count is still ``ppo_mini_batch_size x n`` because the budget keeps
    the total fixed); each is split evenly over the data-parallel ranks. With one mini-batch the
    update is on-policy (ratio 1); with more, later ones see the clipped ratio, as on the cluster.

    Args:
        policy, optimizer: from ``rlec.megatron.build_model`` / ``build_optimizer``.
        data: the step's ``DataProto`` (same on every rank).
        cfg: the composed config.
        config: verl's actor config (:func:`actor_config`).

    Returns:
        ``actor/pg_loss``, ``actor/grad_norm``, the loss's metrics (``actor/pg_clipfrac``, ...),
        means over mini-batches (equal on every rank), and ``actor/optimizer_steps``.

    Raises:
        ValueError: the batch does not split into whole mini-batches over the data-parallel ranks.
    """
    from rlec.megatron.parallel import data_parallel_mean, data_parallel_rank_and_size
    from rlec.megatron.training import train_step

    dp_rank, dp = data_parallel_rank_and_size()
    mini = int(config.ppo_mini_batch_size) * int(cfg.actor_rollout_ref.rollout.n)
    if len(data) % mini or mini % dp:
        raise ValueError(f"{len(data)} responses do not split into mini-batches of {mini} rows over {dp} data-parallel ranks")
    mbs = int(config.ppo_micro_batch_size_per_gpu)
    temperature = float(data.meta_info["temperature"])
    window = data.batch["responses"].shape[1]
    per_mini: list[dict[str, float]] = []
    for mini_batch in data.split(mini):
        mask = mini_batch.batch["response_mask"]
        tokens, sequences = int(mask.sum()), int((mask.sum(dim=1) > 0).sum())
        local = mini_batch.chunk(dp)[dp_rank]
        ids, attn = local.batch["input_ids"], local.batch["attention_mask"]
        pad = torch.zeros(ids.shape[0], ids.shape[1] - window)
        extra = {"loss_mask": torch.cat([pad, local.batch["response_mask"].float()], dim=1),
                 "advantages": torch.cat([pad, local.batch["advantages"].float()], dim=1),
                 "old_log_probs": torch.cat([pad, local.batch["old_log_probs"].float()], dim=1)}
        loss_fn = policy_loss_fn(config, math.ceil(len(local) / mbs), dp, tokens, sequences)
        result = train_step(policy, optimizer, ids, attn, loss_fn, extra=extra, micro_batch_size=mbs,
                            temperature=temperature, logit_window=window)
        # result.loss: this rank's mean over micro-batches of loss_fn's value (x micro-batches); its
        # mean over DP ranks is the mini-batch's loss under loss_agg_mode (e.g. the global token mean)
        metrics = {"actor/pg_loss": result.loss, **{k: v for k, v in result.metrics.items() if k != "loss"}}
        metrics = data_parallel_mean(metrics)
        metrics["actor/grad_norm"] = float("nan") if result.grad_norm is None else result.grad_norm
        metrics["actor/update_applied"] = float(result.update_successful)
        per_mini.append(metrics)
    out = {key: sum(m[key] for m in per_mini) / len(per_mini) for key in per_mini[0]}
    out["actor/optimizer_steps"] = float(len(per_mini))
    return out


def set_learning_rate(optimizer: Any, cfg: Any, step: int) -> float:
    """Linear warm-up from ``optim.lr_warmup_init`` to ``optim.lr`` over ``optim.lr_warmup_steps``
    global steps, constant after (verl's ``constant`` decay style).

    Returns:
        The learning rate set for ``step`` (steps count from 1).
    """
    optim = cfg.actor_rollout_ref.actor.optim
    lr, warmup = float(optim.lr), int(optim.get("lr_warmup_steps", 0) or 0)
    if warmup > 0 and step <= warmup:
        init = float(optim.get("lr_warmup_init", 0.0) or 0.0)
        lr = init + (lr - init) * step / warmup
    for group in optimizer.param_groups:
        group["lr"] = lr
    return lr


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
