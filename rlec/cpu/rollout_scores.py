"""What vLLM's rollout server returns beside the tokens, for the CPU rollout ``rlec_hf``.

verl's vLLM server answers a request with the response ids and, on request, two more fields of
``TokenOutput`` (``verl/workers/rollout/vllm_rollout/vllm_async_server.py``):

- ``log_probs`` (``rollout.calculate_log_probs``, needed by rollout correction): the log-prob of each
  sampled token under the distribution it was sampled from (verl's ``rollout.logprobs_mode`` default
  ``processed_logprobs``: the logits divided by the temperature, after top-k / top-p);
- ``routed_experts`` (``rollout.enable_rollout_routing_replay``, needed by routing replay R3): an
  integer array ``(tokens, layers, top_k)`` of the experts the router chose for every token of the
  sequence, prompt included (verl's agent loop places it at the prompt's offset and pads it).

:func:`score_tokens` computes both with one teacher-forced forward of the rollout's own model over
prompt + response, as the trainer computes its old log-probs (logits / T, log-softmax, gather). The
routes are the Hugging Face router's top-k recomputed from the router logits transformers returns
(``output_router_logits=True``): ``topk(softmax(logits in fp32), num_experts_per_tok)``, the
operations of ``Qwen3MoeTopKRouter.forward`` on the same logits, so the same indices in the same
(descending) order. No hooks or shared state: safe beside a generation running in another thread.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

__all__ = ["TokenScores", "response_entropies", "score_tokens"]


@dataclass
class TokenScores:
    """One request's extra fields: ``log_probs`` (one per response token) and ``routed_experts``.

    Attributes:
        log_probs: float per response token, or None when not asked for.
        routed_experts: int32 array ``(len(prompt) + len(response), layers, top_k)``, or None.
    """

    log_probs: list[float] | None
    routed_experts: np.ndarray | None


def _processed_logits(logits: torch.Tensor, temperature: float, top_p: float, top_k: int) -> torch.Tensor:
    """The sampler's logits: / T (T <= 0 is greedy: T = 1), then top-k, then top-p (as rlec's sampler)."""
    from transformers import TopKLogitsWarper, TopPLogitsWarper

    scores = logits.float()
    if temperature > 0 and temperature != 1.0:  # / 1.0 changes no bit: skipped, one (positions x vocabulary) pass less
        scores = scores / temperature
    if temperature > 0 and int(top_k) > 0:
        scores = TopKLogitsWarper(int(top_k))(None, scores)
    if temperature > 0 and top_p < 1.0:
        scores = TopPLogitsWarper(top_p)(None, scores)
    return scores


def score_tokens(model: torch.nn.Module, prompt_ids: Sequence[int], response_ids: Sequence[int], *, temperature: float = 1.0,
                 top_p: float = 1.0, top_k: int = -1, log_probs: bool = True, routes: bool = False) -> TokenScores:
    """Log-probs of ``response_ids`` given ``prompt_ids`` and the routers' top-k of every token (see the module docstring).

    Args:
        model: the rollout's causal LM (its weights produced the response).
        prompt_ids: the request's prompt token ids (non-empty).
        response_ids: the sampled response token ids.
        temperature, top_p, top_k: the request's sampling parameters.
        log_probs: compute the response tokens' log-probs.
        routes: record the routers' top-k (every layer, every token).

    Returns:
        A :class:`TokenScores`; its fields are None where not asked for.

    Raises:
        ValueError: an empty prompt, or ``routes`` asked of a model that is not MoE.
    """
    if not prompt_ids:
        raise ValueError("score_tokens needs a non-empty prompt")
    if not (log_probs or routes):
        return TokenScores(None, None)
    top_k_experts = int(getattr(model.config, "num_experts_per_tok", 0) or 0) if routes else 0
    if routes and top_k_experts < 1:
        raise ValueError(f"routed experts asked of {type(model).__name__}, whose config has no num_experts_per_tok (not an MoE model)")
    ids = torch.tensor([[*map(int, prompt_ids), *map(int, response_ids)]], dtype=torch.long, device=model.device)
    n_resp = len(response_ids)
    # the vocabulary projection at the response positions only (the token at t is predicted at t - 1):
    # the last n_resp + 1 positions; the full sequence would cost (prompt + response) x vocabulary floats
    keep = {"logits_to_keep": n_resp + 1} if log_probs else {"logits_to_keep": 1}
    with torch.inference_mode():
        out = model(input_ids=ids, output_router_logits=True, **keep) if routes else model(input_ids=ids, **keep)
    logits = out.logits[0]
    if routes and not getattr(out, "router_logits", None):
        raise ValueError(f"routed experts asked of {type(model).__name__}, which returns no router logits (not an MoE model)")
    lp = None
    if log_probs:
        n = len(prompt_ids)
        scores = _processed_logits(logits[:n_resp], temperature, top_p, top_k)  # positions n - 1 ... L - 2
        target = ids[0, n:].to(scores.device)
        lp = torch.log_softmax(scores, dim=-1).gather(-1, target[:, None])[:, 0].tolist()
    experts = None
    if routes:  # per layer (tokens, num_experts) -> (tokens, layers, top_k)
        chosen = [torch.softmax(lg.float(), dim=-1).topk(top_k_experts, dim=-1).indices for lg in out.router_logits]
        experts = torch.stack(chosen, dim=1).to("cpu", torch.int32).numpy()
    return TokenScores(lp, experts)


def response_entropies(model: torch.nn.Module, prompt_ids: Sequence[Sequence[int]], response_ids: Sequence[Sequence[int]], *,
                       temperature: float = 1.0, chunk: int = 64) -> list[list[float]]:
    """The entropy of the model's full next-token distribution at every response position, teacher-forced.

    For response token j of row i (predicted at position ``len(prompt_i) + j - 1``): ``H = logsumexp(z) -
    sum(softmax(z) z)`` over the whole vocabulary with ``z = logits / temperature`` (no top-k / top-p: the policy's own
    distribution), verl's ``entropy_from_logits`` (``verl/utils/torch_functional.py``), the formula behind verl's
    ``actor/entropy``. Rows are right-padded in chunks of ``chunk`` (causal attention: a real token never sees the
    padding after it; positions count from 0 as in an unpadded forward).

    Args:
        model: a causal LM (the rollout's, whose weights sampled the responses).
        prompt_ids: per row, the prompt's token ids (non-empty).
        response_ids: per row, the response's token ids (the stop token included, as verl's response mask).
        temperature: > 0; the logits are divided by it (1.0 changes nothing).
        chunk: rows per forward, >= 1.

    Returns:
        Per row, one entropy (nats) per response token; ``[]`` for an empty response.

    Raises:
        ValueError: rows of unequal count, an empty prompt, temperature <= 0 or chunk < 1.
    """
    from verl.utils.torch_functional import entropy_from_logits

    if len(prompt_ids) != len(response_ids):
        raise ValueError(f"response_entropies: {len(prompt_ids)} prompts for {len(response_ids)} responses")
    if not temperature > 0 or chunk < 1:
        raise ValueError(f"response_entropies: temperature must be > 0 and chunk >= 1, got {temperature}, {chunk}")
    if any(not p for p in prompt_ids):
        raise ValueError("response_entropies needs non-empty prompts")
    out: list[list[float]] = [[] for _ in prompt_ids]
    rows = [i for i, r in enumerate(response_ids) if len(r)]
    for start in range(0, len(rows), chunk):
        part = rows[start:start + chunk]
        seqs = [[*map(int, prompt_ids[i]), *map(int, response_ids[i])] for i in part]
        width = max(map(len, seqs))
        ids = torch.zeros((len(seqs), width), dtype=torch.long)
        mask = torch.zeros((len(seqs), width), dtype=torch.long)
        for k, seq in enumerate(seqs):
            ids[k, :len(seq)] = torch.tensor(seq, dtype=torch.long)
            mask[k, :len(seq)] = 1
        with torch.inference_mode():
            logits = model(input_ids=ids.to(model.device), attention_mask=mask.to(model.device)).logits.float()
        if temperature != 1.0:
            logits = logits / temperature
        for k, i in enumerate(part):
            n, m = len(prompt_ids[i]), len(response_ids[i])
            out[i] = entropy_from_logits(logits[k, n - 1:n - 1 + m]).tolist()
    return out
