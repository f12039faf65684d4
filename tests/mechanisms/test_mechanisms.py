"""Mechanism checks (issue 57 item 7): the effects the seeds' papers rely on, shown in seconds without a language model.

Each test states the published claim it checks and exercises the code the runs use where there is one (rlec's
analytic pass@k advantage; verl's own clipped policy loss, ``verl.trainer.ppo.core_algos``). They prove the
algorithm code can produce the papers' mechanisms before any long run (docs/experiments.md, "Mechanism checks").
"""

from __future__ import annotations

import numpy as np
import pytest
import torch


def _entropy(logits: torch.Tensor) -> torch.Tensor:
    """Entropy (nats) of softmax(logits) along the last axis."""
    logp = torch.log_softmax(logits, -1)
    return -(logp.exp() * logp).sum(-1)


# ---- Cui et al. 2505.22617, sec. 3: the entropy change of a softmax policy is -Cov(log pi, logit change) -------------

def _cov_pi(logp: torch.Tensor, x: torch.Tensor) -> float:
    """Cov_{a ~ pi}(log pi(a), x(a)) of one tabular policy."""
    p = logp.exp()
    return float((p * logp * x).sum() - (p * logp).sum() * (p * x).sum())


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_softmax_bandit_entropy_change_is_minus_the_covariance_of_log_pi_and_the_advantage(seed: int) -> None:
    """Cui et al. (2505.22617, sec. 3): for a softmax policy, one natural policy-gradient step (logits += eta * A)
    changes the entropy by -eta * Cov_{a~pi}(log pi(a), A(a)) to first order; for vanilla policy gradient the logit
    change is eta * pi(a) (A(a) - E_pi A), and the entropy change is -Cov(log pi, that change). Checked against the
    exact entropy of a 12-armed bandit: the first-order term carries the change (relative error O(eta)), and the sign
    follows the covariance (a likely arm with a high advantage lowers the entropy, a rare one raises it)."""
    g = torch.Generator().manual_seed(seed)
    z = torch.randn(12, generator=g, dtype=torch.float64) * 1.5  # float64: the O(eta^2) term is below float32's eps
    adv = torch.randn(12, generator=g, dtype=torch.float64)
    logp = torch.log_softmax(z, -1)
    for eta in (1e-2, 1e-3):
        natural = float(_entropy(z + eta * adv) - _entropy(z))
        assert natural == pytest.approx(-eta * _cov_pi(logp, adv), rel=30 * eta)
        # vanilla policy gradient of J = E_pi[A] (advantage held fixed), through autograd
        zz = z.clone().requires_grad_(True)
        (torch.softmax(zz, -1) * adv).sum().backward()
        step = eta * zz.grad
        vanilla = float(_entropy(z + step) - _entropy(z))
        assert vanilla == pytest.approx(-_cov_pi(logp, step), rel=30 * eta)
    # the direction Cui et al. state: a high-probability action with a positive advantage lowers the entropy
    likely, rare = int(torch.argmax(z)), int(torch.argmin(z))
    one_hot = torch.zeros(12, dtype=torch.float64)
    assert float(_entropy(z + 1e-2 * one_hot.index_fill(0, torch.tensor([likely]), 1.0)) - _entropy(z)) < 0
    assert float(_entropy(z + 1e-2 * one_hot.index_fill(0, torch.tensor([rare]), 1.0)) - _entropy(z)) > 0


# ---- PKPO 2505.15201, sec. 5.1: the optimum of a pass@k objective moves with k --------------------------------------

SIGMA = 0.1  # PKPO's toy: policy N(theta, 0.1)
GROUP = 16  # responses per group (n > k)


def _toy_reward(x: np.ndarray) -> np.ndarray:
    """PKPO sec. 5.1: reward x^2 on [0, 1], 0 elsewhere."""
    return np.where((x >= 0) & (x <= 1), x * x, 0.0)


def _max_at_k_optimum(k: int) -> float:
    """argmax_theta E[max of k rewards] by quadrature: E[max_k r] = int_0^1 1 - F(t)^k dt, F the reward's CDF."""
    from scipy import integrate, optimize, stats

    def value(theta: float) -> float:
        def tail(t: float) -> float:
            above = stats.norm.cdf(1.0, theta, SIGMA) - stats.norm.cdf(np.sqrt(t), theta, SIGMA)  # P(r > t)
            return 1.0 - (1.0 - above) ** k
        return integrate.quad(tail, 0.0, 1.0, limit=200)[0]

    return float(optimize.minimize_scalar(lambda th: -value(th), bounds=(0.5, 1.3), method="bounded",
                                          options={"xatol": 1e-6}).x)


def _passk_stationary_theta(k: int, z: np.ndarray) -> float:
    """The theta where the expected policy gradient under rlec's analytic pass@k advantage is zero.

    A graded reward r in [0, 1] is the integral over thresholds t of the 0/1 outcome [r > t] (the layer-cake
    identity), so max@k of r is the integral of pass@k of [r > t]: each response's advantage is the integral over t
    of rlec's binary pass@k advantage (:func:`rlec.algorithms.passk.advantage.passk_group_advantage`) times the
    group's subset std sqrt(R (1 - R)) (:func:`passk_group_reward`), i.e. the subset score minus the mean. Exact:
    between consecutive sorted rewards the number of negatives is constant. Common random numbers ``z`` (groups x
    GROUP standard normals) make the gradient smooth in theta.
    """
    from scipy import optimize

    from rlec.algorithms.passk.advantage import passk_group_advantage, passk_group_reward

    table = np.zeros((GROUP + 1, 2))  # by n_neg: (A_pos, A_neg) times the group's std
    for n_neg in range(GROUP + 1):
        a_pos, a_neg = passk_group_advantage(GROUP, n_neg, k)
        r = float(passk_group_reward(GROUP, n_neg, k))
        table[n_neg] = np.array([a_pos, a_neg]) * np.sqrt(r * (1 - r))
    segments = np.arange(GROUP + 1)

    def gradient(theta: float) -> float:
        x = theta + SIGMA * z
        r = _toy_reward(x)
        order = np.argsort(r, 1)
        edges = np.concatenate([np.zeros((len(r), 1)), np.take_along_axis(r, order, 1), np.ones((len(r), 1))], 1)
        length = np.diff(edges, axis=1)  # threshold segment j (n_neg = j): its length
        rank = np.empty_like(order)
        np.put_along_axis(rank, order, np.broadcast_to(np.arange(GROUP), r.shape).copy(), 1)
        correct = rank[:, :, None] >= segments[None, None, :]  # rank rho is above threshold segment j iff rho >= j
        adv = (np.where(correct, table[None, None, :, 0], table[None, None, :, 1]) * length[:, None, :]).sum(-1)
        return float((adv * (x - theta) / SIGMA**2).mean())  # score function of N(theta, sigma)

    return float(optimize.brentq(gradient, 0.6, 1.2, xtol=1e-5))


def test_pkpo_toy_the_passk_advantage_moves_the_optimum_with_k() -> None:
    """PKPO (2505.15201, sec. 5.1, Gaussian policy N(theta, 0.1), reward x^2 on [0, 1], 0 elsewhere): the pass@k
    objective's optimum moves with k (towards the cliff at 1: a larger k tolerates more samples past it). Policy
    gradient with rlec's pass@k advantage is stationary at argmax_theta E[max of k rewards] (quadrature), which
    rises with k: 0.862, 0.902, 0.939, 0.969 for k = 1, 2, 4, 8 (k = 1: plain GRPO, the mean reward's optimum)."""
    z = np.random.default_rng(0).standard_normal((6000, GROUP))
    found = {}
    for k, expected in ((1, 0.862), (2, 0.902), (4, 0.939), (8, 0.969)):
        exact = _max_at_k_optimum(k)
        assert exact == pytest.approx(expected, abs=1e-3)
        found[k] = _passk_stationary_theta(k, z)
        assert found[k] == pytest.approx(exact, abs=4e-3), k
    assert found[1] < found[2] < found[4] < found[8]
    assert found[8] - found[1] > 0.09


# ---- Park et al. 2509.26114: clipping biases the entropy under random rewards ----------------------------------------

def _clip_updates(lo: float, hi: float, updates: int, *, replicates: int = 1000, vocab: int = 16, batch: int = 16,
                  lr: float = 0.3) -> tuple[torch.Tensor, float]:
    """Entropy change of ``replicates`` one-token policies after ``updates`` updates on one rollout with random rewards.

    Every replicate starts from the same skewed policy (one likely token, logit 3, and ``vocab - 1`` rare ones, as at a
    language model's confident positions), samples ``batch`` tokens (groups of 8), gets 0/1 rewards independent of the
    token (p = 0.5), GRPO's std-normalised advantage, and takes ``updates`` SGD steps on verl's own clipped loss
    (``core_algos.get_policy_loss_fn("vanilla")``, token-mean) with clip_ratio_low ``lo`` and clip_ratio_high ``hi``
    against the rollout's log-probs. The sampled tokens and rewards depend only on the seed, so every clip setting
    sees the same rollouts (paired).

    Returns:
        the (replicates,) entropy changes and verl's mean ``actor/pg_clipfrac`` over the updates.
    """
    from verl.trainer.ppo import core_algos
    from verl.workers.config.actor import ActorConfig

    cfg = ActorConfig(strategy="fsdp", clip_ratio=0.2, clip_ratio_low=lo, clip_ratio_high=hi, ppo_mini_batch_size=1,
                      ppo_micro_batch_size_per_gpu=1, rollout_n=8)
    loss_fn = core_algos.get_policy_loss_fn("vanilla")
    g = torch.Generator().manual_seed(0)
    z0 = torch.tensor([3.0] + [0.0] * (vocab - 1)).expand(replicates, vocab).clone()
    probs = torch.softmax(z0, -1)
    tokens = torch.multinomial(probs, batch, replacement=True, generator=g)
    old = torch.log(probs).gather(1, tokens).reshape(-1, 1)
    reward = (torch.rand(replicates * batch // 8, 8, generator=g) < 0.5).float()
    adv = ((reward - reward.mean(1, keepdim=True)) / (reward.std(1, keepdim=True) + 1e-6)).reshape(-1, 1)
    mask = torch.ones_like(adv)
    z = z0.clone().requires_grad_(True)
    clipfrac = []
    for _ in range(updates):
        logp = torch.log_softmax(z, -1).gather(1, tokens).reshape(-1, 1)
        loss, metrics = loss_fn(old, logp, adv, mask, "token-mean", cfg)
        (grad,) = torch.autograd.grad(loss, z)
        with torch.no_grad():
            z -= lr * replicates * grad  # token-mean over every replicate: each replicate's own mean gradient
        clipfrac.append(metrics["actor/pg_clipfrac"])
    return (_entropy(z.detach()) - _entropy(z0)), float(np.mean(clipfrac))


def test_clipping_lowers_the_entropy_under_random_rewards_with_many_updates_not_with_one() -> None:
    """Park et al. (2509.26114, abstract): under random rewards clip-high lowers the entropy and clip-low raises it,
    and at the standard symmetric clip (0.2 / 0.2) clip-high dominates: the entropy falls. Here, paired against the
    unclipped update of the same rollouts (16 updates per rollout): symmetric clipping lowers the entropy, the upper
    clip alone lowers it, the lower clip alone raises it, and DAPO's clip-higher (0.2 / 0.28) lowers it less than
    symmetric clipping. With one on-policy update the ratio is 1, nothing is clipped (pg_clipfrac 0) and every clip
    setting gives the same update: clipping cannot act. Margins are 5 standard errors of the paired mean or more
    (1,000 replicates; measured -0.093, -0.069, -0.145, +0.039 nats, SE 0.003-0.008)."""
    none, _ = _clip_updates(100.0, 100.0, 16)
    paired = {}
    for name, lo, hi in (("symmetric", 0.2, 0.2), ("clip_higher", 0.2, 0.28), ("upper_only", 100.0, 0.2),
                         ("lower_only", 0.2, 100.0)):
        delta, clipfrac = _clip_updates(lo, hi, 16)
        assert clipfrac > 0.05, (name, clipfrac)  # clipping acted
        d = delta - none
        paired[name] = (float(d.mean()), float(d.std() / np.sqrt(len(d))))
    mean = {k: v[0] for k, v in paired.items()}
    se = {k: v[1] for k, v in paired.items()}
    assert mean["symmetric"] < -5 * se["symmetric"], paired
    assert mean["upper_only"] < -5 * se["upper_only"], paired
    assert mean["lower_only"] > 5 * se["lower_only"], paired
    assert mean["clip_higher"] - mean["symmetric"] > 0.01, paired  # raising the upper clip weakens the entropy loss
    one_none, _ = _clip_updates(100.0, 100.0, 1)
    for lo, hi in ((0.2, 0.2), (0.2, 0.28)):
        one, clipfrac = _clip_updates(lo, hi, 1)
        assert clipfrac == 0.0 and torch.equal(one, one_none)
