"""rlec's runtime reads of verl's own sections go through verl's dataclasses (issue 35, item 5): the typed view
is verl's (its class, its defaults), agrees with the composed YAML, and drops only rlec's keys from ``algorithm``."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from rlec.verl_plugin.typed_config import actor_config, algo_config, rollout_config


@pytest.mark.parametrize("layout", ["cpu", "tiny_1gpu"])
def test_the_typed_sections_are_verls_classes_with_the_composed_values(compose_rlec, layout: str) -> None:
    # precision bf16: verl's McoreEngineConfig refuses float32 unless the CPU platform's shims run (a Ray worker)
    cfg = compose_rlec(f"layout={layout}")
    actor, rollout = actor_config(cfg), rollout_config(cfg)
    assert type(actor).__name__ == "McoreActorConfig" and type(rollout).__name__ == "RolloutConfig"
    raw_actor, raw_rollout = cfg.actor_rollout_ref.actor, cfg.actor_rollout_ref.rollout
    assert actor.ppo_mini_batch_size == raw_actor.ppo_mini_batch_size
    assert actor.ppo_micro_batch_size_per_gpu == raw_actor.ppo_micro_batch_size_per_gpu
    assert actor.loss_agg_mode == raw_actor.loss_agg_mode and actor.optim.lr == raw_actor.optim.lr
    assert (rollout.n, rollout.temperature, rollout.top_p, rollout.seed) == (raw_rollout.n, raw_rollout.temperature,
                                                                         raw_rollout.top_p, raw_rollout.seed)


def test_a_key_the_yaml_leaves_out_reads_verls_default_not_a_guess(compose_rlec) -> None:
    cfg = compose_rlec("layout=tiny_1gpu")
    OmegaConf.set_struct(cfg, False)
    del cfg.actor_rollout_ref.rollout["top_k"]  # a raw read with its own default (-1) would guess
    from verl.workers.config import RolloutConfig

    assert rollout_config(cfg).top_k == RolloutConfig.__dataclass_fields__["top_k"].default


def test_algo_config_drops_only_the_algorithms_copies(compose_rlec) -> None:
    cfg = compose_rlec("algorithm=passk")
    algo = algo_config(cfg)
    assert type(algo).__name__ == "AlgoConfig" and algo.adv_estimator == "rlec_passk" and algo.norm_adv_by_std_in_grpo is False
    assert not hasattr(algo, "passk") and "passk" in cfg.algorithm  # the live section keeps what the estimator reads


def test_a_value_verls_dataclass_refuses_names_the_section(compose_rlec) -> None:
    cfg = compose_rlec("layout=tiny_1gpu")
    OmegaConf.update(cfg, "actor_rollout_ref.actor.loss_agg_mode", "no-such-mode", merge=False)
    with pytest.raises(ValueError, match=r"^actor_rollout_ref\.actor: verl's config dataclass refuses it"):
        actor_config(cfg)
    with pytest.raises(ValueError, match=r"^actor_rollout_ref\.rollout: the config has no such section"):
        rollout_config({"actor_rollout_ref": {}})
