"""Per-token log-probabilities (and logits) from the Megatron model, micro-batched.

Conventions (verl's): ``input_ids`` and ``attention_mask`` are ``(batch, seq)``; each row's
valid tokens form one contiguous run (left-padded prompt + right-padded response is fine).
``log_probs[i, t] = log p(input_ids[i, t] | input_ids[i, :t])`` for every valid ``t`` after the
row's first valid token, and 0 elsewhere; slice ``[:, -response_length:]`` for the response.

How: each row is shifted so its valid tokens start at position 0 (positions ``0..n-1``, as
verl's ``position_ids = cumsum(mask) - 1``), so a plain causal mask is exact; padding only follows
valid tokens and is never attended to. Logits stay split over the vocabulary across TP ranks and
``log p`` comes from verl's ``vocab_parallel_log_probs_from_logits`` (Megatron's vocab-parallel cross entropy): the full 151,936-wide row is
never materialised on one rank, and only one micro-batch of logits lives at a time. The forward
runs through Megatron's ``get_forward_backward_func`` so pipeline parallelism works unchanged;
results are broadcast from the last pipeline stage so every rank returns them.
"""

from __future__ import annotations

from functools import partial
from typing import Any, Callable

import torch

def left_align(input_ids: torch.Tensor, attention_mask: torch.Tensor, multiple: int = 1) -> dict[str, torch.Tensor]:
    """Shift every row so its valid tokens start at column 0; pad the length to ``multiple``.

    Args:
        input_ids: ``(b, s)`` token ids.
        attention_mask: ``(b, s)`` 1 for valid tokens, 0 for padding (bool or int).
        multiple: round the sequence length up to this (TP size under sequence parallel).

    Returns:
        ``tokens (b, s')``, ``valid (b, s')`` bool, ``position_ids (b, s')``, ``shift (b,)`` (the
        first valid column of each input row).

    Raises:
        ValueError: shapes differ, or a row's valid tokens are not one contiguous run.
    """
    if input_ids.shape != attention_mask.shape or input_ids.dim() != 2:
        raise ValueError(f"input_ids {tuple(input_ids.shape)} and attention_mask {tuple(attention_mask.shape)} must be the same (batch, seq) shape")
    mask = attention_mask.bool()
    b, s = input_ids.shape
    length = mask.sum(dim=1)
    shift = torch.where(length > 0, mask.int().argmax(dim=1), torch.zeros_like(length))
    cols = torch.arange(s, device=input_ids.device)
    expected = (cols[None, :] >= shift[:, None]) & (cols[None, :] < (shift + length)[:, None])
    if not torch.equal(expected, mask):
        bad = int((expected != mask).any(dim=1).nonzero()[0])
        raise ValueError(f"attention_mask row {bad}: valid tokens must form one contiguous run of 1s")
    width = -(-s // multiple) * multiple
    src = (cols[None, :] + shift[:, None]).clamp(max=s - 1)
    tokens = torch.zeros((b, width), dtype=input_ids.dtype, device=input_ids.device)
    tokens[:, :s] = torch.gather(input_ids, 1, src)
    valid = torch.zeros((b, width), dtype=torch.bool, device=input_ids.device)
    valid[:, :s] = cols[None, :] < length[:, None]
    tokens[~valid] = 0
    position_ids = torch.arange(width, device=input_ids.device).expand(b, width).contiguous()
    return {"tokens": tokens, "valid": valid, "position_ids": position_ids, "shift": shift}


def restore(aligned: torch.Tensor, shift: torch.Tensor, seq_len: int) -> torch.Tensor:
    """Inverse of :func:`left_align` for a ``(b, s', ...)`` tensor: back to ``(b, seq_len, ...)``."""
    b = aligned.shape[0]
    cols = torch.arange(seq_len, device=aligned.device)
    src = cols[None, :] - shift[:, None].to(aligned.device)
    inside = (src >= 0) & (src < aligned.shape[1])
    idx = src.clamp(0, aligned.shape[1] - 1)
    idx = idx.view(b, seq_len, *([1] * (aligned.dim() - 2))).expand(b, seq_len, *aligned.shape[2:])
    out = torch.gather(aligned, 1, idx)
    return out * inside.view(b, seq_len, *([1] * (aligned.dim() - 2))).to(out.dtype)


def token_log_probs(
    vocab_parallel_logits: torch.Tensor,
    tokens: torch.Tensor,
    valid: torch.Tensor,
    temperature: float = 1.0,
    logit_index: torch.Tensor | None = None,
) -> torch.Tensor:
    """``log p(tokens[:, t] | tokens[:, :t])`` from logits split over the vocabulary (TP ranks).

    The per-token values are verl's ``vocab_parallel_log_probs_from_logits`` (Megatron's
    vocab-parallel cross entropy), as verl's Megatron actor computes them.

    Args:
        vocab_parallel_logits: ``(b, s, V / tp)``, this rank's vocabulary slice; or ``(b, K, V / tp)``
            when ``logit_index`` says which positions the K logits belong to.
        tokens: ``(b, s)`` aligned token ids.
        valid: ``(b, s)`` bool.
        temperature: logits are divided by it (the rollout's sampling temperature), > 0.
        logit_index: ``(b, K)`` long, the aligned positions of windowed logits (see
            :func:`micro_batches`' ``logit_window``); negative entries are unused slots.

    Returns:
        ``(b, s)`` float32; column 0, padding and (windowed) positions without logits are 0.
        Differentiable (for the policy loss).
    """
    from verl.utils.megatron.tensor_parallel import vocab_parallel_log_probs_from_logits

    def per_token(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return vocab_parallel_log_probs_from_logits(logits, targets)

    return _at_target_positions(per_token, vocab_parallel_logits, tokens, valid, temperature, logit_index)


def token_entropy(
    vocab_parallel_logits: torch.Tensor,
    tokens: torch.Tensor,
    valid: torch.Tensor,
    temperature: float = 1.0,
    logit_index: torch.Tensor | None = None,
) -> torch.Tensor:
    """Exact full-vocabulary entropy (nats) of the distribution that predicted each token.

    verl's ``vocab_parallel_entropy`` on ``logits / temperature`` (what verl logs as
    ``actor/entropy``), placed like :func:`token_log_probs`: position t holds the entropy of
    ``p(. | tokens[:, :t])``. Same arguments and shapes as :func:`token_log_probs`; not
    differentiated (no gradient is needed for a metric).
    """
    from verl.utils.megatron.tensor_parallel import vocab_parallel_entropy

    def per_token(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return vocab_parallel_entropy(logits)

    return _at_target_positions(per_token, vocab_parallel_logits, tokens, valid, temperature, logit_index)


def _at_target_positions(
    per_token: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    vocab_parallel_logits: torch.Tensor,
    tokens: torch.Tensor,
    valid: torch.Tensor,
    temperature: float,
    logit_index: torch.Tensor | None,
) -> torch.Tensor:
    """``per_token(logits / T, next tokens)`` placed at the position of the token each logit row predicts."""
    if logit_index is not None:
        used = logit_index >= 0
        target_pos = (logit_index.clamp(min=0) + 1).clamp(max=tokens.shape[1] - 1)
        values = per_token(vocab_parallel_logits.float() / temperature, torch.gather(tokens, 1, target_pos))
        picked = torch.where(used, values, torch.zeros_like(values))
        out = torch.zeros(tokens.shape, dtype=picked.dtype, device=picked.device)
        # unused slots add 0 at a clamped position; used positions are distinct
        return out.scatter_add(1, target_pos, picked)
    logits = vocab_parallel_logits[:, :-1].float() / temperature  # a new tensor: the CE works in place
    values = per_token(logits, tokens[:, 1:])
    values = torch.cat([torch.zeros_like(values[:, :1]), values], dim=1)
    keep = valid.clone()
    keep[:, 0] = False
    return torch.where(keep, values, torch.zeros_like(values))


def window_index(valid: torch.Tensor, window: int) -> torch.Tensor:
    """Positions whose logits predict each row's last ``window`` valid tokens.

    For a left-aligned row of ``L`` valid tokens these are ``L-1-window .. L-2`` (those that
    exist, i.e. >= 0); unused slots are -1.

    Args:
        valid: ``(b, s)`` bool, left-aligned.
        window: K >= 1.

    Returns:
        ``(b, K)`` long.
    """
    lengths = valid.sum(dim=1)
    pos = lengths[:, None] - 1 - window + torch.arange(window)[None, :]
    return torch.where(pos >= 0, pos, torch.full_like(pos, -1))


def windowed_output(model: torch.nn.Module, logit_index: torch.Tensor | None):
    """Context manager: make the model's output layer see only the positions in ``logit_index``.

    A forward pre-hook gathers the hidden states ``(s, b, h) -> (K, b, h)`` before the output
    layer, so the vocabulary projection (99% of a small model's FLOPs with Qwen3's 151,936-token
    vocabulary) and the cross entropy run on K positions instead of s. Autograd flows through the
    gather.

    When the output layer runs sequence parallel (TP > 1: its input is this TP rank's slice of the
    sequence, which it would all-gather), the hook all-gathers the sequence first and runs the layer
    once without sequence parallel, as Megatron's own last-token inference path does
    (``GPTModel._postprocess``): the layer then copies its input into the TP region (backward: the
    all-reduce of the partial input gradients that sequence parallel's reduce-scatter does) and the
    gather's backward keeps this rank's slice of that sum. Values and gradients equal the sequence-
    parallel full computation (``tests/verl_plugin/check_response_logits.py`` at TP 2).
    """
    import contextlib

    from megatron.core.utils import get_attr_wrapped_model

    @contextlib.contextmanager
    def ctx():
        output_layer = None
        if logit_index is not None:
            try:
                output_layer = get_attr_wrapped_model(model, "output_layer")
            except RuntimeError:  # not the last pipeline stage
                output_layer = None
        if output_layer is None:
            yield
            return
        idx = logit_index.clamp(min=0).t().to(torch.long)  # (K, b)

        split = bool(getattr(output_layer, "sequence_parallel", False))

        def pre_hook(module: torch.nn.Module, args: tuple) -> tuple:
            hidden = args[0]
            if split:  # the whole sequence on every TP rank, then the layer without sequence parallel
                from rlec.megatron.parallel import sequence_parallel_gather

                hidden = sequence_parallel_gather(hidden)
                module.sequence_parallel = False
            gathered = torch.gather(hidden, 0, idx.to(hidden.device)[..., None].expand(-1, -1, hidden.shape[-1]))
            return (gathered,) + tuple(args[1:])

        def post_hook(module: torch.nn.Module, args: tuple, output: Any) -> None:
            if split:
                module.sequence_parallel = True

        handles = [output_layer.register_forward_pre_hook(pre_hook), output_layer.register_forward_hook(post_hook)]
        try:
            yield
        finally:
            for handle in handles:
                handle.remove()
            if split:
                output_layer.sequence_parallel = True

    return ctx()


def causal_mask(seq_len: int, device: Any) -> torch.Tensor | None:
    """Megatron's mask for the local spec: ``(1, 1, s, s)`` bool, True = masked (future tokens).

    Megatron builds its default causal mask on CUDA, so the CPU path passes one explicitly; the
    TE path takes ``None`` (causal by its layer spec).
    """
    return torch.triu(torch.ones(seq_len, seq_len, dtype=torch.bool, device=device), diagonal=1)[None, None]


def micro_batches(
    policy: Any,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    micro_batch_size: int,
    extra: dict[str, torch.Tensor] | None = None,
    logit_window: int | None = None,
) -> list[dict[str, torch.Tensor]]:
    """Split a batch into left-aligned micro-batches, ready for Megatron's forward.

    All micro-batches share one sequence length; the last one may have fewer rows. ``extra``
    tensors (advantages, old log-probs, masks, all ``(b, ...)``) are split alongside and aligned
    like the tokens when their second dimension is the sequence. With ``logit_window=K`` each
    micro-batch carries ``logit_index`` (:func:`window_index`): only the log-probs of each row's
    last K valid tokens (e.g. the response) are computed, the rest are 0. The window is ignored
    (full logits) when the output layer runs sequence parallel.

    Raises:
        ValueError: ``micro_batch_size < 1`` or a malformed attention mask.
    """
    if micro_batch_size < 1:
        raise ValueError(f"micro_batch_size={micro_batch_size}: expected >= 1")
    device = policy.device  # the parameters' device: CUDA for the local spec too when there is a GPU
    multiple = policy.layout.tp if policy.config.sequence_parallel else 1
    b, s = input_ids.shape
    aligned = left_align(input_ids.cpu(), attention_mask.cpu(), multiple)
    if logit_window is not None and not policy.config.sequence_parallel:
        if logit_window < 1:
            raise ValueError(f"logit_window={logit_window}: expected >= 1")
        aligned["logit_index"] = window_index(aligned["valid"], min(int(logit_window), aligned["valid"].shape[1]))
    out = []
    for start in range(0, b, micro_batch_size):
        rows = slice(start, min(start + micro_batch_size, b))
        mb = {k: v[rows] for k, v in aligned.items()}
        for key, value in (extra or {}).items():
            value = value[rows].cpu()
            if value.dim() >= 2 and value.shape[1] == s:
                value = _align_like(value, mb["shift"], mb["tokens"].shape[1])
            mb[key] = value
        out.append({k: v.to(device) for k, v in mb.items()})
    return out


def _align_like(value: torch.Tensor, shift: torch.Tensor, width: int) -> torch.Tensor:
    b, s = value.shape[:2]
    cols = torch.arange(width)
    src = (cols[None, :] + shift[:, None]).clamp(max=s - 1)
    idx = src.view(b, width, *([1] * (value.dim() - 2))).expand(b, width, *value.shape[2:])
    out = torch.gather(value, 1, idx)
    inside = (cols[None, :] + shift[:, None]) < s
    return out * inside.view(b, width, *([1] * (value.dim() - 2))).to(out.dtype)


def forward_step(batch: dict[str, torch.Tensor], model: torch.nn.Module, use_te: bool) -> torch.Tensor:
    """One Megatron forward of an aligned micro-batch; returns vocab-parallel logits (last stage)."""
    tokens = batch["tokens"]
    mask = None if use_te else causal_mask(tokens.shape[1], tokens.device)
    with windowed_output(model, batch.get("logit_index")):
        return model(tokens, batch["position_ids"], mask)


def run_schedule(policy: Any, batches: list[dict[str, torch.Tensor]], loss_func: Callable[..., Any], forward_only: bool) -> list[Any]:
    """Run Megatron's forward(-backward) schedule over ``batches``.

    ``loss_func(logits, batch)`` runs on the last pipeline stage and returns ``(loss, payload)``;
    Megatron scales ``loss`` by ``1 / len(batches)`` before backward.

    Returns:
        The payloads, on the last pipeline stage (an empty list elsewhere).
    """
    from megatron.core.pipeline_parallel import get_forward_backward_func

    def step(data_iterator: Any, model: torch.nn.Module) -> tuple[torch.Tensor, Callable[..., Any]]:
        batch = next(data_iterator)
        return forward_step(batch, model, policy.use_te), partial(_call_loss, loss_func, batch)

    seq_len = batches[0]["tokens"].shape[1]
    return get_forward_backward_func()(
        forward_step_func=step,
        data_iterator=iter(batches),
        model=policy.chunks,
        num_microbatches=len(batches),
        seq_length=seq_len,
        micro_batch_size=batches[0]["tokens"].shape[0],
        forward_only=forward_only,
    )


def _call_loss(loss_func: Callable[..., Any], batch: dict[str, torch.Tensor], output: torch.Tensor) -> Any:
    return loss_func(output, batch)


def _from_last_stage(tensor: torch.Tensor | None, shape: tuple[int, ...], dtype: torch.dtype, device: Any) -> torch.Tensor:
    from megatron.core import parallel_state as mpu

    if mpu.get_pipeline_model_parallel_world_size() == 1:
        assert tensor is not None
        return tensor
    if tensor is None:
        tensor = torch.empty(shape, dtype=dtype, device=device)
    torch.distributed.broadcast(tensor, src=mpu.get_pipeline_model_parallel_last_rank(), group=mpu.get_pipeline_model_parallel_group())
    return tensor


def compute_log_probs(
    policy: Any,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    *,
    micro_batch_size: int = 1,
    temperature: float = 1.0,
    logit_window: int | None = None,
    with_entropy: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Per-token log-probabilities (and optionally entropies) of ``input_ids`` under the model (no gradient).

    Every rank of the model-parallel group must call this with the same inputs.

    Args:
        policy: a :class:`rlec.megatron.model.MegatronModel`.
        input_ids: ``(b, s)`` token ids (CPU or device).
        attention_mask: ``(b, s)``; valid tokens one contiguous run per row.
        micro_batch_size: rows per forward; bounds logits memory to
            ``micro_batch_size * s * vocab / tp`` floats.
        temperature: divide logits by this first (the rollout temperature), > 0.
        logit_window: compute only each row's last K log-probs (the response), see
            :func:`micro_batches`.
        with_entropy: also return the exact entropy of each predicting distribution
            (:func:`token_entropy`), at the same positions.

    Returns:
        ``(b, s)`` float32 on CPU: ``log p(x_t | x_<t)`` at valid positions after each row's
        first valid token (within the window, when one is given), 0 elsewhere; with
        ``with_entropy``, the pair ``(log_probs, entropy)``.
    """
    if temperature <= 0:
        raise ValueError(f"temperature={temperature}: expected > 0")
    batches = micro_batches(policy, input_ids, attention_mask, micro_batch_size, logit_window=logit_window)

    def loss(logits: torch.Tensor, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        args = (batch["tokens"], batch["valid"], temperature, batch.get("logit_index"))
        out = {"log_probs": token_log_probs(logits, *args).detach()}
        if with_entropy:
            out["entropy"] = token_entropy(logits, *args)
        return out["log_probs"].sum() * 0.0, out

    with torch.no_grad():
        payloads = run_schedule(policy, batches, loss, forward_only=True)
    width = batches[0]["tokens"].shape[1]
    shift = torch.cat([b["shift"] for b in batches])
    b, s = input_ids.shape
    results = []
    for key in ("log_probs", "entropy") if with_entropy else ("log_probs",):
        aligned = torch.cat([p[key] for p in payloads]) if payloads else None
        aligned = _from_last_stage(aligned, (input_ids.shape[0], width), torch.float32, batches[0]["tokens"].device)
        results.append(restore(aligned.cpu(), shift.cpu(), s)[:b])
    return (results[0], results[1]) if with_entropy else results[0]


def compute_logits(policy: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None, *, micro_batch_size: int = 1) -> torch.Tensor:
    """Full-vocabulary logits ``(b, s, V)`` float32 on CPU (gathered over TP; for verification).

    Memory is ``b * s * V`` floats on every rank: use small batches (a few prompts).
    """
    from megatron.core.tensor_parallel import gather_from_tensor_model_parallel_region

    if attention_mask is None:
        attention_mask = torch.ones_like(input_ids)
    batches = micro_batches(policy, input_ids, attention_mask, micro_batch_size)
    vocab = policy.hf_config.vocab_size

    def loss(logits: torch.Tensor, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        full = gather_from_tensor_model_parallel_region(logits.float())[..., :vocab]
        return full.sum() * 0.0, {"logits": full.detach()}

    with torch.no_grad():
        payloads = run_schedule(policy, batches, loss, forward_only=True)
    width = batches[0]["tokens"].shape[1]
    aligned = torch.cat([p["logits"] for p in payloads]) if payloads else None
    aligned = _from_last_stage(aligned, (input_ids.shape[0], width, vocab), torch.float32, batches[0]["tokens"].device)
    shift = torch.cat([b["shift"] for b in batches])
    b, s = input_ids.shape
    return restore(aligned.cpu(), shift.cpu(), s)[:b]
