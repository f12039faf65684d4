"""Run by test_update.py in its own process (world size 1): the local update against verl's loss.

For one batch (random prompts and responses of uneven length, random advantages, old log-probs
off the current policy so the PPO ratio is not 1 and both clip sides are active) and each case
(loss_agg_mode x policy loss mode x micro-batch size), it computes

- the local side: ``rlec.local.update.policy_loss_fn`` through ``rlec.megatron.forward_backward``
  (Megatron's schedule, DDP grad buffers, ``finalize_model_grads``), gradients read back by HF
  name through mbridge;
- the reference: the same weights in the Hugging Face model, log-probs from its logits with plain
  autograd, and verl's own ``get_policy_loss_fn(loss_mode)`` (``compute_policy_loss_*`` +
  ``agg_loss``) over the whole mini-batch at once;

and prints ``RESULT_JSON {case: {"local_loss", "verl_loss", "max_grad_diff", "max_grad"}}``.
"""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
warnings.filterwarnings("ignore")

CASES = [("token-mean", "vanilla", 1), ("token-mean", "vanilla", 3), ("seq-mean-token-mean", "vanilla", 2),
         ("seq-mean-token-sum", "vanilla", 3), ("token-mean", "gspo", 2)]


def main(hf_path: str) -> dict:
    import torch
    from transformers import AutoModelForCausalLM
    from verl.trainer.ppo.core_algos import get_policy_loss_fn

    from rlec.local.config import load_config
    from rlec.local.update import actor_config, policy_loss_fn
    from rlec.megatron.model import build_model, export_hf_weights
    from rlec.megatron.parallel import ParallelLayout, init_parallel
    from rlec.megatron.training import build_optimizer, forward_backward

    torch.set_num_threads(1)
    layout = ParallelLayout(world_size=1)
    init_parallel(layout)
    g = torch.Generator().manual_seed(0)
    b, p, r, temperature = 6, 10, 5, 0.7
    prompts = torch.randint(0, 151_000, (b, p), generator=g)
    responses = torch.randint(0, 151_000, (b, r), generator=g)
    response_mask = torch.ones(b, r)
    response_mask[1, 3:] = 0  # short responses
    response_mask[4, 1:] = 0
    attention = torch.cat([torch.ones(b, p, dtype=torch.long), response_mask.long()], dim=1)
    ids = torch.cat([prompts, responses], dim=1)
    advantages = torch.randn(b, 1, generator=g).expand(b, r) * response_mask

    hf = AutoModelForCausalLM.from_pretrained(hf_path, dtype=torch.float32)
    with torch.no_grad():
        logits = hf(input_ids=ids, attention_mask=attention).logits[:, p - 1 : -1] / temperature
        current = torch.log_softmax(logits.float(), -1).gather(-1, responses[..., None])[..., 0]
    old = (current + 0.3 * torch.randn(b, r, generator=g)) * response_mask  # ratios well away from 1

    out = {}
    for agg, mode, mbs in CASES:
        cfg = load_config([f"actor_rollout_ref.actor.loss_agg_mode={agg}", f"actor_rollout_ref.actor.policy_loss.loss_mode={mode}"],
                          env={})
        config = actor_config(cfg)
        # local: Megatron forward-backward with rlec's loss function
        policy = build_model(hf_path, layout, wrap_ddp=True)
        build_optimizer(policy, lr=1e-4)
        pad = torch.zeros(b, p)
        extra = {"loss_mask": torch.cat([pad, response_mask], 1), "advantages": torch.cat([pad, advantages], 1),
                 "old_log_probs": torch.cat([pad, old], 1)}
        loss_fn = policy_loss_fn(config, num_micro_batches=-(-b // mbs), dp_size=1, global_tokens=int(response_mask.sum()),
                                 global_sequences=int((response_mask.sum(1) > 0).sum()))
        result = forward_backward(policy, ids, attention, loss_fn, extra=extra, micro_batch_size=mbs, temperature=temperature,
                                  logit_window=r)
        local_grads = {k: v.clone() for k, v in export_hf_weights(policy, grads=True)}
        # reference: HF autograd and verl's loss over the whole batch
        hf.zero_grad()
        logits = hf(input_ids=ids, attention_mask=attention).logits[:, p - 1 : -1] / temperature
        log_probs = torch.log_softmax(logits.float(), -1).gather(-1, responses[..., None])[..., 0]
        config_ref = actor_config(cfg)
        config_ref.global_batch_info.update({"dp_size": 1, "batch_num_tokens": int(response_mask.sum()),
                                             "global_batch_size": int((response_mask.sum(1) > 0).sum()), "loss_scale_factor": None})
        verl_loss, _ = get_policy_loss_fn(mode)(old_log_prob=old, log_prob=log_probs, advantages=advantages,
                                                 response_mask=response_mask.bool(), loss_agg_mode=agg, config=config_ref,
                                                 rollout_is_weights=None)
        verl_loss.backward()
        ref_grads = {k: v.grad.detach().clone() for k, v in hf.named_parameters() if v.grad is not None}
        from rlec.megatron.hf_sync import model_to_hub_state

        ref_grads = model_to_hub_state(hf, ref_grads)
        common = sorted(set(ref_grads) & set(local_grads))
        out[f"{agg}/{mode}/mbs{mbs}"] = {
            # result.loss is the mean over micro-batches of loss * micro-batches: the batch's loss
            "local_loss": float(result.loss),
            "verl_loss": float(verl_loss),
            "max_grad_diff": max(float((local_grads[k] - ref_grads[k].float()).abs().max()) for k in common),
            "max_grad": max(float(ref_grads[k].abs().max()) for k in common),
            "compared": len(common),
            "missing": sorted(set(ref_grads) ^ set(local_grads)),
        }
    return out


if __name__ == "__main__":
    print("RESULT_JSON " + json.dumps(main(sys.argv[1])), flush=True)
