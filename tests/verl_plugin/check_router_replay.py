"""Run by test_router_replay.py in its own process: verl's routing replay (R2 / R3) on the CPU layout's padded
(BSHD) micro-batches, through verl's own ``MegatronEngineWithLMHead.forward_step`` with the
``router_replay_bshd`` shim of rlec.cpu.padded_forward.

The check that does not share the shim's layout assumption: a sample's routes and log-probs do not depend on
the other samples of its micro-batch (causal attention, padding masked), so each sample run alone (a batch of
one: no padding) is the reference for the same sample inside a padded batch of rows of different lengths.
Prints one line ``RESULT_JSON {...}``.
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


def engine(policy, mode: str):
    from verl.workers.engine.megatron.transformer_impl import MegatronEngineWithLMHead

    eng = object.__new__(MegatronEngineWithLMHead)  # only what forward_step reads
    eng.engine_config = SimpleNamespace(use_fused_kernels=False, pad_to_length=False, use_remove_padding=False,
                                        dynamic_context_parallel=False, entropy_from_logits_with_chunking=False,
                                        context_parallel_size=1, router_replay=SimpleNamespace(mode=mode))
    eng.model_config = SimpleNamespace(hf_config=SimpleNamespace(architectures=[policy.hf_config.architectures[0]]),
                                       tokenizer=SimpleNamespace(pad_token_id=0),
                                       mtp=SimpleNamespace(enable=False, enable_train=False))
    eng.tf_config = policy.config
    eng.enable_routing_replay = True
    eng.mini_layer_topk_idx_list = []
    return eng


def batch(rows_p, rows_r, routes=None, record=False):
    import torch
    from verl.utils import tensordict_utils as tu

    nested = lambda xs: torch.nested.as_nested_tensor(xs, layout=torch.jagged)  # noqa: E731
    fields = {
        "input_ids": nested([torch.cat([p, r]) for p, r in zip(rows_p, rows_r)]),
        "position_ids": nested([torch.arange(len(p) + len(r)) for p, r in zip(rows_p, rows_r)]),
        "prompts": nested(rows_p), "responses": nested(rows_r),
        "loss_mask": nested([torch.ones(len(r), dtype=torch.long) for r in rows_r]),
        "response_mask": nested([torch.ones(len(r), dtype=torch.long) for r in rows_r]),
    }
    if routes is not None:
        fields["routed_experts"] = nested(routes)
    td = tu.get_tensordict(fields)
    tu.assign_non_tensor(td, calculate_entropy=False, temperature=1.0, record_r2_routes=record)
    return td


def main(hf_path: str) -> dict:
    import torch

    from rlec.megatron.model import build_model
    from rlec.megatron.parallel import ParallelLayout, init_parallel
    from rlec.cpu import padded_forward
    from rlec.cpu import verl_shims as cpu

    torch.set_num_threads(1)
    init_parallel(ParallelLayout(world_size=1))
    applied = cpu.enable_cpu(force=True, now=True)  # the CPU platform first: verl's modules ask for it on import
    assert "router_replay_bshd" in applied, applied
    from verl.utils.megatron.router_replay_patch import RouterReplayAction, apply_router_replay_patch
    from verl.utils.megatron.router_replay_utils import set_model_router_replay_action
    from verl.workers.utils.padding import response_from_nested
    apply_router_replay_patch()  # what verl's engine does when router_replay.mode is not disabled
    policy = build_model(hf_path, ParallelLayout(world_size=1), config_overrides={"enable_routing_replay": True})
    model = policy.chunks[0]
    model.eval()
    layers, topk, experts = policy.config.num_layers, policy.config.moe_router_topk, policy.config.num_moe_experts

    g = torch.Generator().manual_seed(0)
    vocab = policy.hf_config.vocab_size
    prompts, responses = [9, 4, 13], [6, 3, 5]
    rows_p = [torch.randint(1, vocab, (n,), generator=g) for n in prompts]
    rows_r = [torch.randint(1, vocab, (n,), generator=g) for n in responses]

    def forward(eng, td, action):
        set_model_router_replay_action(model, action)
        with torch.no_grad():
            out, _ = eng.forward_step(iter([td]), model, None, lambda *a, **k: None)
        return response_from_nested(out["log_probs"], td["loss_mask"])

    def record(rows):  # R2's record pass: the routes Megatron's routers chose, per sample (nested rows)
        eng = engine(policy, "R2")
        lp = forward(eng, batch(*zip(*rows), record=True), RouterReplayAction.RECORD)
        return list(eng.mini_layer_topk_idx_list[-1].unbind()), list(lp.unbind())

    rows = list(zip(rows_p, rows_r))
    batched_routes, batched_lp = record(rows)
    alone = [record([row]) for row in rows]
    result = {
        "record_shapes": [list(r.shape) for r in batched_routes],
        "lengths": [len(p) + len(r) for p, r in rows],
        "record_equal_alone": all(torch.equal(batched_routes[i].sort(-1).values, alone[i][0][0].sort(-1).values)
                                  for i in range(len(rows))),
        "native_lp_vs_alone": max(float((batched_lp[i] - alone[i][1][0]).abs().max()) for i in range(len(rows))),
    }

    # R2's replay: the recorded routes replayed (padding: native) give the native log-probs
    eng = engine(policy, "R2")
    lp = forward(eng, batch(rows_p, rows_r, routes=batched_routes), RouterReplayAction.REPLAY_FORWARD)
    result["r2_replay_lp_vs_native"] = max(float((lp[i] - batched_lp[i]).abs().max()) for i in range(len(rows)))

    # R3: routes as a rollout returns them (every token but the last), here random and unlike the native ones
    targets = [torch.stack([torch.stack([torch.randperm(experts, generator=g)[:topk] for _ in range(layers)])
                            for _ in range(n - 1)]).to(torch.int16) for n in result["lengths"]]
    os.environ[padded_forward.ROUTER_REPLAY_LOG_ENV] = str(Path(os.environ.get("TMPDIR", "/tmp")) / f"rlec_replay_{os.getpid()}")

    def replay(idx):
        eng = engine(policy, "R3")
        td = batch([rows_p[i] for i in idx], [rows_r[i] for i in idx], routes=[targets[i] for i in idx])
        return list(forward(eng, td, RouterReplayAction.REPLAY_FORWARD).unbind())

    r3 = replay(range(len(rows)))
    r3_alone = [replay([i])[0] for i in range(len(rows))]
    log_files = list(Path(os.environ[padded_forward.ROUTER_REPLAY_LOG_ENV]).parent.glob(Path(os.environ[padded_forward.ROUTER_REPLAY_LOG_ENV]).name + ".*"))
    records = [json.loads(line) for f in log_files for line in f.read_text().splitlines()]
    batched_records = [r for r in records if r["action"] == "REPLAY_FORWARD" and r["rows"] == max(result["lengths"]) * len(rows)]
    result.update(
        r3_lp_vs_alone=max(float((r3[i] - r3_alone[i]).abs().max()) for i in range(len(rows))),
        r3_lp_vs_native=min(float((r3[i] - batched_lp[i]).abs().max()) for i in range(len(rows))),
        r3_records=len(batched_records),
        r3_replayed=[r["replayed"] for r in batched_records],
        r3_equal=[r["replayed_equal_target"] for r in batched_records],
        r3_native_differs=[r["native_differs"] for r in batched_records],
        layers=layers,
    )
    for f in log_files:
        f.unlink()

    # verl's own functions (the shim's __wrapped__): the batched replay fails as measured on layout=cpu
    from verl.workers.engine.megatron import transformer_impl

    shimmed = transformer_impl.set_router_replay_data
    transformer_impl.set_router_replay_data = shimmed.__wrapped__
    try:
        replay(range(len(rows)))
        result["unpatched_error"] = None
    except RuntimeError as err:
        result["unpatched_error"] = str(err)
    finally:
        transformer_impl.set_router_replay_data = shimmed
    return result


if __name__ == "__main__":
    print("RESULT_JSON " + json.dumps(main(sys.argv[1])), flush=True)
