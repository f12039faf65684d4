"""rlec's trainers: verl's V1 trainers with rlec metrics, behaving exactly as their base mode."""

from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("verl")

from rlec.reward.batch import score_one_async  # noqa: E402
from rlec.reward.schedule import LinearSchedule  # noqa: E402
from rlec.verl_plugin import RLECColocateAsyncTrainer, RLECSeparateAsyncTrainer, RLECSyncTrainer  # noqa: E402

MODES = [("sync", RLECSyncTrainer, ()),
         ("colocate_async", RLECColocateAsyncTrainer, ()),
         # verl's own requirements of separate_async: batch = 4 x mini-batch, a standalone rollout pool
         ("separate_async", RLECSeparateAsyncTrainer, ("actor_rollout_ref.actor.ppo_mini_batch_size=2",
                                                       "actor_rollout_ref.rollout.nnodes=1",
                                                       "actor_rollout_ref.rollout.checkpoint_engine.backend=nccl"))]


@pytest.mark.parametrize(("mode", "cls", "extra"), MODES, ids=[m for m, _, _ in MODES])
def test_registered_trainer_behaves_as_its_base_mode(compose_rlec, tiny_moe_dir, mode, cls, extra):
    from verl.trainer.ppo.v1 import get_trainer_cls

    overrides = ("layout=tiny_1gpu", f"actor_rollout_ref.model.path={tiny_moe_dir}", *extra)
    assert get_trainer_cls(f"rlec_{mode}") is cls
    ours = cls(compose_rlec(*overrides, f"trainer.v1.trainer_mode=rlec_{mode}"))
    verls = get_trainer_cls(mode)(compose_rlec(*overrides, f"trainer.v1.trainer_mode={mode}"))
    assert ours.trainer_mode == ours.config.trainer.v1.trainer_mode == mode
    # verl's own buffer of the mode, as its reproducible-order subclass (rlec.verl_plugin.replay)
    from rlec.verl_plugin.replay import ORDERED

    assert type(ours.replay_buffer) is ORDERED[type(verls.replay_buffer)]
    assert ours.parameter_sync_step == verls.parameter_sync_step
    # the trainer's own RunConfig, built before verl's base mode is written, reads the base mode's section too
    assert ours.rlec_run.keys.verl_trainer_mode == f"rlec_{mode}"
    assert ours.rlec_run.parameter_sync_step == verls.parameter_sync_step
    assert isinstance(ours, get_trainer_cls(mode))


def test_validation_metrics_keep_verl_core_and_add_rlec(compose_rlec, tiny_moe_dir):
    responses = ["\\boxed{4}", "\\boxed{5}", "\\boxed{I don't know}", "\\boxed{Paris}"]
    sources = ["math_dapo", "math_dapo", "hotpotqa", "hotpotqa"]
    extras = [{"target_p": 0.5}, {"target_p": 0.5}, {"target_p": 0.7}, {"objective": "binary"}]
    infos = [asyncio.run(score_one_async(response, gold, source, extra, 3, LinearSchedule(end_step=5)))
             for response, gold, source, extra in zip(responses, ["4", "4", "Paris", "Paris"], sources, extras)]
    columns = {"reward": [info["score"] for info in infos]} | {key: [info[key] for info in infos] for key in infos[0]}
    trainer = RLECSyncTrainer(compose_rlec("layout=tiny_1gpu", f"actor_rollout_ref.model.path={tiny_moe_dir}"))
    metrics = trainer._val_metrics_update(sources, ["u0", "u1", "u2", "u3"], columns, [1, 1, 1, 1])
    assert metrics["val-core/math_dapo/acc/mean@1"] == 0.5  # verl's own aggregation of our "acc"
    assert metrics["val-aux/hotpotqa/abstained/mean@1"] == 0.5
    assert metrics["val-rlec/accuracy"] == 0.5 and metrics["val-rlec/coverage"] == 0.75
    assert metrics["val-rlec/b"] == 0.5
    assert metrics["val-rlec/p0.6-1.0/abstention_rate"] == 1.0


def test_each_settings_section_is_parsed_once_by_verls_trainer_and_once_by_the_reward_manager(compose_rlec, tiny_moe_dir,
                                                                                                monkeypatch):
    """Issue 59 item 1: the early rules, the algorithms' checks and the trainer's mixins read rlec's settings and E3's and
    Pass@k's from the trainer's one RunConfig, each section parsed once; the reward manager (its own process: verl's
    reward-loop worker is a Ray actor) converts the config it is handed once and parses what it reads once."""
    import collections

    import rlec.settings as settings_module
    from rlec.verl_plugin.reward_manager import RLECRewardManager

    parses = collections.Counter()
    parse_section = settings_module._read

    def counting(cls, section, prefix, validate=True):
        if prefix.count(".") == 1:  # a section's read, not its sub-sections'
            parses[prefix] += 1
        return parse_section(cls, section, prefix, validate)

    monkeypatch.setattr(settings_module, "_read", counting)
    cfg = compose_rlec("layout=tiny_1gpu", f"actor_rollout_ref.model.path={tiny_moe_dir}", "rlec.grading.timeout_s=7.0",
                       "algorithm=[e3,passk]")
    trainer = RLECSyncTrainer(cfg)
    assert parses["rlec.e3"] == parses["rlec.passk"] == parses["rlec.grading"] == 1 and set(parses.values()) == {1}, parses
    parses.clear()
    manager = RLECRewardManager(config=trainer.config, tokenizer=None, compute_score=None)
    assert manager.timeout_s == 7.0
    assert parses["rlec.grading"] == 1 and set(parses.values()) == {1}, parses
