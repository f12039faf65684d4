"""Run by test_logit_window.py in its own process: windowed log-probs equal the full ones.

Prints one line ``RESULT_JSON {...}``: the max difference of log-probs on the window positions,
whether positions outside it are 0, and the max difference of every parameter gradient between a
full-logits and a windowed forward-backward of the same masked loss.
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

    from rlec.megatron.logprobs import compute_log_probs
    from rlec.megatron.model import build_model, export_hf_weights
    from rlec.megatron.parallel import ParallelLayout, init_parallel
    from rlec.megatron.training import build_optimizer, forward_backward

    torch.set_num_threads(1)
    layout = ParallelLayout(world_size=1)
    init_parallel(layout)
    policy = build_model(hf_path, layout, wrap_ddp=True)
    build_optimizer(policy, lr=1e-3)
    g = torch.Generator().manual_seed(0)
    b, s, window = 3, 24, 6
    ids = torch.randint(0, 151_000, (b, s), generator=g)
    attn = torch.ones(b, s, dtype=torch.long)
    attn[0, :5] = 0  # left padding (a shorter prompt)
    attn[1, -3:] = 0  # right padding (a shorter response)
    full = compute_log_probs(policy, ids, attn, micro_batch_size=2)
    win = compute_log_probs(policy, ids, attn, micro_batch_size=2, logit_window=window)
    # the window covers each row's last `window` valid tokens
    in_window = torch.zeros(b, s, dtype=torch.bool)
    for r in range(b):
        valid = attn[r].nonzero().flatten()
        in_window[r, valid[-window:]] = True
    lp_diff = float((full - win)[in_window].abs().max())
    outside_zero = bool((win[~in_window] == 0).all())

    loss_mask = in_window.float()
    weights = torch.randn(b, s, generator=g)

    def loss_fn(log_probs, batch):
        return (log_probs * batch["w"] * batch["m"]).sum(), {}

    grads = []
    for lw in (None, window):
        forward_backward(policy, ids, attn, loss_fn, extra={"w": weights, "m": loss_mask}, micro_batch_size=2, logit_window=lw)
        grads.append({k: v.clone() for k, v in export_hf_weights(policy, grads=True)})
    grad_diff = max(float((grads[0][k] - grads[1][k]).abs().max()) for k in grads[0])
    grad_scale = max(float(v.abs().max()) for v in grads[0].values())
    return {"lp_diff": lp_diff, "outside_zero": outside_zero, "grad_diff": grad_diff, "grad_scale": grad_scale}


if __name__ == "__main__":
    print("RESULT_JSON " + json.dumps(main(sys.argv[1])), flush=True)
