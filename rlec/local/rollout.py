"""Rollout for the local run: n sampled responses per prompt with transformers ``generate``.

The GPU trainer's rollout engine is vLLM inside verl; on CPU the same role is played by the HF
model, whose weights are refreshed from the Megatron policy after every update (the weight sync).
Sampling is seeded per step (``torch.manual_seed(seed + step)``), so a resumed run regenerates
exactly what an uninterrupted run would.

Tensors follow verl's DataProto conventions: ``prompts`` left-padded (B, P), ``responses``
right-padded (B, R), ``attention_mask`` over the concatenation (B, P + R), ``response_mask`` (B, R)
covering each response up to and including its stop token.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Sequence

import torch

from rlec.prompts import render


@dataclass
class RolloutBatch:
    """One step's rollouts: B = prompts x n rows, grouped consecutively (row i belongs to prompt i // n).

    Attributes:
        prompts: (B, P) int64, left-padded prompt ids.
        responses: (B, R) int64, right-padded response ids.
        attention_mask: (B, P + R) int64, 1 on real tokens.
        response_mask: (B, R) float32, 1 on response tokens that count in the loss.
        texts: B decoded responses (special tokens removed).
        finish_reasons: B values, "stop" (a stop token ended it) or "length".
        group_index: B group keys (the prompt's uid), numpy object array for verl's estimator.
        gen_seconds: wall time of generation.
    """

    prompts: torch.Tensor
    responses: torch.Tensor
    attention_mask: torch.Tensor
    response_mask: torch.Tensor
    texts: list[str]
    finish_reasons: list[str]
    group_index: Any
    gen_seconds: float
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def input_ids(self) -> torch.Tensor:
        """(B, P + R) prompt and response ids."""
        return torch.cat([self.prompts, self.responses], dim=1)

    @property
    def response_tokens(self) -> int:
        """Generated tokens that count (sum of the response mask)."""
        return int(self.response_mask.sum().item())


def stop_token_ids(tokenizer: Any, model_config: Any) -> list[int]:
    """Token ids that end a response: the model's eos id(s), ``<|im_end|>`` and ``<|endoftext|>``."""
    ids: set[int] = set()
    eos = getattr(model_config, "eos_token_id", None)
    ids.update(eos if isinstance(eos, (list, tuple)) else ([eos] if eos is not None else []))
    for token in ("<|im_end|>", "<|endoftext|>"):
        tid = tokenizer.convert_tokens_to_ids(token)
        if isinstance(tid, int) and tid != tokenizer.unk_token_id:
            ids.add(tid)
    return sorted(ids)


class InverseCDFSampler:
    """A transformers logits processor that draws the next token itself (inverse-CDF sampling).

    ``generate`` then runs greedy (``do_sample=False``) over the returned scores: 0 at the drawn
    token, -inf elsewhere. The draw is an exact sample from ``softmax(scores / temperature)``
    (after top-p filtering when ``top_p < 1``): a float64 cumulative sum per row and one uniform
    number per row. Written here because ``torch.multinomial`` is the rollout's bottleneck on
    CPU: 155-170 ms per draw over a 32 x 151,936 batch (65% of the local rollout time, measured
    with 1 and 2 threads), against ~40 ms for this.

    Called by ``generate`` with ``input_ids`` (B, L) and ``scores`` (B, V) in any float dtype;
    returns (B, V) float32 scores, 0 at the drawn token and -inf elsewhere. The draws use torch's
    global generator (seeded by :func:`generate`).

    Args:
        temperature: > 0; applied before top-p, as transformers does.
        top_p: nucleus mass in (0, 1]; < 1 applies transformers' ``TopPLogitsWarper`` first.

    Raises:
        ValueError: ``temperature <= 0`` or ``top_p`` outside (0, 1].
    """

    def __init__(self, temperature: float = 1.0, top_p: float = 1.0) -> None:
        from transformers import TopPLogitsWarper

        if not temperature > 0:
            raise ValueError(f"temperature must be > 0 for sampling, got {temperature}")
        if not 0 < top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {top_p}")
        self.temperature = float(temperature)
        self.top_p = TopPLogitsWarper(top_p) if top_p < 1.0 else None

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        scores = scores.float() / self.temperature
        if self.top_p is not None:
            scores = self.top_p(input_ids, scores)
        cdf = torch.softmax(scores, dim=-1).double().cumsum_(dim=-1)
        # u in (0, total]: the first index with cdf >= u never lands on a zero-probability token
        u = (1.0 - torch.rand(scores.shape[0], 1, dtype=torch.float64, device=scores.device)) * cdf[:, -1:]
        tokens = torch.searchsorted(cdf, u).clamp_(max=scores.shape[-1] - 1)
        out = torch.full_like(scores, float("-inf"))
        return out.scatter_(1, tokens, 0.0)


@torch.no_grad()
def generate(
    model: torch.nn.Module,
    tokenizer: Any,
    messages: Sequence[list[dict[str, str]]],
    group_keys: Sequence[str],
    *,
    n: int,
    max_new_tokens: int,
    temperature: float = 1.0,
    top_p: float = 1.0,
    seed: int = 0,
) -> RolloutBatch:
    """Sample ``n`` responses for each prompt.

    Args:
        model: a causal LM (eval mode is set here).
        tokenizer: its tokenizer (chat template applied via :func:`rlec.prompts.render`).
        messages: the chat messages of each prompt.
        group_keys: one key per prompt (the advantage's group id).
        n: responses per prompt (>= 1).
        max_new_tokens: response length limit (>= 1).
        temperature, top_p: sampling settings (temperature > 0).
        seed: seeds ``torch``'s RNG right before generating.

    Returns:
        A :class:`RolloutBatch` with ``len(messages) * n`` rows.

    Raises:
        ValueError: bad n / max_new_tokens / temperature, or lengths that differ.
    """
    import numpy as np

    if n < 1 or max_new_tokens < 1 or not temperature > 0 or len(messages) != len(group_keys):
        raise ValueError(f"need n>=1, max_new_tokens>=1, temperature>0 and one key per prompt; got n={n}, "
                         f"max_new_tokens={max_new_tokens}, temperature={temperature}, {len(messages)} prompts / {len(group_keys)} keys")
    texts = [render(tokenizer, m) for m in messages]
    tokenizer.padding_side = "left"
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    enc = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
    stops = stop_token_ids(tokenizer, model.config)
    model.eval()
    torch.manual_seed(seed)
    start = time.perf_counter()
    from transformers import GenerationConfig, LogitsProcessorList

    # Greedy over the sampler's one-hot scores. transformers fills every field left None from the
    # model's generation_config; sampling warpers do nothing without do_sample, and the fields that
    # would change the distribution before the sampler (repetition penalty, n-gram blocking) are set
    # to their neutral values here.
    config = GenerationConfig(
        do_sample=False, max_new_tokens=int(max_new_tokens), pad_token_id=pad_id, eos_token_id=stops,
        repetition_penalty=1.0, no_repeat_ngram_size=0,
    )  # fmt: skip
    out = model.generate(
        input_ids=enc["input_ids"].repeat_interleave(n, dim=0),  # the n samples of a prompt are consecutive rows
        attention_mask=enc["attention_mask"].repeat_interleave(n, dim=0),
        generation_config=config,
        logits_processor=LogitsProcessorList([InverseCDFSampler(temperature, top_p)]),
    )
    gen_seconds = time.perf_counter() - start
    width = enc["input_ids"].shape[1]
    prompts = enc["input_ids"].repeat_interleave(n, dim=0)
    prompt_mask = enc["attention_mask"].repeat_interleave(n, dim=0)
    responses = out[:, width:]
    if responses.shape[1] < max_new_tokens:  # every row stopped early: pad to a fixed width
        fill = torch.full((responses.shape[0], max_new_tokens - responses.shape[1]), pad_id, dtype=responses.dtype)
        responses = torch.cat([responses, fill], dim=1)
    is_stop = torch.isin(responses, torch.tensor(stops))
    # response_mask: tokens up to and including the first stop token
    before_stop = torch.cumsum(is_stop.int(), dim=1) - is_stop.int() == 0
    response_mask = before_stop.float()
    finish = ["stop" if row.any() else "length" for row in is_stop]
    responses = torch.where(before_stop, responses, torch.full_like(responses, pad_id))
    decoded = tokenizer.batch_decode(responses, skip_special_tokens=True)
    attention_mask = torch.cat([prompt_mask, response_mask.long()], dim=1)
    keys = np.array([k for k in group_keys for _ in range(n)], dtype=object)
    return RolloutBatch(prompts, responses, attention_mask, response_mask, decoded, finish, keys, gen_seconds)


def inject_scripted(
    batch: RolloutBatch,
    tokenizer: Any,
    golds: Sequence[str],
    n: int,
    fraction: float,
    seed: int,
) -> int:
    """Replace the last ``round(n * fraction)`` responses of each group by scripted ones, in place.

    A random model answers everything wrong, so every group's rewards are equal, every
    mean-only advantage is 0 and the update is a no-op. Scripted responses (the gold answer in
    ``\\boxed{}`` or ``\\boxed{I don't know}``, chosen by a seeded coin) give the groups reward
    variance, so the tiny local run exercises a real, non-zero policy-gradient update (the
    policy's log-probability of the scripted answers rises over steps). They are off-policy
    demonstrations: use 0 for real training (the default whenever ``MODEL_PATH`` is set).

    Args:
        batch: the rollouts of ``len(golds)`` prompts x ``n``.
        golds: one gold answer per prompt.
        fraction: share of each group to replace, in [0, 1).
        seed: seeds the coin.

    Returns:
        The number of responses replaced.
    """
    import random

    k = round(n * fraction)
    if k == 0:
        return 0
    rng = random.Random(seed)
    width = batch.responses.shape[1]
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else im_end
    replaced = 0
    for g, gold in enumerate(golds):
        for row in range(g * n + n - k, g * n + n):
            text = f"\\boxed{{{gold}}}" if rng.random() < 0.5 else "\\boxed{I don't know}"
            body = tokenizer(text, add_special_tokens=False)["input_ids"]
            truncated = len(body) > width - 1
            ids = body[: width - 1] + [im_end]
            batch.responses[row] = pad_id
            batch.responses[row, : len(ids)] = torch.tensor(ids)
            batch.response_mask[row] = 0.0
            batch.response_mask[row, : len(ids)] = 1.0
            prompt_width = batch.prompts.shape[1]
            batch.attention_mask[row, prompt_width:] = batch.response_mask[row].long()
            batch.texts[row] = tokenizer.decode(ids[:-1]) if truncated else text
            batch.finish_reasons[row] = "length" if truncated else "stop"
            replaced += 1
    return replaced
