"""benchmarks/throughput_update.py ``policy_loss_fn``: verl's configured policy loss, normalised as verl's Megatron
engine does, equals the token-mean PPO loss by hand (the benchmark's update must cost what the trainer's does and
minimise the same objective)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import throughput_update  # noqa: E402


@pytest.fixture(scope="module")
def actor_cfg():
    from rlec.config import CPU_LAYOUT, compose
    from rlec.verl_plugin.typed_config import actor_config

    return actor_config(compose([f"layout={CPU_LAYOUT}"]))  # as the benchmark composes it


@pytest.mark.parametrize("micro_batches", [1, 2])
def test_on_policy_loss_is_minus_the_token_mean_advantage_over_the_mini_batch(actor_cfg, micro_batches) -> None:
    """At ratio 1 (log-probs = old log-probs) the clipped PPO loss is -A per token; token-mean over the mini-batch's
    tokens, each micro-batch's loss times the micro-batch count (Megatron's schedule divides by it): the micro-batch
    losses sum, over the schedule's division, to -sum(A * mask) / tokens of the whole mini-batch."""
    g = torch.Generator().manual_seed(0)
    rows, length = 4, 6
    mask = (torch.rand(rows, length, generator=g) > 0.3).float()
    mask[:, 0] = 1.0
    adv = torch.randn(rows, 1, generator=g).expand(rows, length) * mask
    logp = -torch.rand(rows, length, generator=g)
    tokens = int(mask.sum())
    loss_fn = throughput_update.policy_loss_fn(actor_cfg, micro_batches, 1, tokens, rows)
    size = rows // micro_batches
    total = 0.0
    for k in range(micro_batches):
        part = slice(k * size, (k + 1) * size)
        batch = {"old_log_probs": logp[part], "advantages": adv[part], "loss_mask": mask[part]}
        value, _ = loss_fn(logp[part].clone(), batch)
        total += float(value) / micro_batches  # Megatron's schedule: each micro-batch's loss / their number
    assert total == pytest.approx(-float((adv * mask).sum()) / tokens, rel=1e-5)
