"""The mean-only group advantage is verl's grpo with norm_adv_by_std_in_grpo=False.

rlec keeps no advantage code of its own; this file holds a tiny reference implementation used
only as a test oracle, and checks verl's function against it (and against the hand values in
FACTS.md) so that a verl change in semantics is noticed.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from verl.trainer.ppo import core_algos


def oracle_mean_only_advantage(scores: np.ndarray, index: np.ndarray) -> np.ndarray:
    """A_i = r_i - mean(r_j for j in i's group); verl's convention: a group of one keeps r_i."""
    out = np.empty_like(scores, dtype=np.float64)
    for g in np.unique(index):
        members = index == g
        mean = scores[members].mean() if members.sum() > 1 else 0.0
        out[members] = scores[members] - mean
    return out


def verl_advantage(scores: np.ndarray, index: np.ndarray, resp_len: int = 5) -> torch.Tensor:
    config = OmegaConf.create({"adv_estimator": "grpo", "norm_adv_by_std_in_grpo": False})
    fn = core_algos.get_adv_estimator_fn(config.adv_estimator)
    mask = torch.ones(len(scores), resp_len)
    rewards = torch.zeros(len(scores), resp_len)
    rewards[:, -1] = torch.tensor(scores, dtype=torch.float32)  # outcome reward on the last token
    adv, ret = fn(token_level_rewards=rewards, response_mask=mask, index=index,
                  norm_adv_by_std_in_grpo=config.norm_adv_by_std_in_grpo)
    assert torch.equal(adv, ret)
    return adv


def test_hand_values_from_facts() -> None:
    scores = np.array([1.0, 0.0, 1.0, 0.0, 0.0, 1.0])
    index = np.array(["a", "a", "a", "b", "b", "b"], dtype=object)
    adv = verl_advantage(scores, index)
    np.testing.assert_allclose(adv[:, 0].numpy(), [1 / 3, -2 / 3, 1 / 3, -1 / 3, -1 / 3, 2 / 3], atol=1e-6)


@pytest.mark.parametrize("seed", range(5))
def test_parity_with_oracle_on_random_groups(seed: int) -> None:
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, 9, size=12)  # includes groups of size 1
    index = np.repeat([f"q{i}" for i in range(len(sizes))], sizes).astype(object)
    scores = rng.choice([1.0, 0.25, -0.75, 0.0, -3.0], size=len(index))
    rng.shuffle(index)
    scores[index == "q0"] = 0.25  # an all-equal group: advantage 0, std 0 would divide by ~0
    adv = verl_advantage(scores, index)
    want = oracle_mean_only_advantage(scores, index)
    np.testing.assert_allclose(adv.numpy(), np.repeat(want[:, None], adv.shape[1], axis=1), atol=1e-5)
    if (index == "q0").sum() > 1:
        assert torch.all(adv[torch.tensor(index == "q0")] == 0)


def test_std_normalisation_would_erase_target_gaps() -> None:
    # Two groups, same outcomes, different targets: mean-only keeps the different stakes apart,
    # std-normalisation maps both to the same advantages.
    low_p = np.array([1.0, -0.1111111])  # p = 0.1 at b = 0: +1 / -1/9
    high_p = np.array([1.0, -9.0])  # p = 0.9 at b = 0: +1 / -9
    scores = np.concatenate([low_p, high_p])
    index = np.array(["lo", "lo", "hi", "hi"], dtype=object)
    mean_only = verl_advantage(scores, index)[:, 0]
    assert not torch.allclose(mean_only[:2], mean_only[2:])
    mask = torch.ones(4, 1)
    std_norm, _ = core_algos.compute_grpo_outcome_advantage(
        token_level_rewards=torch.tensor(scores, dtype=torch.float32)[:, None], response_mask=mask, index=index,
        norm_adv_by_std_in_grpo=True)
    assert torch.allclose(std_norm[:2, 0], std_norm[2:, 0], atol=1e-4)
