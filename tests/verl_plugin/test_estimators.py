"""The ``rlec_passk`` estimator through verl's own advantage path on real tensors, the entropy-switch
mixin on a real verl trainer class, and the reward-sign fact the estimator relies on."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

pytest.importorskip("verl")

from rlec.algorithms.e3 import length_bias_factor  # noqa: E402
from rlec.algorithms.passk import passk_group_advantages  # noqa: E402
from rlec.grading.outcome import Outcome  # noqa: E402
from rlec.reward.formula import rlec_reward  # noqa: E402
from rlec.verl_plugin import RLECSyncTrainer, compute_rlec_passk_advantage  # noqa: E402


def test_correct_iff_reward_positive_for_every_target_b_and_length_bias():
    """rlec_passk reads 'correct' as reward > 0: true for R_p^(b), also after E3's length bias."""
    for p in [0.0, 0.01, 0.1, 0.3, 0.5, 0.75, 0.9, 0.99]:
        for b in [0.0, 0.25, 0.5, 1.0]:
            assert rlec_reward(Outcome.CORRECT, p, b) > 0
            assert rlec_reward(Outcome.CORRECT, p, b) * length_bias_factor(10**6, 1.0) > 0
            assert not rlec_reward(Outcome.INCORRECT, p, b) > 0  # -p (1-p)^(b-1) <= 0 (= 0 at p = 0)
            assert not rlec_reward(Outcome.ABSTAIN, p, b) > 0  # abstaining is not correct


def batch_of(outcomes: list[tuple[str, str, float]], length: int = 5):
    """A verl DataProto with RLEC rewards on the last response token: (uid, outcome, target p) per response."""
    from verl import DataProto

    rewards = torch.zeros(len(outcomes), length)
    mask = torch.ones(len(outcomes), length)
    for i, (_, outcome, p) in enumerate(outcomes):
        valid = 2 + i % 3
        mask[i, valid:] = 0
        rewards[i, valid - 1] = rlec_reward(Outcome(outcome), p, 0.5)
    uid = np.array([u for u, _, _ in outcomes], dtype=object)
    return DataProto.from_dict(tensors={"token_level_rewards": rewards, "response_mask": mask},
                               non_tensors={"uid": uid})


# two prompts of unequal size (E3 budgets), interleaved; abstentions and incorrect answers both "not correct"
OUTCOMES = [("a", "correct", 0.5), ("b", "abstain", 0.7), ("a", "incorrect", 0.5), ("a", "abstain", 0.5),
            ("b", "correct", 0.7), ("a", "correct", 0.5), ("b", "incorrect", 0.7), ("a", "incorrect", 0.5),
            ("b", "abstain", 0.7)]


def test_estimator_through_verl_compute_advantage_reads_live_algorithm_config(compose_rlec):
    from verl.trainer.ppo.core_algos import get_adv_estimator_fn
    from verl.trainer.ppo.v1.utils import compute_advantage_for_multi_trajectories

    assert get_adv_estimator_fn("rlec_passk") is compute_rlec_passk_advantage
    cfg = compose_rlec("algorithm=passk", "rlec.passk.k=3")
    data = batch_of(OUTCOMES)
    keys = [f"{u}_{i}_0" for i, (u, _, _) in enumerate(OUTCOMES)]
    out = compute_advantage_for_multi_trajectories(data, batch_keys=keys, adv_estimator=cfg.algorithm.adv_estimator,
                                                   num_repeat=cfg.actor_rollout_ref.rollout.n, config=cfg.algorithm)
    # group a: 5 responses, 2 correct; group b: 4 responses, 1 correct; k = 3 (values: test_hand_values_of_the_two_groups)
    a = dict(zip(("pos", "neg"), (1 / 3, -2 / 9)))
    b = dict(zip(("pos", "neg"), (1 / math.sqrt(3), (0.25 - 1 / 3) / (math.sqrt(3) / 4))))
    want = [a["pos"], b["neg"], a["neg"], a["neg"], b["pos"], a["pos"], b["neg"], a["neg"], b["neg"]]
    adv = out.batch["advantages"]
    mask = out.batch["response_mask"]
    assert torch.equal(adv, out.batch["returns"])
    assert (adv * (1 - mask)).abs().sum() == 0  # nothing outside the response
    assert adv[torch.arange(len(OUTCOMES)), 0].tolist() == pytest.approx(want, abs=1e-6)


def test_hand_values_of_the_two_groups():
    # group a: N = 5, N_neg = 3, k = 3: R = 1 - C(3,3)/C(5,3) = 0.9, sigma = 0.3,
    #   A_pos = 0.1 / 0.3 = 1/3, A_neg = (0.1 - C(2,2)/C(4,2)) / 0.3 = (0.1 - 1/6) / 0.3 = -2/9
    assert passk_group_advantages([True, False, False, True, False], 3) == pytest.approx([1 / 3, -2 / 9, -2 / 9, 1 / 3, -2 / 9])
    # group b: N = 4, N_neg = 3, k = 3: R = 1 - 1/4 = 0.75, sigma = sqrt(3)/4, A_pos = 1/sqrt(3),
    #   A_neg = (0.25 - C(2,2)/C(3,2)) / sigma
    assert passk_group_advantages([True, False], 3) == [0.0, 0.0]  # N = 2 <= k
    assert passk_group_advantages([False, True, False, False], 3) == pytest.approx(
        [(0.25 - 1 / 3) / (math.sqrt(3) / 4), 1 / math.sqrt(3), (0.25 - 1 / 3) / (math.sqrt(3) / 4), (0.25 - 1 / 3) / (math.sqrt(3) / 4)])


def test_active_k_one_is_rlec_mean_only_advantage(compose_rlec):
    cfg = compose_rlec("algorithm=passk")
    cfg.algorithm.passk.active_k = 1  # what the switch writes in the pass@1 regime
    data = batch_of(OUTCOMES)
    adv, _ = compute_rlec_passk_advantage(token_level_rewards=data.batch["token_level_rewards"],
                                          response_mask=data.batch["response_mask"], index=data.non_tensor_batch["uid"],
                                          config=cfg.algorithm)
    scores = data.batch["token_level_rewards"].sum(-1)
    uids = data.non_tensor_batch["uid"]
    means = {u: scores[uids == u].mean() for u in set(uids)}
    assert adv[:, 0].tolist() == pytest.approx([float(s - means[u]) for s, u in zip(scores, uids)], abs=1e-6)


def test_missing_settings_and_group_ids_are_clear_errors(compose_rlec):
    data = batch_of(OUTCOMES[:3])
    kwargs = dict(token_level_rewards=data.batch["token_level_rewards"], response_mask=data.batch["response_mask"])
    with pytest.raises(ValueError, match="algorithm=passk"):
        compute_rlec_passk_advantage(**kwargs, index=data.non_tensor_batch["uid"], config=compose_rlec().algorithm)
    with pytest.raises(ValueError, match="uid"):
        compute_rlec_passk_advantage(**kwargs, index=None, config=compose_rlec("algorithm=passk").algorithm)


def test_padding_rows_get_zero_advantage(compose_rlec):
    data = batch_of(OUTCOMES)
    data.batch["response_mask"][-1] = 0  # verl's synthetic padding: response mask 0, reward 0
    data.batch["token_level_rewards"][-1] = 0
    data.non_tensor_batch["uid"][-1] = "pad0"
    adv, _ = compute_rlec_passk_advantage(token_level_rewards=data.batch["token_level_rewards"],
                                          response_mask=data.batch["response_mask"], index=data.non_tensor_batch["uid"],
                                          config=compose_rlec("algorithm=passk").algorithm)
    assert adv[-1].abs().sum() == 0


@pytest.fixture
def passk_trainer(compose_rlec, tiny_moe_dir, monkeypatch, tmp_path):
    """A real RLECSyncTrainer with the switch on; verl's step and checkpoint I/O replaced by recorders."""
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    entropies = {1: 0.9, 2: 0.2, 3: 0.25, 4: 0.8}
    seen_k = []

    def fake_step(self, metrics, timing_raw):  # what the estimator would read, then verl's actor/entropy
        from rlec.verl_plugin.estimators import active_k

        seen_k.append(active_k(self.config.algorithm))
        metrics["actor/entropy"] = entropies[self.global_steps]

    monkeypatch.setattr(PPOTrainer, "step", fake_step)
    monkeypatch.setattr(PPOTrainer, "_save_checkpoint", lambda self: None)
    monkeypatch.setattr(PPOTrainer, "_load_checkpoint", lambda self: setattr(self, "global_steps", self._resume_to))
    cfg = compose_rlec("layout=tiny_1gpu", f"actor_rollout_ref.model.path={tiny_moe_dir}", "algorithm=passk",
                       "rlec.passk.switch.enable=true", "rlec.passk.switch.entropy_threshold=0.5",
                       f"trainer.default_local_dir={tmp_path}")
    return cfg, seen_k


def test_entropy_switch_sets_next_k_logs_and_resumes(passk_trainer):
    cfg, seen_k = passk_trainer
    trainer = RLECSyncTrainer(cfg)
    logged = []
    for step in (1, 2):
        trainer.global_steps = step
        metrics = {}
        trainer.step(metrics, {})
        logged.append(metrics["passk/active_k"])
        trainer._save_checkpoint()
    # step 1 starts at pass@1; entropy 0.9 > 0.5 keeps pass@1; entropy 0.2 switches step 3 to pass@2
    assert seen_k == [1, 1] and logged == [1.0, 1.0] and trainer.config.algorithm.passk.active_k == 2
    resumed = RLECSyncTrainer(cfg)
    resumed._resume_to = 2
    resumed._load_checkpoint()
    (switch,) = trainer.rlec_algorithms
    assert resumed.config.algorithm.passk.active_k == 2 and resumed.rlec_algorithms[0].entropy_switch == switch.entropy_switch
    for t in (resumed, trainer):
        t.global_steps = 3
        t.step({}, {})
    assert seen_k[-2:] == [2, 2]


def test_switch_off_logs_k_every_step(compose_rlec, tiny_moe_dir, monkeypatch):
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    monkeypatch.setattr(PPOTrainer, "step", lambda self, metrics, timing_raw: metrics.update({"actor/entropy": 0.1}))
    trainer = RLECSyncTrainer(compose_rlec("layout=tiny_1gpu", f"actor_rollout_ref.model.path={tiny_moe_dir}",
                                           "algorithm=passk", "rlec.passk.k=3"))
    metrics = {}
    trainer.step(metrics, {})
    assert trainer.rlec_algorithms[0].entropy_switch is None and metrics["passk/active_k"] == 3.0
    plain = RLECSyncTrainer(compose_rlec("layout=tiny_1gpu", f"actor_rollout_ref.model.path={tiny_moe_dir}"))
    metrics = {}
    plain.step(metrics, {})
    assert "passk/active_k" not in metrics
