"""One Megatron training step with a caller-supplied loss on per-token log-probabilities.

The step is Megatron's own machinery, nothing re-implemented: ``get_forward_backward_func``
(micro-batches, pipeline schedule), Megatron ``DistributedDataParallel`` grad buffers,
``finalize_model_grads`` (TP/SP/EP/DP gradient reductions) and ``get_megatron_optimizer``
(Adam, gradient clipping, separate dense and expert parameter groups).

The loss contract (what the update benchmark passes verl's policy loss through, ``benchmarks/throughput_update.py``)::

    def loss_fn(log_probs, batch) -> (loss, metrics):
        # log_probs: (mb, s') float32 with grad, log p(token_t | tokens_<t), 0 at padding
        # batch: the micro-batch, left-aligned like log_probs: "tokens", "valid", and every
        #        tensor passed in ``extra`` (advantages, old_log_probs, response_mask, ...)
        ...

The gradient applied is that of the mean of ``loss`` over micro-batches (Megatron scales each by
``1 / num_microbatches``) and over data-parallel ranks (DDP averages); scale ``loss`` in
``loss_fn`` for another normalisation (e.g. verl's global token-mean).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from rlec.megatron.logprobs import micro_batches, run_schedule, token_log_probs
from rlec.megatron.model import MegatronModel

LossFn = Callable[[torch.Tensor, dict[str, torch.Tensor]], tuple[torch.Tensor, dict[str, Any]]]


@dataclass
class StepResult:
    """What one step reports (floats on every rank; losses are this DP rank's).

    Attributes:
        loss: mean of the micro-batch losses.
        grad_norm: global gradient norm before clipping (``None`` without an optimizer step).
        update_successful: the optimizer applied the update (False on fp16 overflow).
        metrics: the means over micro-batches of what ``loss_fn`` returned.
    """

    loss: float
    grad_norm: float | None = None
    update_successful: bool = True
    metrics: dict[str, float] = field(default_factory=dict)


def build_optimizer(
    policy: MegatronModel,
    *,
    lr: float = 1e-6,
    weight_decay: float = 0.0,
    betas: tuple[float, float] = (0.9, 0.999),
    eps: float = 1e-8,
    clip_grad: float = 1.0,
    use_distributed_optimizer: bool = False,
) -> Any:
    """Megatron's Adam(W) optimizer for the model, wired into its config for the schedule.

    The model must have been built with ``wrap_ddp=True`` (and the same
    ``use_distributed_optimizer``). Sets ``finalize_model_grads_func``, ``grad_scale_func`` and
    ``no_sync_func`` on the model config, as Megatron's training loop does.

    Args:
        lr: learning rate (constant; change ``param_groups[i]["lr"]`` or use Megatron's
            ``OptimizerParamScheduler`` for a schedule).
        weight_decay: decoupled weight decay (AdamW); Megatron skips biases and norms.
        betas, eps: Adam coefficients.
        clip_grad: global gradient-norm clip (0 disables).
        use_distributed_optimizer: shard optimizer state over data-parallel ranks.

    Raises:
        ValueError: the model chunks are not wrapped in Megatron DDP.
    """
    from megatron.core.distributed import DistributedDataParallel, finalize_model_grads
    from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer

    if not all(isinstance(chunk, DistributedDataParallel) for chunk in policy.chunks):
        raise ValueError("build_model(..., wrap_ddp=True) is needed before build_optimizer")
    config = OptimizerConfig(
        optimizer="adam",
        lr=lr,
        min_lr=lr,
        weight_decay=weight_decay,
        adam_beta1=betas[0],
        adam_beta2=betas[1],
        adam_eps=eps,
        clip_grad=clip_grad,
        bf16=policy.dtype == torch.bfloat16,
        params_dtype=policy.dtype,
        use_distributed_optimizer=use_distributed_optimizer,
    )
    optimizer = get_megatron_optimizer(config, policy.chunks)
    model_config = policy.config
    model_config.finalize_model_grads_func = finalize_model_grads
    model_config.grad_scale_func = optimizer.scale_loss
    no_sync = [chunk.no_sync for chunk in policy.chunks]
    model_config.no_sync_func = no_sync[0] if len(no_sync) == 1 else no_sync
    return optimizer


def forward_backward(
    policy: MegatronModel,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    loss_fn: LossFn,
    *,
    extra: dict[str, torch.Tensor] | None = None,
    micro_batch_size: int = 1,
    temperature: float = 1.0,
    logit_window: int | None = None,
) -> StepResult:
    """Zero the gradients, then run forward and backward over all micro-batches.

    Gradients end in each parameter's ``main_grad`` (reduced by ``finalize_model_grads``); see
    :func:`rlec.megatron.model.export_hf_weights` with ``grads=True`` to read them by HF name.

    Args:
        policy: built with ``wrap_ddp=True``, with :func:`build_optimizer` called.
        input_ids, attention_mask: ``(b, s)`` as in :func:`rlec.megatron.logprobs.compute_log_probs`.
        loss_fn: see the module docstring.
        extra: per-row tensors ``(b, ...)`` handed to ``loss_fn`` (aligned like the tokens when
            their second dimension is ``s``).
        micro_batch_size: rows per micro-batch.
        temperature: logits are divided by it before the log-softmax.
        logit_window: compute only each row's last K log-probs (e.g. the response); the others
            reach ``loss_fn`` as 0 (see :func:`rlec.megatron.logprobs.micro_batches`).

    Returns:
        :class:`StepResult` without ``grad_norm``.
    """
    for chunk in policy.chunks:
        chunk.zero_grad_buffer()
    batches = micro_batches(policy, input_ids, attention_mask, micro_batch_size, extra, logit_window=logit_window)

    def loss(logits: torch.Tensor, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, Any]]:
        log_probs = token_log_probs(logits, batch["tokens"], batch["valid"], temperature, batch.get("logit_index"))
        value, metrics = loss_fn(log_probs, batch)
        reported = {k: float(v.detach()) if torch.is_tensor(v) else float(v) for k, v in metrics.items()}
        reported["loss"] = float(value.detach())
        return value, reported

    payloads = run_schedule(policy, batches, loss, forward_only=False)
    means = {k: sum(p[k] for p in payloads) / len(payloads) for k in (payloads[0] if payloads else {})}
    means = _share_from_last_stage(means)
    return StepResult(loss=means.pop("loss", float("nan")), metrics=means)


def train_step(
    policy: MegatronModel,
    optimizer: Any,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    loss_fn: LossFn,
    *,
    extra: dict[str, torch.Tensor] | None = None,
    micro_batch_size: int = 1,
    temperature: float = 1.0,
    logit_window: int | None = None,
) -> StepResult:
    """One optimizer step: :func:`forward_backward`, then ``optimizer.step()``.

    Returns:
        :class:`StepResult` with the gradient norm (before clipping) and whether the update
        was applied.
    """
    optimizer.zero_grad()
    result = forward_backward(
        policy, input_ids, attention_mask, loss_fn, extra=extra, micro_batch_size=micro_batch_size, temperature=temperature,
        logit_window=logit_window,
    )
    update_successful, grad_norm, _ = optimizer.step()
    result.update_successful = bool(update_successful)
    result.grad_norm = None if grad_norm is None else float(grad_norm)
    return result


def _share_from_last_stage(values: dict[str, float]) -> dict[str, float]:
    from megatron.core import parallel_state as mpu

    if mpu.get_pipeline_model_parallel_world_size() == 1:
        return values
    box = [values]
    torch.distributed.broadcast_object_list(
        box, src=mpu.get_pipeline_model_parallel_last_rank(), group=mpu.get_pipeline_model_parallel_group()
    )
    return box[0]
