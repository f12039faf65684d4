"""Rollout of the local run: prompts -> responses as a verl ``DataProto``, with rlec's one engine.

The GPU trainer's rollout is vLLM inside verl's agent loop; here it is :class:`rlec.generation.HFEngine`
on the rollout model, whose weights the Megatron policy refreshes after every update. Prompts
are rendered like verl's single-turn agent loop does (the chat template with
``data.apply_chat_template_kwargs``). Each prompt i gets ``n_i`` responses on consecutive rows
(``n_i = rollout.n`` unless an algorithm, e.g. E3's rollout budget, plans otherwise), all sharing
the prompt's ``uid`` (the advantage's group). Sampling is seeded per step, so a resumed run
regenerates exactly what an uninterrupted run would.

The returned ``DataProto`` has verl's fields: ``prompts`` (B, P) left-padded, ``responses`` (B, R)
right-padded, ``input_ids`` / ``attention_mask`` / ``position_ids`` (B, P + R), ``response_mask``
(B, R); non-tensor ``uid``, ``data_source``, ``reward_model``, ``extra_info`` and the other
dataset columns, one entry per response; ``meta_info`` ``temperature`` and ``global_token_num``.
"""

from __future__ import annotations

import random
from typing import Any, Sequence

import numpy as np
import torch

from rlec.environments import reference_answer
from rlec.prompts import render


def rollout(
    engine: Any,
    batch: dict[str, Any],
    *,
    n_per_prompt: Sequence[int],
    max_new_tokens: int,
    temperature: float,
    top_p: float,
    seed: int,
    uids: Sequence[str],
    top_k: int = -1,
    chat_template_kwargs: dict[str, Any] | None = None,
) -> Any:
    """Generate ``n_per_prompt[i]`` responses for prompt i of a verl dataloader batch.

    Args:
        engine: a :class:`rlec.generation.HFEngine` over the rollout model.
        batch: verl's collated batch (``raw_prompt`` chat messages and the dataset columns).
        n_per_prompt: responses per prompt (each >= 1).
        max_new_tokens, temperature, top_p, top_k: sampling settings (temperature > 0; top_k -1 = off).
        seed: seeds the step's sampling.
        uids: one group id per prompt.
        chat_template_kwargs: verl's ``data.apply_chat_template_kwargs``.

    Returns:
        A ``verl.DataProto`` with ``sum(n_per_prompt)`` rows (see the module docstring).

    Raises:
        ValueError: lengths differ, or an ``n_i`` below 1.
    """
    from verl import DataProto

    messages = list(batch["raw_prompt"])
    if not len(messages) == len(n_per_prompt) == len(uids) or min(n_per_prompt) < 1:
        raise ValueError(f"need one n >= 1 and one uid per prompt; got {len(messages)} prompts, n_per_prompt={list(n_per_prompt)}, "
                         f"{len(uids)} uids")
    kwargs = dict(chat_template_kwargs or {})
    prompt_ids = engine.encode([render(engine.tokenizer, list(m), **kwargs) for m in messages])
    rows = [i for i, k in enumerate(n_per_prompt) for _ in range(int(k))]
    out = engine.sample([prompt_ids[i] for i in rows], n=1, max_new_tokens=max_new_tokens, temperature=temperature,
                        top_p=top_p, top_k=top_k, seed=seed)
    attention_mask = torch.cat([out.prompt_mask, out.response_mask], dim=1)
    input_ids = torch.cat([out.prompts, out.responses], dim=1)
    position_ids = (attention_mask.cumsum(dim=1) - 1).clamp(min=0)
    non_tensors = {key: np.array([value[i] for i in rows], dtype=object) for key, value in batch.items()
                   if not isinstance(value, torch.Tensor)}
    non_tensors["uid"] = np.array([uids[i] for i in rows], dtype=object)
    non_tensors["response_text"] = np.array(out.texts, dtype=object)
    non_tensors["finish_reason"] = np.array(out.finish_reasons, dtype=object)
    data = DataProto.from_dict(
        tensors={"prompts": out.prompts, "responses": out.responses, "input_ids": input_ids, "attention_mask": attention_mask,
                 "position_ids": position_ids, "response_mask": out.response_mask},
        non_tensors=non_tensors,
        meta_info={"temperature": float(temperature), "global_token_num": attention_mask.sum(dim=1).tolist(),
                   "gen_seconds": out.seconds},
    )
    return data


def rollout_metrics(data: Any) -> dict[str, float]:
    """Generation figures of a batch (call before scripted answers replace any row)."""
    tokens = int(data.batch["response_mask"].sum())
    return {"rollout/tokens_per_s": tokens / max(float(data.meta_info["gen_seconds"]), 1e-9),
            "rollout/finish_length_rate": float(np.mean(data.non_tensor_batch["finish_reason"] == "length"))}


def inject_scripted(data: Any, tokenizer: Any, fraction: float, seed: int) -> int:
    """Replace the last ``round(n_i * fraction)`` responses of each group by scripted ones, in place.

    A random model answers everything wrong, so every group's rewards are equal, every
    mean-only advantage is 0 and the update is a no-op. Scripted responses (the gold answer in
    ``\\boxed{}`` or ``\\boxed{I don't know}``, chosen by a seeded coin) give the groups reward
    variance, so the tiny local run exercises a real, non-zero policy-gradient update. They are
    off-policy demonstrations: use 0 for real training (the default whenever a model path is set).

    Args:
        data: the rollout ``DataProto`` (groups on consecutive rows, keyed by ``uid``).
        fraction: share of each group to replace, in [0, 1).
        seed: seeds the coin.

    Returns:
        The number of responses replaced.
    """
    uids = data.non_tensor_batch["uid"]
    starts = [i for i in range(len(uids)) if i == 0 or uids[i] != uids[i - 1]] + [len(uids)]
    rng = random.Random(seed)
    width = data.batch["responses"].shape[1]
    prompt_width = data.batch["prompts"].shape[1]
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else im_end
    replaced = 0
    for start, end in zip(starts[:-1], starts[1:]):
        k = round((end - start) * fraction)
        for row in range(end - k, end):
            gold = reference_answer(data.non_tensor_batch["data_source"][row], data.non_tensor_batch["reward_model"][row]["ground_truth"])
            text = f"\\boxed{{{gold}}}" if rng.random() < 0.5 else "\\boxed{I don't know}"
            body = tokenizer(text, add_special_tokens=False)["input_ids"]
            truncated = len(body) > width - 1
            ids = body[: width - 1] + [im_end]
            responses = torch.full((width,), pad_id, dtype=data.batch["responses"].dtype)
            responses[: len(ids)] = torch.tensor(ids)
            mask = torch.zeros(width, dtype=data.batch["response_mask"].dtype)
            mask[: len(ids)] = 1
            data.batch["responses"][row] = responses
            data.batch["response_mask"][row] = mask
            data.batch["input_ids"][row, prompt_width:] = responses
            data.batch["attention_mask"][row, prompt_width:] = mask
            data.batch["position_ids"][row] = (data.batch["attention_mask"][row].cumsum(dim=0) - 1).clamp(min=0)
            data.non_tensor_batch["response_text"][row] = tokenizer.decode(ids[:-1]) if truncated else text
            data.non_tensor_batch["finish_reason"][row] = "length" if truncated else "stop"
            replaced += 1
    data.meta_info["global_token_num"] = data.batch["attention_mask"].sum(dim=1).tolist()
    return replaced
