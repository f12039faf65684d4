"""Run by test_cpu.py in its own process: verl's Megatron LM-head forward with response-only logits
(rlec.cpu.verl_shims's ``response_only_logits`` shim) equals verl's full-sequence computation.

Calls verl's own ``MegatronEngineWithLMHead.forward_step`` on the tiny Qwen3-MoE twice per batch
layout, unpatched (logits at every position) and patched, and prints one line ``RESULT_JSON {...}``
(under ``torchrun --nproc_per_node 2``: at TP 2 with sequence parallel, the worst difference over the ranks):
per layout the positions the vocabulary projection ran on (full, windowed), the largest differences of the response log-probs, the response entropies and every
parameter gradient of a weighted response loss, and the gradients' scale.
"""

from __future__ import annotations

import json
import os
import sys
import warnings
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
warnings.filterwarnings("ignore")
os.environ["VERL_PLATFORM"] = "cpu"


def engine(policy, fields):
    from verl.workers.engine.megatron.transformer_impl import MegatronEngineWithLMHead

    eng = object.__new__(MegatronEngineWithLMHead)  # only what forward_step reads
    eng.engine_config = SimpleNamespace(use_fused_kernels=False, pad_to_length=False, use_remove_padding=False,
                                        dynamic_context_parallel=False, entropy_from_logits_with_chunking=False,
                                        context_parallel_size=1)
    eng.model_config = SimpleNamespace(hf_config=SimpleNamespace(architectures=[policy.hf_config.architectures[0]]),
                                       tokenizer=SimpleNamespace(pad_token_id=0),
                                       mtp=SimpleNamespace(enable=False, enable_train=False))
    eng.tf_config = policy.config
    eng.enable_routing_replay = False
    return eng


def batches(vocab: int):
    """Two micro-batches as verl's trainers hand them to the worker: rows of different prompt and
    response lengths. ``tq``: nested per-sample fields (the TransferQueue trainer's); ``padded``:
    ``left_right_2_no_padding`` of a left/right-padded batch (the DataProto trainer's)."""
    import torch
    from verl.utils import tensordict_utils as tu
    from verl.workers.utils.padding import left_right_2_no_padding

    g = torch.Generator().manual_seed(0)
    prompts, responses = [9, 4, 13], [6, 3, 5]
    rows_p = [torch.randint(1, vocab, (n,), generator=g) for n in prompts]
    rows_r = [torch.randint(1, vocab, (n,), generator=g) for n in responses]
    nested = lambda xs: torch.nested.as_nested_tensor(xs, layout=torch.jagged)  # noqa: E731
    tq = tu.get_tensordict({
        "input_ids": nested([torch.cat([p, r]) for p, r in zip(rows_p, rows_r)]),
        "position_ids": nested([torch.arange(len(p) + len(r)) for p, r in zip(rows_p, rows_r)]),
        "prompts": nested(rows_p), "responses": nested(rows_r),
        "loss_mask": nested([torch.ones(len(r), dtype=torch.long) for r in rows_r]),
        "response_mask": nested([torch.ones(len(r), dtype=torch.long) for r in rows_r]),
    })
    P, R = max(prompts), max(responses)
    b = len(prompts)
    ids = torch.zeros(b, P + R, dtype=torch.long)
    attn = torch.zeros(b, P + R, dtype=torch.long)
    for i, (p, r) in enumerate(zip(rows_p, rows_r)):
        ids[i, P - len(p):P], ids[i, P:P + len(r)] = p, r
        attn[i, P - len(p):P + len(r)] = 1
    padded = left_right_2_no_padding(tu.get_tensordict({
        "input_ids": ids, "attention_mask": attn, "position_ids": (attn.cumsum(1) - 1).clamp(min=0),
        "prompts": ids[:, :P], "responses": ids[:, P:], "response_mask": attn[:, P:],
    }))
    for td in (tq, padded):
        tu.assign_non_tensor(td, calculate_entropy=True, temperature=0.7)
    return {"tq": tq, "padded": padded}


def response(values, batch):
    from verl.workers.utils.padding import no_padding_2_padding, response_from_nested

    if batch["loss_mask"].is_nested:
        return response_from_nested(values, batch["loss_mask"]).to_padded_tensor(0.0)
    return no_padding_2_padding(values, batch) * batch["response_mask"]


def run(eng, model, batch, weights):
    seen = []  # the positions the vocabulary projection ran on
    handle = model.output_layer.register_forward_hook(lambda mod, args, out: seen.append(int(out[0].shape[0])))
    try:
        out, _ = eng.forward_step(iter([batch]), model, None, lambda *a, **k: None)
    finally:
        handle.remove()
    lp, ent = response(out["log_probs"], batch), response(out["entropy"], batch)
    model.zero_grad(set_to_none=True)
    (lp * weights[: lp.shape[0], : lp.shape[1]]).sum().backward()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
    return lp.detach(), ent.detach(), grads, seen


def main(hf_path: str) -> dict:
    import torch

    from rlec.megatron.model import build_model
    from rlec.megatron.parallel import ParallelLayout, init_parallel
    from rlec.cpu import verl_shims as cpu

    torch.set_num_threads(1)
    world = int(os.environ.get("WORLD_SIZE", "1"))  # under torchrun: TP = the world size, with sequence parallel
    layout = ParallelLayout(world_size=world, tp=world)
    init_parallel(layout)
    applied = cpu.enable_cpu(force=True, now=True)  # the CPU platform first: verl's engine modules ask for it on import
    from verl.workers.engine.megatron.transformer_impl import MegatronEngineWithLMHead

    assert "response_only_logits" in applied, applied
    policy = build_model(hf_path, layout, config_overrides={"sequence_parallel": world > 1})
    assert bool(policy.config.sequence_parallel) == (world > 1)
    model = policy.chunks[0]
    eng = engine(policy, None)
    patched = (MegatronEngineWithLMHead.forward_step, MegatronEngineWithLMHead._lm_head_logits_processor)
    weights = torch.randn(8, 16, generator=torch.Generator().manual_seed(1))
    result = {}
    for name, batch in batches(policy.hf_config.vocab_size).items():
        MegatronEngineWithLMHead.forward_step, MegatronEngineWithLMHead._lm_head_logits_processor = (
            patched[0].__wrapped__, patched[1].__wrapped__)  # verl's own: logits at every position
        full = run(eng, model, batch, weights)
        MegatronEngineWithLMHead.forward_step, MegatronEngineWithLMHead._lm_head_logits_processor = patched
        win = run(eng, model, batch, weights)
        result[name] = {
            "lp_diff": float((full[0] - win[0]).abs().max()),
            "entropy_diff": float((full[1] - win[1]).abs().max()),
            "lp_scale": float(full[0].abs().max()),
            "same_params": sorted(full[2]) == sorted(win[2]) and len(full[2]) > 0,
            "grad_diff": max(float((full[2][k] - win[2][k]).abs().max()) for k in full[2]),
            "grad_scale": max(float(v.abs().max()) for v in full[2].values()),
            "positions_full": full[3], "positions_windowed": win[3],
            "output_layer_grad": float(full[2][next(k for k in full[2] if "output_layer" in k)].abs().max()),
            "sequence_parallel": bool(model.output_layer.sequence_parallel),  # restored after the windowed forward
        }
    if world > 1:  # each TP rank compared its own shards: the worst over the ranks
        for r in result.values():
            for key in ("lp_diff", "entropy_diff", "grad_diff"):
                value = torch.tensor([r[key]], dtype=torch.float64)
                torch.distributed.all_reduce(value, op=torch.distributed.ReduceOp.MAX)
                r[key] = float(value)
    result["world"] = world
    return result


if __name__ == "__main__":
    out = main(sys.argv[1])
    if int(os.environ.get("RANK", "0")) == 0:
        print("RESULT_JSON " + json.dumps(out), flush=True)
