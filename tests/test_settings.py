"""rlec's settings schema (rlec/settings.py): defaults agree with the YAML, every field refuses nonsense,
and every path (DRY_RUN's checks, verl's trainer at construction) refuses it before any other work."""

from __future__ import annotations

import dataclasses
import math
import typing

import pytest
from omegaconf import OmegaConf, open_dict

from rlec.cluster.config_check import run_checks
from rlec.config import compose
from rlec.rules.settings_rules import early_errors
from rlec.run_config import RunConfig
from rlec.settings import RlecSettings, SettingError

# where each section's defaults are written (the YAML users read): (config name, overrides)
SECTION_SOURCES = {
    "schedule": ("rlec", ()), "grading": ("rlec", ()), "metrics": ("rlec", ()), "checkpoint": ("rlec", ()),
    "probe": ("rlec", ()),
    "check": ("rlec", ()), "cpu": ("rlec", ("layout=cpu", "precision=fp32")),
}

# one value per field that no run should accept, with the rule it breaks
NONSENSE: dict[str, typing.Any] = {
    "rlec.schedule.start_value": 1.5,                  # b outside [0, 1]
    "rlec.schedule.end_value": math.nan,
    "rlec.schedule.start_step": -1,
    "rlec.schedule.end_step": 1,                       # not after start_step = 1
    "rlec.grading.timeout_s": 0.0,
    "rlec.metrics.target_bucket_edges": [0.0, 0.6, 0.3, 1.0],  # inverted
    "rlec.checkpoint.manifest": "yes",                 # a string, not a switch
    "rlec.probe.file": "probe.txt",                     # not a parquet of prompts
    "rlec.probe.every": 0,
    "rlec.probe.samples": 0,
    "rlec.probe.temperature": 0.0,                     # a degenerate distribution: no entropy to measure
    "rlec.probe.pass_k": 9,                            # more than the 8 samples per prompt: no unbiased pass@k
    "rlec.check.model_shape": "no_such_model",         # no megatron_configs/model/<name>.json
    "rlec.check.gpu_memory_gib": -80,
    "rlec.check.gpu_arch": "blackwell",                # not a compute capability
    "rlec.check.memory_fraction": 1.5,
    "rlec.check.cpus_per_node": 0,
    "rlec.check.mismatch_kl_alarm": -0.004,            # a KL level <= 0 alarms on every step
    "rlec.check.mismatch_kl_stop": "halt",             # a string, not a switch
    "rlec.cpu.scripted_fraction": 1.0,                 # a whole group scripted: no rollout left
    "rlec.cpu.rollout_weight_noise": 1.5,              # noise larger than the weights themselves
    "rlec.cpu.rollout_noise_seed": -1,
    "rlec.cpu.eval.max_questions": 0,
    "rlec.cpu.eval.max_new_tokens": 0,
    "rlec.cpu.eval.goal_check": "yes",                 # a string, not a switch
}
# fields where no value is nonsense (free text), with the reason; none today: the two strings have rules
FREE_STRINGS: dict[str, str] = {}


def leaf_fields(cls: type = RlecSettings, prefix: str = "rlec") -> dict[str, type]:
    """``{"rlec.grading.timeout_s": float, ...}``: every leaf field of the schema, recursively, with its type."""
    hints = typing.get_type_hints(cls)
    out: dict[str, type] = {}
    for f in dataclasses.fields(cls):
        key, kind = f"{prefix}.{f.metadata.get('key', f.name)}", hints[f.name]
        if dataclasses.is_dataclass(kind):
            out.update(leaf_fields(kind, key))
        else:
            out[key] = kind
    return out


def default_of(key: str) -> typing.Any:
    node: typing.Any = RlecSettings()
    for part in key.split(".")[1:]:
        node = getattr(node, "check_" if part == "check" and isinstance(node, RlecSettings) else part)
    return node


@pytest.fixture(scope="module")
def composed() -> dict[str, typing.Any]:
    return {name: compose(list(overrides), config_name=config) for name, (config, overrides) in SECTION_SOURCES.items()}


def test_every_field_has_a_nonsense_value_or_a_reason() -> None:
    assert set(leaf_fields()) == set(NONSENSE) | set(FREE_STRINGS)
    assert not set(NONSENSE) & set(FREE_STRINGS)


@pytest.mark.parametrize("key", sorted(leaf_fields()))
def test_the_dataclass_default_is_the_yaml_default(composed, key: str) -> None:
    section = key.split(".")[1]
    cfg = composed[section]
    value = OmegaConf.select(cfg, key, throw_on_missing=True)
    value = OmegaConf.to_container(value) if OmegaConf.is_config(value) else value
    default = default_of(key)
    assert (list(default) if isinstance(default, tuple) else default) == value, (key, default, value)


def test_the_composed_configs_have_no_key_the_schema_lacks(composed) -> None:
    for cfg in composed.values():
        RlecSettings.from_config(cfg)  # raises on an unknown key under a known section


@pytest.mark.parametrize("key", sorted(NONSENSE))
def test_a_nonsense_value_of_every_field_is_refused_naming_the_key(composed, key: str) -> None:
    cfg = composed[key.split(".")[1]].copy()
    with open_dict(cfg):
        OmegaConf.update(cfg, key, NONSENSE[key], merge=False)
    with pytest.raises(SettingError) as info:
        RlecSettings.from_config(cfg)
    assert info.value.key == key and str(info.value).startswith(f"{key}=")


@pytest.mark.parametrize("key", sorted(k for k, kind in leaf_fields().items() if kind is not str))
def test_a_string_where_a_number_or_switch_is_expected_is_refused(key: str) -> None:
    nested: dict = {}
    node = nested
    *parents, leaf = key.split(".")
    for part in parents:
        node = node.setdefault(part, {})
    node[leaf] = "abc"
    with pytest.raises(SettingError, match=f"^{key}='abc': must be"):
        RlecSettings.from_config(nested)


@pytest.mark.parametrize(("rlec", "key"), [
    ({"grading": {"timout_s": 1}}, "rlec.grading.timout_s"),    # a typo under a known section
    ({"cpu": {"eval": {"at_start": True}}}, "rlec.cpu.eval.at_start"),
])
def test_unknown_keys_under_rlec_are_refused(rlec: dict, key: str) -> None:
    with pytest.raises(SettingError, match=rf"^{key}=.*is not an? "):
        RlecSettings.from_config({"rlec": rlec})


def test_an_unknown_rlec_section_is_refused_by_the_early_rules_not_an_algorithms_section() -> None:
    """The schema reads only its own sections; the early rule set refuses a section that neither it nor a
    registered algorithm owns (``rlec.grader``), and accepts the algorithms' (``rlec.e3``, ``rlec.rlve``)."""
    from rlec.rules.settings_rules import settings_rules

    def rlec_findings(rlec: dict) -> list[tuple[str, bool]]:
        return [(f.key, "is not an rlec section" in f.message) for f in settings_rules(RunConfig({"rlec": rlec}))
                if f.key.startswith("rlec")]

    assert rlec_findings({"grader": {"timeout_s": 1}}) == [("rlec.grader", True)]
    assert rlec_findings({"e3": {}, "rlve": {}}) == []


def test_missing_sections_take_the_defaults_and_algorithm_sections_are_left_to_the_algorithms() -> None:
    assert RlecSettings.from_config({}) == RlecSettings()
    assert RlecSettings.from_config({"rlec": {"e3": {"whatever": 1}, "rlve": {}}}) == RlecSettings()
    assert RlecSettings.from_config({"rlec": {"metrics": {"target_bucket_edges": [0, 0.5, 1]}}}).metrics.target_bucket_edges == (0.0, 0.5, 1.0)


def _with(cfg: typing.Any, key: str, value: typing.Any) -> typing.Any:
    cfg = cfg.copy()
    with open_dict(cfg):
        OmegaConf.update(cfg, key, value, merge=False)
    return cfg


@pytest.mark.parametrize("key", sorted(NONSENSE))
def test_a_nonsense_value_of_every_field_is_refused_by_every_path_before_any_work(composed, key: str) -> None:
    """DRY_RUN's checks stop at the early rule set (no model shape read, no path or verl check, so no
    model is built or loaded), and the rules verl's trainer runs at construction (before any worker starts)
    refuse the same value naming the same key."""
    cfg = _with(composed[key.split(".")[1]], key, NONSENSE[key])
    findings, est, context = run_checks(RunConfig(cfg), check_paths=True)
    assert [(f.level, f.key) for f in findings] == [("error", key)]
    assert est is None and "shape" not in context and "verl_passed" not in context  # nothing else was looked at
    assert [(f.level, f.key) for f in early_errors(RunConfig(cfg))] == [("error", key)]


def test_read_section_is_the_generic_typed_reader_of_the_algorithms_settings() -> None:
    """``read_section`` reads a nested dataclass tree from any dotted section: missing keys take the defaults, an
    explicit null is None, an unknown key, a wrong type or a non-finite number is refused naming the full key; ranges
    are left to the settings' own ``check()`` (no range check here)."""
    from rlec.algorithms.e3 import E3Settings
    from rlec.settings import read_section

    cfg = {"rlec": {"e3": {"budget": {"n_min": 1}, "temperature": {"min": None, "anneal": {"start": 0.3}}}}}
    s = read_section(E3Settings, cfg, "rlec.e3")
    assert (s.budget.n_min, s.budget.n_max, s.temperature.min, s.temperature.max, s.temperature.anneal.start) == (1, 16, None, 1.5, 0.3)
    assert read_section(E3Settings, {}, "rlec.e3") == E3Settings()
    for bad, key in (({"budget": {"n_mim": 2}}, "rlec.e3.budget.n_mim"), ({"budget": {"n_min": 2.5}}, "rlec.e3.budget.n_min"),
                     ({"length_bias": {"mu": float("inf")}}, "rlec.e3.length_bias.mu"), ({"enable": "yes"}, "rlec.e3.enable")):
        with pytest.raises(SettingError) as info:
            read_section(E3Settings, {"rlec": {"e3": bad}}, "rlec.e3")
        assert info.value.key == key, (bad, str(info.value))


def test_read_section_reads_rlves_field_shapes_mappings_string_or_list_and_any() -> None:
    """The shapes RLVE's settings need (issue 35): ``str | tuple[str, ...]`` (a comma-separated string or a list),
    ``tuple[float, ...] | Mapping[str, float] | None`` (a list or a mapping), ``Mapping[str, Any]`` (taken as given,
    for ``check()``); a value of no alternative's shape is refused naming the full key (here ``rlec.rlve.<key>``,
    the key users set, though the section read is ``data.rlve``)."""
    from rlec.algorithms.rlve import RLVESettings
    from rlec.settings import read_section

    def read(section: dict) -> RLVESettings:
        return read_section(RLVESettings, {"data": {"rlve": section}}, "data.rlve", name="rlec.rlve")

    assert read({"environments": "maze,sorting"}).environments == "maze,sorting"
    assert read({"environments": ["maze", "sorting"]}).environments == ("maze", "sorting")
    assert read({"weights": [1, 2]}).weights == (1.0, 2.0) and read({"weights": {"maze": 2}}).weights == {"maze": 2.0}
    assert read({"weights": None}).weights is None
    assert read({"difficulty": {"maze": {"initial": 1.5}}}).difficulty == {"maze": {"initial": 1.5}}  # check() judges it
    for bad, key, rule in (({"weights": "heavy"}, "rlec.rlve.weights", "must be a list or a mapping"),
                           ({"weights": {"maze": "x"}}, "rlec.rlve.weights.maze", "must be a number"),
                           ({"environments": {"maze": 1}}, "rlec.rlve.environments", "must be a single value or a list"),
                           ({"difficulty": [1]}, "rlec.rlve.difficulty", "must be a mapping"),
                           ({"window": "4"}, "rlec.rlve.window", "must be an integer"),
                           ({"colour": "red"}, "rlec.rlve.colour", "is not a setting of rlec.rlve")):
        with pytest.raises(SettingError) as info:
            read(bad)
        assert info.value.key == key and rule in info.value.rule, (bad, str(info.value))


def test_rlec_settings_keep_no_parse_and_a_run_config_parses_once(monkeypatch) -> None:
    """Issue 59 item 1: the process's RunConfig is the one home of a parse (``run.rlec`` once per object); the settings
    reader keeps nothing (before: a process-wide cache by content, rlec.settings._PARSED, beside the RunConfig's own)."""
    import rlec.settings as settings_module
    from rlec.run_config import RunConfig

    parses = []
    read = settings_module._read
    monkeypatch.setattr(settings_module, "_read", lambda cls, section, prefix, validate=True:
                        (parses.append(prefix) if prefix == "rlec" else None) or read(cls, section, prefix, validate))
    cfg = OmegaConf.create({"rlec": {"grading": {"timeout_s": 7.0}, "e3": {"enable": True}}, "trainer": {"x": 1}})
    first = RlecSettings.from_config(cfg)
    assert RlecSettings.from_config(cfg) == first and RlecSettings.from_config(cfg) is not first and len(parses) == 3
    assert not hasattr(settings_module, "_PARSED")
    run = RunConfig(cfg)
    assert run.rlec is run.rlec and run.rlec == first and len(parses) == 4  # an algorithm's section is not rlec's own
    with open_dict(cfg):
        cfg.rlec.schedule = {"end_step": 9}
    assert RlecSettings.from_config(cfg).schedule.end_step == 9 and first.schedule.end_step is None
    assert RunConfig(cfg).rlec.schedule.end_step == 9 and run.rlec.schedule.end_step is None  # read when converted
    assert RlecSettings.from_config({"rlec": {"schedule": {"end_step": 3}}}).schedule.end_step == 3
    with pytest.raises(SettingError, match="rlec.schedule.end_step=True: must be an integer"):
        RlecSettings.from_config({"rlec": {"schedule": {"end_step": True}}})
