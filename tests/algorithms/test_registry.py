"""The algorithm registry: one switch, one overlay, one check per algorithm; every settings field refuses nonsense."""

from __future__ import annotations

import dataclasses
import math

import pytest
from omegaconf import OmegaConf

from rlec.algorithms.base import Algorithm, RolloutPlan, StepRecord
from rlec.algorithms.e3 import E3Settings
from rlec.algorithms.e3.algorithm import E3
from rlec.algorithms.passk import PasskSettings
from rlec.algorithms.passk.algorithm import PassK
from rlec.algorithms.registry import ALGORITHMS, check_all, enabled
from rlec.algorithms.rlve import RLVESettings
from rlec.algorithms.rlve.algorithm import RLVE
from rlec.config import CONFIG_DIR, REPO_ROOT, compose
from rlec.run_config import RunConfig

# per algorithm: its settings class and, per field, (config key, a nonsense value of the right type)
NONSENSE = {
    E3: (E3Settings, {
        "enable": ("rlec.e3.enable", "yes"),
        "temperature.enable": ("rlec.e3.temperature.enable", "yes"),
        "temperature.min": ("rlec.e3.temperature.min", -0.5),
        "temperature.max": ("rlec.e3.temperature.max", 0.0),
        "temperature.init_steps": ("rlec.e3.temperature.init_steps", 0),
        "temperature.target_entropy": ("rlec.e3.temperature.target_entropy", -1.0),
        "temperature.vocab_size": ("rlec.e3.temperature.vocab_size", 2),
        "temperature.anneal.enable": ("rlec.e3.temperature.anneal.enable", "yes"),
        "temperature.anneal.start": ("rlec.e3.temperature.anneal.start", 1.5),
        "temperature.anneal.final_factor": ("rlec.e3.temperature.anneal.final_factor", 0.0),
        "budget.enable": ("rlec.e3.budget.enable", "yes"),
        "budget.n_min": ("rlec.e3.budget.n_min", 1),
        "budget.n_max": ("rlec.e3.budget.n_max", 1),
        "length_bias.enable": ("rlec.e3.length_bias.enable", "yes"),
        "length_bias.mu": ("rlec.e3.length_bias.mu", -0.1),
        "length_bias.penalty_threshold": ("rlec.e3.length_bias.penalty_threshold", 1.5),
    }),
    PassK: (PasskSettings, {
        "enable": ("rlec.passk.enable", "yes"),
        "k": ("rlec.passk.k", 1),
        "switch.enable": ("rlec.passk.switch.enable", "yes"),
        "switch.entropy_threshold": ("rlec.passk.switch.entropy_threshold", -0.1),
    }),
    RLVE: (RLVESettings, {
        "enable": ("rlec.rlve.enable", "yes"),
        "rows_per_epoch": ("rlec.rlve.rows_per_epoch", 0),
        # the environment source's settings (RLVESettings extends SourceConfig), one key each under rlec.rlve
        "environments": ("rlec.rlve.environments", ["nope"]),
        "weights": ("rlec.rlve.weights", [-1.0]),
        "seed": ("rlec.rlve.seed", -1),
        "samples_per_prompt": ("rlec.rlve.samples_per_prompt", 0),
        "min_samples_factor": ("rlec.rlve.min_samples_factor", 0),
        "window": ("rlec.rlve.window", 0),
        "threshold": ("rlec.rlve.threshold", 1.5),
        "initial_difficulty": ("rlec.rlve.initial_difficulty", -1),
        "difficulty": ("rlec.rlve.difficulty", {"nope": {"initial": 1}}),
        "binary_fraction": ("rlec.rlve.binary_fraction", 1.5),
        "target_min": ("rlec.rlve.target_min", -0.5),
        "target_max": ("rlec.rlve.target_max", 1.5),
        "max_prompt_tokens": ("rlec.rlve.max_prompt_tokens", -5),
        "lookahead": ("rlec.rlve.lookahead", -1),
    }),
}


def _fields(settings: type, prefix: str = "") -> set[str]:
    """Every leaf field of a settings dataclass tree, a nested one as ``<field>.<leaf>``."""
    import typing

    hints = typing.get_type_hints(settings)
    out = set()
    for f in dataclasses.fields(settings):
        kind = hints[f.name]
        out |= _fields(kind, f"{prefix}{f.name}.") if dataclasses.is_dataclass(kind) else {prefix + f.name}
    return out


def _cases():
    for cls, (settings, table) in NONSENSE.items():
        for field, (key, value) in table.items():
            yield pytest.param(cls, key, value, id=f"{cls.name}-{field}")
            yield pytest.param(cls, key, "abc", id=f"{cls.name}-{field}-string")
            if isinstance(value, float):
                yield pytest.param(cls, key, math.nan, id=f"{cls.name}-{field}-nan")


def test_the_table_names_every_settings_field():
    """A field added to a settings class must get a nonsense value here (and so be proven refused)."""
    assert set(NONSENSE) == set(ALGORITHMS)
    for cls, (settings, table) in NONSENSE.items():
        assert set(table) == _fields(settings), cls.name


@pytest.mark.parametrize(("cls", "key", "value"), list(_cases()))
def test_every_settings_field_refuses_a_nonsense_value(compose_rlec, cls, key, value):
    cfg = compose_rlec(f"algorithm={cls.name}")
    assert [str(f) for f in cls.check(RunConfig(cfg)) if f.level == "error"] == []  # the overlay as committed passes
    OmegaConf.update(cfg, key, value, merge=False)
    errors = [f for f in check_all(RunConfig(cfg)) if f.level == "error"]
    assert errors, f"{key}={value!r} was not refused"
    assert any(key.split(".")[-1] in (f.key + f.message) or f.key in key for f in errors), [str(f) for f in errors]


@pytest.mark.parametrize("cls", ALGORITHMS, ids=[c.name for c in ALGORITHMS])
def test_each_algorithm_has_one_switch_its_overlay_sets_and_a_doc_page(cls: type[Algorithm]):
    assert cls.name and cls.section and cls.switch and cls.doc
    assert (CONFIG_DIR / "algorithm" / f"{cls.name}.yaml").is_file()
    assert (REPO_ROOT / "docs" / cls.doc).is_file()
    assert [c.name for c in enabled(RunConfig(compose([f"algorithm={cls.name}"])))] == [cls.name]
    key, _, value = cls.switch.partition("=")
    assert str(OmegaConf.select(compose([f"algorithm={cls.name}"]), key)).lower() == value
    assert enabled(RunConfig(compose([]))) == []


def test_from_config_raises_the_checks_first_error(compose_rlec):
    from rlec.algorithms.base import AlgorithmContext

    cfg = compose_rlec("algorithm=passk", "rlec.passk.k=8")
    (first,) = [f for f in PassK.check(RunConfig(cfg)) if f.level == "error"]
    with pytest.raises(ValueError) as info:
        PassK.from_config(RunConfig(cfg), AlgorithmContext())
    assert str(info.value) == str(first)


def test_base_algorithm_defaults_change_nothing():
    class Toy(Algorithm):  # only what every algorithm must define (Algorithm is abstract)
        name = "toy"

        @classmethod
        def enabled(cls, cfg):
            return True

        @classmethod
        def from_config(cls, cfg, context):
            return cls()

    plan = RolloutPlan(1.0, [4, 4])
    toy = Toy()
    toy.plan_rollout(1, [None, None], plan)
    assert plan == RolloutPlan(1.0, [4, 4]) and toy.step_overrides(1) == {}
    assert Toy.adjust_reward(0.5, {"correct": 1.0}, {}, 10) == 0.5
    assert toy.observe(1, 10, StepRecord([], [], [], {})) == {} and toy.state_dict() == {}


def test_step_record_needs_one_entry_per_response():
    with pytest.raises(ValueError, match="one entry per response"):
        StepRecord([{}], [], [{}], {})
    record = StepRecord([{}, {}], [{}, {}], [{"correct": 1.0}, {}], {"actor/entropy": 2.0})
    assert record.correct == [1.0, 0.0] and record.entropy == 2.0


def test_the_e3_dataclass_defaults_are_the_composed_yaml_defaults(compose_rlec):
    """E3's defaults are written in recipe.yaml (what users read) and in E3Settings (what a config without
    the section gets): they must agree, field by field (RLVE's: tests/verl_plugin/test_trainers_rlve.py;
    Pass@k's live only in its overlay)."""
    import dataclasses

    from rlec.algorithms.e3 import E3Settings

    composed, defaults = E3Settings.from_config(compose_rlec()), E3Settings()
    for f in dataclasses.fields(E3Settings):  # each part, every leaf of it
        assert getattr(composed, f.name) == getattr(defaults, f.name), (f.name, getattr(composed, f.name))


def test_the_pipeline_reads_what_it_shows_and_protects_from_the_registry(compose_rlec) -> None:
    """The verdict parts, step-table columns and verl keys are each algorithm's own (no pipeline module names an
    algorithm)."""
    from rlec.algorithms import registry

    assert registry.verl_keys() == ("algorithm.passk", "data.rlve") and registry.verl_algorithm_keys() == ("passk",)
    cfg = compose_rlec("layout=tiny_1gpu", "precision=bf16", "algorithm=[rlve,e3,passk]")
    parts = registry.verdicts(RunConfig(cfg))
    assert [p.split(" (")[0] for p in parts] == ["E3", "Pass@k", "RLVE"]
    assert parts[0] == "E3 (temperature 0.5..1.5 from T0 1.0; n 4..16; length bias on the easiest 0.1 of prompts)"
    keys = {"e3/temperature", "passk/active_k", "rlve/maze/difficulty", "rlve/sorting/difficulty", "rlec/b"}
    assert [c[0] for c in registry.table_columns(keys)] == ["E3 T", "pass@k k", "maze d", "sorting d"]
    assert registry.table_columns({"rlec/b"}) == []
    # the console's line per step: each algorithm's first step_line_columns (E3 1, Pass@k 1, RLVE 0: one per environment)
    assert [c[0] for c in registry.step_line_columns(keys | {"e3/rollout_n/mean"})] == ["E3 T", "pass@k k"]
    # the verl value an overlay sets that the generic rules would warn about (issue 59: rules.py named Pass@k's estimator)
    assert registry.sets_verl_value("algorithm.adv_estimator", "rlec_passk")
    assert not registry.sets_verl_value("algorithm.adv_estimator", "grpo") and not registry.sets_verl_value("data.rlve", "rlec_passk")


def test_each_algorithm_has_one_home_and_its_switch_is_there() -> None:
    """Every algorithm's settings and switch live in ``rlec.<name>`` (issue 35); verl's keys are only its copies."""
    for cls in ALGORITHMS:
        assert cls.section == f"rlec.{cls.name}" and cls.switch == f"rlec.{cls.name}.enable=true", cls.name
        assert not any(key.startswith("rlec.") for key in cls.verl_keys), cls.name


@pytest.mark.parametrize(("overrides", "key", "rule"), [
    # verl's copy overridden past the home: the estimator would train another k than the one checked and resumed
    (("algorithm.passk.k=3",), "algorithm.passk.k", "not rlec.passk.k = 2"),
    # the estimator without the switch (Pass@k's settings would not be read or checked)
    (("rlec.passk.enable=false",), "algorithm.adv_estimator", "rlec_passk without rlec.passk.enable"),
    # the switch without verl's estimator (the run would train grpo and log pass@k)
    (("algorithm.adv_estimator=grpo",), "algorithm.adv_estimator", "needs verl's estimator rlec_passk"),
    # the trainer's runtime slot (moved from rlec.rules.settings_rules into Pass@k's own check)
    (("algorithm.passk.active_k=9",), "algorithm.passk.active_k", "[1, actor_rollout_ref.rollout.n = 4]"),
    (("algorithm.passk.active_k=0",), "algorithm.passk.active_k", "must be an integer"),
])
def test_passk_refuses_a_verl_side_that_disagrees_with_its_home(compose_rlec, overrides, key, rule) -> None:
    cfg = compose_rlec("layout=tiny_1gpu", "algorithm=passk", *overrides)
    errors = [f for f in check_all(RunConfig(cfg)) if f.level == "error"]
    assert [f.key for f in errors] == [key] and rule in errors[0].message, [str(f) for f in errors]


def test_rlve_refuses_a_dataset_copy_that_differs_from_its_home(compose_rlec) -> None:
    cfg = compose_rlec("layout=tiny_1gpu", "algorithm=rlve")
    assert [f for f in RLVE.check(RunConfig(cfg)) if f.level == "error"] == []
    OmegaConf.update(cfg, "data.rlve", {**OmegaConf.to_container(cfg.data.rlve, resolve=True), "window": 2}, merge=False)
    errors = [f for f in RLVE.check(RunConfig(cfg)) if f.level == "error"]
    assert [f.key for f in errors] == ["data.rlve"] and "(window)" in errors[0].message and "set rlec.rlve.*" in errors[0].message
