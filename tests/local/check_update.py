"""Run by test_update.py in its own process (world size 1): the local update's loss normalisation.

Prints ``RESULT_JSON {...}`` with, for micro-batch sizes 1 and 3 on the same batch, the reported
policy loss and gradient norm, and the hand-computed on-policy token-mean loss -sum(A)/tokens.
"""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
warnings.filterwarnings("ignore")


def main(hf_path: str) -> dict:
    import torch

    from rlec.local.config import load_config
    from rlec.local.update import update_policy
    from rlec.megatron.model import build_model
    from rlec.megatron.parallel import ParallelLayout, init_parallel
    from rlec.megatron.training import build_optimizer

    torch.set_num_threads(1)
    layout = ParallelLayout(world_size=1)
    init_parallel(layout)
    g = torch.Generator().manual_seed(0)
    b, p, r = 6, 10, 5
    prompts = torch.randint(0, 151_000, (b, p), generator=g)
    responses = torch.randint(0, 151_000, (b, r), generator=g)
    response_mask = torch.ones(b, r)
    response_mask[1, 3:] = 0  # a short response
    response_mask[4, 1:] = 0
    attention = torch.cat([torch.ones(b, p, dtype=torch.long), response_mask.long()], dim=1)
    advantages = torch.randn(b, 1, generator=g).expand(b, r) * response_mask
    payload = {"input_ids": torch.cat([prompts, responses], dim=1), "attention_mask": attention,
               "response_mask": response_mask, "advantages": advantages}
    out = {"expected_pg_loss": float(-(advantages * response_mask).sum() / response_mask.sum())}
    for mbs in (1, 3):
        cfg = load_config([f"actor.micro_batch_size={mbs}", "rollout.max_new_tokens=5", "rollout.n=3",
                           "rollout.prompts_per_step=2", "actor.ppo_mini_batch_size=2"], env={})
        policy = build_model(hf_path, layout, wrap_ddp=True)
        optimizer = build_optimizer(policy, lr=1e-4)
        metrics = update_policy(policy, optimizer, payload, cfg)
        out[f"mbs{mbs}"] = {"pg_loss": metrics["actor/pg_loss"], "grad_norm": metrics["actor/grad_norm"]}
    return out


if __name__ == "__main__":
    print("RESULT_JSON " + json.dumps(main(sys.argv[1])), flush=True)
