"""The worked example of docs/adding_an_algorithm.md runs as written: its algorithm is checked, built and
driven through the same calls both training loops make, with hand-computed values."""

from __future__ import annotations

import re
import sys
import types

import pytest
from omegaconf import OmegaConf, open_dict

from rlec.algorithms.base import Algorithm, AlgorithmContext, RolloutPlan, StepRecord
from rlec.run_config import RunConfig


@pytest.fixture(scope="module")
def example(repo_root):
    text = (repo_root / "docs" / "adding_an_algorithm.md").read_text()
    section = text[text.index("## Worked example"):]
    code = re.search(r"```python\n(.*?)```", section, re.DOTALL).group(1)
    overlay = re.search(r"```yaml\n(.*?)```", section, re.DOTALL).group(1)
    module = types.ModuleType("length_decay_example")  # dataclasses look their module up in sys.modules
    sys.modules[module.__name__] = module
    try:
        exec(compile(code, "docs/adding_an_algorithm.md", "exec"), module.__dict__)  # noqa: S102 - the doc's own example
        yield module.LengthDecay, OmegaConf.create(overlay)
    finally:
        del sys.modules[module.__name__]


def _config(compose_rlec, overlay, **values):
    cfg = compose_rlec()
    with open_dict(cfg):
        cfg.rlec.length_decay = OmegaConf.to_container(overlay.rlec.length_decay)
        for key, value in values.items():
            cfg.rlec.length_decay[key] = value
    return cfg


def test_the_example_is_checked_built_and_driven_like_every_algorithm(example, compose_rlec):
    cls, overlay = example
    assert issubclass(cls, Algorithm) and cls.name == "length_decay"
    run = RunConfig(_config(compose_rlec, overlay))  # what the registry hands every algorithm: the config read once
    assert cls.enabled(run) and cls.check(run) == [] and not cls.enabled(RunConfig(compose_rlec()))
    algorithm = cls.from_config(run, AlgorithmContext())
    plan = RolloutPlan(1.0, [4, 4])
    algorithm.plan_rollout(51, [{"index": 0}, {"index": 1}], plan)
    c = 0.001 * (1 - 50 / 100)  # c_51 = c0 (1 - (t - 1) / end_step)
    assert plan.prompt_fields["rlec_length_decay_c"] == [pytest.approx(c)] * 2 and plan.n_per_prompt == [4, 4]
    fields = {name: values[0] for name, values in plan.prompt_fields.items()}
    info = {"correct": 1.0, "score": 0.5}
    assert cls.adjust_reward(0.5, info, fields, 200) == pytest.approx(0.5 / (1 + c * 200)) == info["score"]
    assert cls.adjust_reward(-0.3, {"correct": 0.0}, fields, 200) == -0.3  # only correct responses
    assert cls.adjust_reward(0.5, {"correct": 1.0}, {}, 200) == 0.5  # validation: no planned field
    assert algorithm.observe(51, 100, StepRecord([], [], [], {})) == {"length_decay/c": pytest.approx(c)}
    assert algorithm.coefficient(101) == 0.0


@pytest.mark.parametrize(("key", "value"), [("c0", -1.0), ("end_step", 0), ("c0", "abc"), ("enable", "yes"), ("c_0", 1.0)])
def test_the_example_refuses_nonsense_settings(example, compose_rlec, key, value):
    cls, overlay = example
    run = RunConfig(_config(compose_rlec, overlay, **{key: value}))
    assert [f for f in cls.check(run) if f.level == "error"]
    with pytest.raises(ValueError, match="rlec.length_decay"):
        cls.from_config(run, AlgorithmContext())


def test_the_examples_section_passes_the_early_rules_once_registered(example, compose_rlec, monkeypatch):
    """The schema does not own ``rlec.length_decay``: the early rule set refuses it as an unknown section
    until the algorithm is in the registry, and accepts it after the registry line alone (no change to
    rlec/settings.py or the rules: the "3 production files" of the page)."""
    from rlec.algorithms import registry
    from rlec.rules.settings_rules import settings_rules

    cls, overlay = example
    cfg = _config(compose_rlec, overlay)
    assert [f.key for f in settings_rules(RunConfig(cfg))] == ["rlec.length_decay"]
    monkeypatch.setattr(registry, "ALGORITHMS", (*registry.ALGORITHMS, cls))
    assert settings_rules(RunConfig(cfg)) == []
    with open_dict(cfg):
        cfg.rlec.schedul = {"end_step": 3}  # a typo of a schema section stays refused
    assert [f.key for f in settings_rules(RunConfig(cfg))] == ["rlec.schedul"]


def test_once_registered_the_example_is_in_the_verdict_the_step_table_and_the_resume_rules(example, compose_rlec,
                                                                                         monkeypatch):
    """The registry line alone (no change to rlec/cluster, rlec/report.py or rlec/config.py) puts the new algorithm
    in DRY_RUN's verdict and in the CPU run's step table; a resume that changes its settings is refused with or
    without it (the resume rule is an allow-list, rlec.config.RESUME_ALLOWED: no algorithm declares its keys)."""
    from rlec.algorithms import registry
    from rlec.cluster.config_check import algorithms_line
    from rlec.config import resume_differences
    from rlec.report import training_table

    cls, overlay = example
    cfg = _config(compose_rlec, overlay, c0=0.001)
    records = [{"step": 1, "length_decay/c": 0.001}, {"step": 2, "length_decay/c": 0.00099}]
    changed = _config(compose_rlec, overlay, c0=0.002)
    before = (algorithms_line(RunConfig(cfg)), training_table(records), resume_differences(cfg, changed))
    assert "length decay" not in before[0] and "decay c" not in before[1]
    assert before[2][0] == ["rlec.length_decay.c0: 0.001 -> 0.002"]  # refused before registration too (issue 55)
    monkeypatch.setattr(registry, "ALGORITHMS", (*registry.ALGORITHMS, cls))
    assert algorithms_line(RunConfig(cfg)).endswith(" | length decay (c0 0.001 -> 0 by step 100)")
    header, _, first, second = training_table(records).splitlines()
    assert "| decay c |" in header and "| 0.00100 |" in first and "| 0.00099 |" in second
    refused, _ = resume_differences(cfg, changed)
    assert refused == ["rlec.length_decay.c0: 0.001 -> 0.002"]
