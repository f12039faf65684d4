"""Issue 59 item 1: each section of the config is parsed once per process. verl's trainer is built the way verl
builds it (rlec's registered trainer class on the composed config; verl's own constructor, rollout-weight sync and
Ray left out), with E3 and Pass@k on, and every parse of ``rlec.e3``, ``rlec.passk`` and rlec's own sections
(:class:`rlec.settings.RlecSettings`) is counted while the trainer is constructed, builds its algorithms and its
mixins read their settings. Before the trainer read one :class:`rlec.run_config.RunConfig`, ``rlec.e3`` was parsed
5 times here (E3's check, Pass@k's E3 budget warning, E3's build twice, ...). The RunConfig is the one home of a parse:
no other cache keeps one (the settings reader keeps nothing; the agent loops share one conversion per worker config)."""

from __future__ import annotations

import collections

import pytest

pytest.importorskip("verl")

from verl.trainer.ppo.v1 import PPOTrainerSync  # noqa: E402

import rlec.algorithms.e3.settings  # noqa: E402
import rlec.algorithms.rlve.settings  # noqa: E402
import rlec.run_config  # noqa: E402
import rlec.settings  # noqa: E402
from rlec.algorithms.e3.algorithm import E3  # noqa: E402
from rlec.algorithms.passk.algorithm import PassK  # noqa: E402
from rlec.verl_plugin.trainers import RLECSyncTrainer  # noqa: E402

# E3 on beside algorithm=passk: its switch, the agent loop its overlay sets, a vocabulary size (no model folder here)
E3_AND_PASSK = ("algorithm=passk", "rlec.e3.enable=true",
                "actor_rollout_ref.rollout.agent.default_agent_loop=rlec_e3_agent",
                "rlec.e3.temperature.vocab_size=151936")


@pytest.fixture
def parses(monkeypatch):
    """``{section: parses}``: every call of the generic section reader, wherever it is imported, and every
    :meth:`RlecSettings.from_config` (as ``"rlec"``)."""
    counts = collections.Counter()
    original = rlec.settings.read_section

    def counted(cls, cfg, section, name=None):
        counts[section] += 1
        return original(cls, cfg, section, name)

    # every module that imports it (Pass@k's settings have no reader of their own: RunConfig.section reads them)
    for module in (rlec.settings, rlec.run_config, rlec.algorithms.e3.settings, rlec.algorithms.rlve.settings):
        monkeypatch.setattr(module, "read_section", counted)
    from_config = rlec.settings.RlecSettings.from_config.__func__

    def counted_rlec(cls, cfg):
        counts["rlec"] += 1
        return from_config(cls, cfg)

    monkeypatch.setattr(rlec.settings.RlecSettings, "from_config", classmethod(counted_rlec))
    return counts


def test_the_trainer_parses_each_section_once_with_e3_and_passk_on(compose_rlec, parses, monkeypatch, tmp_path):
    cfg = compose_rlec(*E3_AND_PASSK, f"trainer.default_local_dir={tmp_path}")
    monkeypatch.setattr(PPOTrainerSync, "__init__", lambda self, config, *args, **kwargs: setattr(self, "config", config))
    monkeypatch.setattr(PPOTrainerSync, "on_init_end", lambda self: None)  # verl's rollout-weight sync
    parses.clear()

    trainer = RLECSyncTrainer(cfg)  # the resume rules, the early rule set, every enabled algorithm's check
    trainer.on_init_end()  # the algorithms, built
    trainer._manifest_on()  # the checkpoint mixin's setting
    trainer.rlec_run.rlec.probe  # what the probe and mismatch mixins read  # noqa: B018
    trainer._algorithms()  # a later step's use  # noqa: B018

    assert [type(a) for a in trainer.rlec_algorithms] == [E3, PassK]
    assert dict(parses) == {"rlec": 1, "rlec.e3": 1, "rlec.passk": 1}


def test_the_agent_loops_of_one_worker_convert_its_config_once(compose_rlec, parses, monkeypatch):
    """verl builds an agent loop per sample from its worker's one config object: rlec's settings are parsed once for
    all of them (:func:`rlec.run_config.worker_run_config`), again for another config object."""
    from rlec.cpu.agent_loops import ScriptedAnswersMixin

    monkeypatch.setattr(rlec.run_config, "_WORKER_RUN", None)
    config = compose_rlec("layout=cpu", "precision=fp32", "rlec.cpu.scripted_fraction=0.5")
    parses.clear()
    row = {"data_source": "math_dapo", "reward_model": {"ground_truth": "42"}}
    for i in range(8):  # one loop per sample, as verl's worker makes them
        loop = object.__new__(ScriptedAnswersMixin)
        loop.config, loop.rollout_config = config, config.actor_rollout_ref.rollout
        loop._scripted_text({**row, "session_id": i})
    assert dict(parses) == {"rlec": 1}
    loop.config = config.copy()  # another worker's config
    loop._scripted_text({**row, "session_id": 0})
    assert dict(parses) == {"rlec": 2}


def test_the_count_sees_a_second_parse(compose_rlec, parses):
    """The counter is not blind: two RunConfigs of the same config parse twice (each parses once)."""
    from rlec.algorithms import registry
    from rlec.run_config import RunConfig

    cfg = compose_rlec(*E3_AND_PASSK)
    parses.clear()
    registry.check_all(RunConfig(cfg))
    assert parses["rlec.e3"] == 1 and parses["rlec.passk"] == 1
    registry.check_all(RunConfig(cfg))  # a second conversion of the same tree
    assert parses["rlec.e3"] == 2 and parses["rlec.passk"] == 2
