"""Multi-process checks the tests launch with torchrun (gloo on CPU), run as one *plan* per launch.

    torchrun --nproc_per_node 4 tests/megatron/megatron_checks.py '[
        {"convert": ["--hf-model-path", "M", "--output-path", "C", "--tp", "2", "--ep", "2", "--verify"]},
        {"train": {"hf": "M", "ckpt": "C", "tp": 2, "ep": 2, "out": "R"}}]'

Steps run in order in the same processes (one Megatron import per process instead of one per
step: on 2 shared cores the imports dominate the test time) and rank 0 prints one line
``RESULT_JSON [result of each step]``. ``convert`` runs ``tools/convert_hf_to_mcore.py``'s
``main(argv)`` (the command line without the final ``sys.exit``) and reports its exit status;
``distopt`` compares one step of Megatron's distributed optimizer with the plain one; ``routes``
compares Megatron's router choices with the CPU rollout's ``routed_experts`` for the same tokens.

``controls``: the checkpoint (written at another layout) loads at TP1 through verl's
``load_mcore_dist_weights`` and verifies (on a GPU: into the TE model); then two
negative controls: a deliberately wrong mapping (gate/up swapped when mbridge fuses an expert's
``linear_fc1``) and a 1e-6 change to one norm weight must both fail verification.

``train``: verl's own ``load_mcore_dist_weights`` loads the converted checkpoint into a DDP
model; log-probs, one Megatron train step (forward-backward schedule, DDP, Megatron Adam,
``finalize_model_grads``) and a resume (save with optimizer state, load into a fresh model and
optimizer, one more identical step on both) are compared with Hugging Face autograd on rank 0.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import warnings
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
warnings.filterwarnings("ignore")
# torch is imported inside the functions: the dist-checkpoint writer spawns a helper process that
# re-imports this file, and it should not pay for torch.

RESULT_PREFIX = "RESULT_JSON "


def controls(args: argparse.Namespace) -> dict:
    import torch
    from verl.utils.model import load_mcore_dist_weights

    from rlec.megatron.model import build_model, load_hf_weights
    from rlec.megatron.parallel import ParallelLayout, init_parallel
    from rlec.megatron.verify import verify_against_hf

    layout = ParallelLayout(world_size=int(os.environ.get("WORLD_SIZE", "1")))
    init_parallel(layout)
    policy = build_model(args.hf, layout, load_weights=False)
    load_mcore_dist_weights(policy.chunks, args.ckpt)  # verl's own loader, as its Megatron engine calls it
    resharded = verify_against_hf(policy)

    bridge = policy.bridge
    to_mcore = bridge._weight_to_mcore_format

    def swapped(name: str, weights: list[Any]) -> Any:  # the deliberate mapping bug
        if "linear_fc1" in name and len(weights) == 2:
            weights = [weights[1], weights[0]]
        return to_mcore(name, weights)

    bridge._weight_to_mcore_format = swapped
    load_hf_weights(policy, args.hf)
    del bridge._weight_to_mcore_format
    wrong_mapping = verify_against_hf(policy)

    load_hf_weights(policy, args.hf)
    with torch.no_grad():
        norm = policy.unwrapped()[0].decoder.final_layernorm.weight
        norm[0] += 1e-6
    perturbed = verify_against_hf(policy)
    return {name: report.__dict__ for name, report in
            (("resharded", resharded), ("wrong_mapping", wrong_mapping), ("perturbed", perturbed))}


def _hf_reference(hf: str, ids: Any, mask: Any, adv: Any, mb: int, lr: float, clip: float) -> dict:
    import torch
    from transformers import AutoModelForCausalLM

    from rlec.megatron.hf_sync import model_to_hub_state

    model = AutoModelForCausalLM.from_pretrained(hf, dtype=torch.float32)
    position_ids = (mask.cumsum(1) - 1).clamp(min=0)
    log_probs = []
    losses = []
    for start in range(0, len(ids), mb):
        rows = slice(start, start + mb)
        logits = model(input_ids=ids[rows], attention_mask=mask[rows], position_ids=position_ids[rows]).logits
        lp = torch.log_softmax(logits[:, :-1].float(), -1).gather(-1, ids[rows, 1:, None])[..., 0]
        keep = (mask[rows, 1:] * mask[rows, :-1]).float()
        log_probs.append(torch.cat([torch.zeros(lp.shape[0], 1), lp * keep], 1))
        losses.append(_policy_gradient_loss(lp * keep, keep, adv[rows]))
    loss = sum(losses) / len(losses)
    loss.backward()
    grads = model_to_hub_state(model, {k: p.grad.clone() for k, p in model.named_parameters()})
    grad_norm = float(torch.sqrt(sum((p.grad.double() ** 2).sum() for p in model.parameters())))
    torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
    torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0).step()
    weights = model_to_hub_state(model, {k: p.detach().clone() for k, p in model.named_parameters()})
    return {"loss": float(loss), "log_probs": torch.cat(log_probs).detach(), "grads": grads, "grad_norm": grad_norm, "weights": weights}


def _policy_gradient_loss(log_probs: Any, keep: Any, adv: Any) -> Any:
    """REINFORCE-style loss with a per-sequence advantage: -mean_rows(adv * mean_tokens(log p))."""
    per_row = (log_probs * keep).sum(1) / keep.sum(1).clamp(min=1)
    return -(per_row * adv).mean()


def train(args: argparse.Namespace) -> dict | None:
    import torch
    from verl.utils.model import load_mcore_dist_weights

    from rlec.megatron.checkpoint import load_dist_checkpoint, save_dist_checkpoint
    from rlec.megatron.logprobs import compute_log_probs
    from rlec.megatron.model import build_model, export_hf_weights
    from rlec.megatron.parallel import ParallelLayout, init_parallel
    from rlec.megatron.training import build_optimizer, forward_backward, train_step

    layout = ParallelLayout(tp=args.tp, ep=args.ep, world_size=int(os.environ.get("WORLD_SIZE", "1")))
    init_parallel(layout)
    lr, clip, mb = 1e-3, 1.0, 2
    policy = build_model(args.hf, layout, load_weights=False, wrap_ddp=True)
    load_mcore_dist_weights(policy.chunks, args.ckpt)  # verl's own loader, as its Megatron engine calls it
    optimizer = build_optimizer(policy, lr=lr, clip_grad=clip)

    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, policy.hf_config.vocab_size, (4, 14), generator=gen)
    mask = torch.ones_like(ids)
    mask[1, :4] = 0  # left padding (a short prompt)
    mask[2, 10:] = 0  # right padding (a short response)
    adv = torch.tensor([1.0, -0.5, 0.25, 2.0])

    def loss_fn(log_probs: Any, batch: dict) -> tuple[Any, dict]:
        keep = batch["valid"].float()
        keep[:, 0] = 0
        return _policy_gradient_loss(log_probs, keep, batch["adv"]), {"tokens": keep.sum()}

    old_log_probs = compute_log_probs(policy, ids, mask, micro_batch_size=mb)
    first = forward_backward(policy, ids, mask, loss_fn, extra={"adv": adv}, micro_batch_size=mb)
    grads = {k: v.clone() for k, v in export_hf_weights(policy, grads=True)}
    step = train_step(policy, optimizer, ids, mask, loss_fn, extra={"adv": adv}, micro_batch_size=mb)
    weights = {k: v.clone() for k, v in export_hf_weights(policy)}

    save_dist_checkpoint(policy, args.out, optimizer=optimizer, step=1, user_state={"seed": 0})
    fresh = build_model(args.hf, layout, load_weights=False, wrap_ddp=True)
    fresh_optimizer = build_optimizer(fresh, lr=lr, clip_grad=clip)
    resumed = load_dist_checkpoint(fresh, args.out, optimizer=fresh_optimizer)
    resumed_weights = {k: v.clone() for k, v in export_hf_weights(fresh)}
    again = train_step(policy, optimizer, ids, mask, loss_fn, extra={"adv": adv}, micro_batch_size=mb)
    again_weights = {k: v.clone() for k, v in export_hf_weights(policy)}
    # The fresh model's config now drives the schedule (build_optimizer rewired it): step it too.
    again_fresh = train_step(fresh, fresh_optimizer, ids, mask, loss_fn, extra={"adv": adv}, micro_batch_size=mb)
    again_fresh_weights = {k: v.clone() for k, v in export_hf_weights(fresh)}

    if torch.distributed.get_rank() != 0:
        return None
    ref = _hf_reference(args.hf, ids, mask, adv, mb, lr, clip)

    def max_diff(a: dict, b: dict) -> float:
        assert set(a) == set(b), sorted(set(a) ^ set(b))[:5]
        return max(float((a[k].double() - b[k].double()).abs().max()) for k in a)

    return {
        "loss": first.loss, "ref_loss": ref["loss"], "step_loss": step.loss,
        "log_prob_max_diff": float((old_log_probs - ref["log_probs"]).abs().max()),
        "grad_max_diff": max_diff(grads, ref["grads"]),
        "grad_max_abs": max(float(g.abs().max()) for g in ref["grads"].values()),
        "grad_norm": step.grad_norm, "ref_grad_norm": ref["grad_norm"],
        "weight_max_diff_after_step": max_diff(weights, ref["weights"]), "lr": lr,
        "n_grads": len(grads),
        "resumed_step": resumed["step"], "resumed_user_state": resumed["user_state"],
        "resumed_weight_max_diff": max_diff(resumed_weights, weights),
        "second_step_loss": again.loss, "second_step_loss_resumed": again_fresh.loss,
        "second_step_weight_max_diff": max_diff(again_weights, again_fresh_weights),
        "update_successful": step.update_successful,
    }


def _lm_batch(seed: int) -> tuple[Any, Any, Any]:
    """4 random sequences of 12 tokens, their mask and a mean log-likelihood loss (the first token left out)."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, 151_000, (4, 12), generator=gen)

    def loss_fn(log_probs: Any, batch: dict) -> tuple[Any, dict]:
        keep = batch["valid"].float()
        keep[:, 0] = 0
        return -(log_probs * keep).sum() / keep.sum(), {}

    return ids, torch.ones_like(ids), loss_fn


def distopt(args: argparse.Namespace) -> dict | None:
    """One train step with Megatron's distributed optimizer (state sharded over data-parallel
    ranks) against the plain one, from the same HF weights: same loss, grad norm and update."""
    import torch

    from rlec.megatron.model import build_model, export_hf_weights
    from rlec.megatron.parallel import ParallelLayout, init_parallel
    from rlec.megatron.training import build_optimizer, train_step

    layout = ParallelLayout(tp=args.tp, ep=args.ep, world_size=int(os.environ.get("WORLD_SIZE", "1")))
    init_parallel(layout)
    ids, mask, loss_fn = _lm_batch(1)

    runs = {}
    for distributed in (False, True):
        policy = build_model(args.hf, layout, wrap_ddp=True, use_distributed_optimizer=distributed)
        optimizer = build_optimizer(policy, lr=1e-3, use_distributed_optimizer=distributed)
        result = train_step(policy, optimizer, ids, mask, loss_fn, micro_batch_size=2)
        runs[distributed] = (result, {k: v.clone() for k, v in export_hf_weights(policy)})
    if torch.distributed.get_rank() != 0:
        return None
    (plain, w_plain), (dist, w_dist) = runs[False], runs[True]
    return {"loss": plain.loss, "loss_distributed": dist.loss, "grad_norm": plain.grad_norm,
            "grad_norm_distributed": dist.grad_norm, "dp": layout.dp,
            "weight_max_diff": max(float((w_plain[k] - w_dist[k]).abs().max()) for k in w_plain)}


def distopt_resume(args: argparse.Namespace) -> dict | None:
    """Resume with Megatron's distributed optimizer (verl's CPU layout): ``steps`` optimizer steps (2, as verl's CPU
    layout takes per trainer step: with 1 the checkpoint's Adam step counter equals the fresh optimizer's own after its
    dummy init, which hid the ``distributed_optimizer_step_value`` defect), a dist checkpoint with the optimizer, a
    fresh model + optimizer loaded from it, then one more step on both. Adam's step counters of the resumed
    optimizer right after the load and after that step, and the weights, against the run never interrupted (weight
    decay on)."""
    import torch
    from megatron.core import dist_checkpointing
    from megatron.core.dist_checkpointing.serialization import StrictHandling

    from rlec.megatron.checkpoint import load_dist_checkpoint, model_sharded_state_dict
    from rlec.megatron.compat import in_process_checkpoint_results
    from rlec.megatron.model import build_model, export_hf_weights
    from rlec.megatron.parallel import ParallelLayout, init_parallel
    from rlec.megatron.training import build_optimizer, train_step

    layout = ParallelLayout(world_size=int(os.environ.get("WORLD_SIZE", "1")))
    init_parallel(layout)
    ids, mask, loss_fn = _lm_batch(2)

    def build() -> tuple[Any, Any]:
        policy = build_model(args.hf, layout, wrap_ddp=True, use_distributed_optimizer=True)
        return policy, build_optimizer(policy, lr=1e-3, weight_decay=0.1, use_distributed_optimizer=True)

    # verl's checkpoint manager's format of the distributed optimizer's state (MegatronCheckpointManager:
    # _build_sharded_state_dict_metadata), saved and loaded as its load_checkpoint does
    metadata = {"distrib_optim_sharding_type": "dp_reshardable", "singleton_local_shards": False,
                "chained_optim_avoid_prefix": True}

    policy, optimizer = build()
    for _ in range(int(getattr(args, "steps", 2))):
        train_step(policy, optimizer, ids, mask, loss_fn, micro_batch_size=2)
    Path(args.out).mkdir(parents=True)
    state = model_sharded_state_dict(policy)
    state["optimizer"] = optimizer.sharded_state_dict(state, metadata=metadata)
    with in_process_checkpoint_results():
        dist_checkpointing.save(state, args.out)
    fresh, fresh_optimizer = build()
    load_dist_checkpoint(fresh, args.out)  # the weights
    model_state = model_sharded_state_dict(fresh, te_extras=False)
    loaded = dist_checkpointing.load({"optimizer": fresh_optimizer.sharded_state_dict(model_state, is_loading=True, metadata=metadata)},
                                     args.out, strict=StrictHandling.ASSUME_OK_UNEXPECTED)
    fresh_optimizer.load_state_dict(loaded["optimizer"])

    def steps(opt: Any) -> list[float]:
        return sorted({float(s["step"]) for s in opt.optimizer.state.values() if "step" in s})

    loaded_steps = steps(fresh_optimizer)
    train_step(policy, optimizer, ids, mask, loss_fn, micro_batch_size=2)
    train_step(fresh, fresh_optimizer, ids, mask, loss_fn, micro_batch_size=2)
    if torch.distributed.get_rank() != 0:
        return None
    a, b = dict(export_hf_weights(policy)), dict(export_hf_weights(fresh))
    return {"steps": steps(optimizer), "steps_loaded": loaded_steps, "steps_resumed": steps(fresh_optimizer),
            "parameters": len(fresh_optimizer.optimizer.state),
            "weight_max_diff": max(float((a[k] - b[k]).abs().max()) for k in a)}


def routes(args: argparse.Namespace) -> dict:
    """Megatron's router choices for a few sequences against the CPU rollout's ``routed_experts`` (issue 32).

    The HF folder's weights load into Megatron (TP 1, local spec on CPU); a forward hook on every
    ``TopKRouter`` records its ``routing_map`` (tokens x experts); the rollout side is
    :func:`rlec.cpu.rollout_scores.score_tokens` on the Hugging Face model of the same folder.
    Returns, per sequence, the tokens and how many of them route differently (sets of experts).
    """
    import torch
    from megatron.core.transformer.moe.router import TopKRouter
    from transformers import AutoModelForCausalLM

    from rlec.megatron.logprobs import compute_logits
    from rlec.megatron.model import build_model
    from rlec.megatron.parallel import ParallelLayout, init_parallel
    from rlec.cpu.rollout_scores import score_tokens

    layout = ParallelLayout(world_size=int(os.environ.get("WORLD_SIZE", "1")))
    init_parallel(layout)
    policy = build_model(args.hf, layout, load_weights=True)
    hf = AutoModelForCausalLM.from_pretrained(args.hf, dtype=torch.float32).eval()
    gen = torch.Generator().manual_seed(0)
    out = []
    for length in (7, 19, 33):
        ids = torch.randint(0, hf.config.vocab_size, (1, length), generator=gen)
        maps: list[torch.Tensor] = []
        hooks = [m.register_forward_hook(lambda _m, _a, o, maps=maps: maps.append(o[1].detach().cpu()))
                 for chunk in policy.unwrapped() for m in chunk.modules() if isinstance(m, TopKRouter)]
        try:
            compute_logits(policy, ids)
        finally:
            for h in hooks:
                h.remove()
        megatron_sets = torch.stack([m.reshape(-1, m.shape[-1])[:length].bool() for m in maps], dim=1)  # (tokens, layers, E)
        rollout = torch.from_numpy(score_tokens(hf, ids[0, :1].tolist(), ids[0, 1:].tolist(), log_probs=False, routes=True).routed_experts)
        rollout_sets = torch.zeros_like(megatron_sets).scatter_(-1, rollout.long(), True)
        out.append({"tokens": length, "layers": len(maps), "differ": int((megatron_sets != rollout_sets).any(-1).sum()),
                    "experts_per_token": int(megatron_sets.sum(-1).max())})
    return {"sequences": out}


def convert(argv: list[str]) -> dict:
    import importlib.util

    tool = Path(__file__).resolve().parents[2] / "tools" / "convert_hf_to_mcore.py"
    spec = importlib.util.spec_from_file_location("convert_hf_to_mcore", tool)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return {"rc": module.main(argv)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("plan", help="JSON list of steps: {'convert': argv} | {'controls': {...}} | {'train': {...}} | {'distopt': {...}}")
    steps = json.loads(p.parse_args().plan)
    results = []
    for step in steps:
        (kind, params), = step.items()
        if kind == "convert":
            results.append(convert(params))
        else:
            args = argparse.Namespace(**{"out": None, "tp": 1, "ep": 1, **params})
            results.append({"controls": controls, "train": train, "distopt": distopt, "distopt_resume": distopt_resume,
                            "routes": routes}[kind](args))
    import torch

    from rlec.megatron.parallel import destroy_parallel

    if torch.distributed.get_rank() == 0:
        print(RESULT_PREFIX + json.dumps(results), flush=True)
    destroy_parallel()


if __name__ == "__main__":
    main()
