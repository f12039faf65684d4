"""The algorithm overlays (megatron_configs/algorithm/) compose with every layout and precision and
pass verl's and rlec's checks (DRY_RUN); rlec.rules.checks refuses impossible E3 / Pass@k settings."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from rlec.cluster.config_check import run_checks
from rlec.rules.checks import algorithm_overlay_rules, verl_algorithm_section
from rlec.config import cluster_layouts, gpu_precisions, options
from rlec.run_config import RunConfig

LAYOUTS = cluster_layouts()
PRECISIONS = gpu_precisions()
ALGORITHMS = options("algorithm") + ["[e3,passk]"]


def errors(findings):
    return [str(f) for f in findings if f.level == "error"]


def test_committed_algorithm_overlays():
    assert {"e3", "passk"} <= set(ALGORITHMS)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_every_layout_precision_algorithm_composes_and_passes(compose_rlec, fp8_model, layout, precision, algorithm):
    cfg = compose_rlec(f"layout={layout}", f"precision={precision}", f"algorithm={algorithm}", *fp8_model(layout, precision))
    findings, est, context = run_checks(RunConfig(cfg), check_paths=False)
    assert errors(findings) == []
    assert "algorithm" in context["verl_passed"] and "trainer.v1.trainer_mode" in context["verl_passed"]
    assert est is not None
    if "e3" in algorithm:
        assert cfg.rlec.e3.enable is True and cfg.actor_rollout_ref.rollout.agent.default_agent_loop == "rlec_e3_agent"
    if "passk" in algorithm:
        assert cfg.algorithm.adv_estimator == "rlec_passk" and cfg.rlec.passk.k < cfg.actor_rollout_ref.rollout.n
        assert not any(f.key == "algorithm.adv_estimator" for f in findings)  # the overlay's estimator is not "changed"


def test_overlays_change_only_their_own_keys(compose_rlec):
    base = OmegaConf.to_container(compose_rlec(), resolve=True)
    e3 = OmegaConf.to_container(compose_rlec("algorithm=e3"), resolve=True)
    passk = OmegaConf.to_container(compose_rlec("algorithm=passk"), resolve=True)
    assert base["rlec"]["e3"]["enable"] is False and "passk" not in base["algorithm"]
    e3["rlec"]["e3"]["enable"] = False
    e3["actor_rollout_ref"]["rollout"]["agent"]["default_agent_loop"] = "single_turn_agent"
    assert e3 == base
    del passk["algorithm"]["passk"], passk["rlec"]["passk"]
    passk["algorithm"]["adv_estimator"] = "grpo"
    assert passk == base


def test_verl_algorithm_section_drops_only_rlec_keys(compose_rlec):
    from verl.utils.config import omega_conf_to_dataclass

    cfg = compose_rlec("algorithm=passk")
    with pytest.raises(Exception, match="passk"):
        omega_conf_to_dataclass(cfg.algorithm)  # verl's AlgoConfig has no passk field
    algo = omega_conf_to_dataclass(verl_algorithm_section(cfg.algorithm))
    assert algo.adv_estimator == "rlec_passk" and algo.norm_adv_by_std_in_grpo is False


INVALID = [
    (("algorithm=e3", "trainer.v1.trainer_mode=rlec_colocate_async"), "trainer.v1.trainer_mode", "rlec.e3 needs rlec_sync"),
    (("algorithm=e3", "trainer.v1.trainer_mode=sync"), "trainer.v1.trainer_mode", "lack rlec's E3 trainer mixin"),
    (("algorithm=e3", "actor_rollout_ref.rollout.agent.default_agent_loop=single_turn_agent"),
     "actor_rollout_ref.rollout.agent.default_agent_loop", "needs rlec_e3_agent"),
    (("algorithm=e3", "rlec.e3.budget.n_max=6"), "rlec.e3.budget", "need n_min <= rollout.n <= n_max"),
    (("algorithm=e3", "rlec.e3.budget.n_min=1"), "rlec.e3", "need 2 <= n_min <= n_max"),
    (("algorithm=e3", "actor_rollout_ref.rollout.temperature=1.8"), "actor_rollout_ref.rollout.temperature",
     "outside rlec.e3.temperature"),
    (("algorithm=e3", "rlec.e3.length_bias.penalty_threshold=1.5"), "rlec.e3", "penalty_threshold"),
    (("algorithm=passk", "rlec.passk.k=8"), "rlec.passk.k", "must be < rollout.n = 8"),
    (("algorithm=passk", "rlec.passk.k=1"), "rlec.passk.k", "pass@1 is RLEC's own grpo"),
    (("algorithm=passk", "algorithm.use_kl_in_reward=true"), "algorithm.use_kl_in_reward", "correct is read as reward > 0"),
    (("algorithm=passk", "rlec.passk.switch.enable=true"), "rlec.passk.switch.entropy_threshold", "nats"),
    (("algorithm=passk", "rlec.passk.switch.enable=true", "rlec.passk.switch.entropy_threshold=0.3",
      "trainer.v1.trainer_mode=sync"), "trainer.v1.trainer_mode", "runs in rlec's trainers"),
]


@pytest.mark.parametrize(("overrides", "key", "message"), INVALID, ids=[m for _, _, m in INVALID])
def test_impossible_algorithm_settings_are_refused(compose_rlec, overrides, key, message):
    findings = algorithm_overlay_rules(RunConfig(compose_rlec(*overrides)))
    assert any(f.level == "error" and f.key == key and message in f.message for f in findings), [str(f) for f in findings]


def test_e3_temperature_bound_can_be_switched_off(compose_rlec):
    # the clip is rlec's safety bound, not part of E3: null on both sides accepts any T_0 > 0 (docs/e3.md)
    cfg = compose_rlec("algorithm=e3", "rlec.e3.temperature.min=null", "rlec.e3.temperature.max=null",
                       "actor_rollout_ref.rollout.temperature=1.8")
    assert errors(algorithm_overlay_rules(RunConfig(cfg))) == []


def test_passk_with_e3_budget_warns_when_easy_prompts_get_no_more_than_k(compose_rlec):
    findings = algorithm_overlay_rules(RunConfig(compose_rlec("algorithm=[e3,passk]", "rlec.passk.k=4")))
    assert errors(findings) == []
    assert any(f.level == "warning" and f.key == "rlec.e3.budget.n_min" for f in findings)


def test_rlec_yaml_e3_defaults_equal_the_settings_defaults(compose_rlec):
    """recipe.yaml spells every rlec.e3 default out for users; E3Settings holds the same ones for configs without them."""
    from rlec.algorithms.e3 import E3Settings

    cfg = compose_rlec()
    assert E3Settings.from_config(cfg) == E3Settings()
    def leaf_keys(cls, prefix=""):  # every leaf of the settings tree, as its key under rlec.e3
        import dataclasses
        import typing

        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            yield from leaf_keys(hints[f.name], f"{prefix}{f.name}.") if dataclasses.is_dataclass(hints[f.name]) else [prefix + f.name]

    listed = set(leaf_keys(E3Settings))
    yaml_keys = set()

    def walk(node, prefix=""):
        for key, value in node.items():
            path = f"{prefix}.{key}" if prefix else key
            walk(value, path) if hasattr(value, "items") else yaml_keys.add(path)

    walk(cfg.rlec.e3)
    assert yaml_keys == listed
