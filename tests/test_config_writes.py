"""rlec.config_writes (issue 59 item 1): the one module that writes into verl's config, what each write does, and
that no other rlec module writes (the verl behaviour forcing each write: tests/verl_plugin/test_drift_config_writes.py)."""

from __future__ import annotations

import ast
import copy
from pathlib import Path

import pytest
from omegaconf import OmegaConf
from omegaconf.errors import ConfigAttributeError, ConfigKeyError

from rlec.run_config import RunConfig
from rlec.config_writes import (pin_schedule_end, rlec_trainer_mode, set_base_trainer_mode, verl_base_mode,
                                write_rollout_temperature, write_step_overrides)

RLEC = Path(__file__).resolve().parents[1] / "rlec"
# OmegaConf.<name>(...) calls that open or write a node; a plain assignment (cfg.a = 1, cfg["a"] = 1) is not seen: the
# name of a config variable does not tell a trainer config from a model or tokenizer config (rlec/models.py)
WRITERS = {"open_dict", "read_write", "set_struct", "set_readonly", "update", "merge_with"}


def _config():
    cfg = OmegaConf.create({"trainer": {"v1": {"trainer_mode": "rlec_sync"}},
                            "actor_rollout_ref": {"rollout": {"temperature": 1.0}},
                            "algorithm": {"adv_estimator": "grpo"}, "rlec": {"schedule": {"end_step": None}}})
    OmegaConf.set_struct(cfg, True)  # as composed: an unknown key is refused unless a write opens the node
    return cfg


def test_the_base_mode_write_keeps_rlecs_mode_readable_for_rlecs_rules():
    cfg = _config()
    set_base_trainer_mode(cfg, "sync")
    assert cfg.trainer.v1.trainer_mode == "sync"  # what verl's PPOTrainer reads
    assert rlec_trainer_mode(cfg) == RunConfig(cfg).trainer_mode == "rlec_sync"  # what the algorithms' checks judge
    set_base_trainer_mode(cfg, "sync")  # the same config handed to a second rlec trainer (a resume in one process)
    assert rlec_trainer_mode(cfg) == "rlec_sync"
    other = _config()
    assert rlec_trainer_mode(other) == "rlec_sync"  # another config object is not confused with the first
    assert rlec_trainer_mode(copy.deepcopy(cfg)) == rlec_trainer_mode(OmegaConf.to_container(cfg)) == "rlec_sync"
    assert copy.deepcopy(cfg).trainer.v1.trainer_mode == "sync"  # the state lives in the config: its copies keep it
    assert rlec_trainer_mode({"trainer": {"v1": {"trainer_mode": "sync"}}}) == "sync"  # a plain dict: as given
    assert rlec_trainer_mode({}) == ""
    # the mode verl runs as, before and after the write (rlec's trainer reads its config before)
    assert verl_base_mode(rlec_trainer_mode(_config())) == verl_base_mode(rlec_trainer_mode(cfg)) == "sync"
    assert verl_base_mode("separate_async") == "separate_async" and verl_base_mode("") == ""


def test_step_overrides_add_keys_verls_schema_lacks_and_the_temperature_replaces_its_value():
    cfg = _config()
    with pytest.raises((ConfigAttributeError, ConfigKeyError)):
        cfg.algorithm.passk = 1  # struct mode: a plain assignment is refused
    write_step_overrides(cfg, {"algorithm.passk.active_k": 4, "actor_rollout_ref.rollout.temperature": 0.7})
    assert cfg.algorithm.passk.active_k == 4 and cfg.actor_rollout_ref.rollout.temperature == 0.7
    write_rollout_temperature(cfg, 1.3)
    assert cfg.actor_rollout_ref.rollout.temperature == 1.3


def test_the_pinned_schedule_end_is_written_as_an_int_into_a_dictconfig_or_a_dict():
    cfg = _config()
    pin_schedule_end(cfg, 2)
    assert cfg.rlec.schedule.end_step == 2
    plain: dict = {}
    pin_schedule_end(plain, 3)
    assert plain == {"rlec": {"schedule": {"end_step": 3}}}


def _writes(path: Path, root: Path = RLEC.parent) -> list[str]:
    """Calls in ``path`` that open or write an OmegaConf node (``open_dict(...)``, ``OmegaConf.update(...)``, ...)."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
            owner = func.value.id if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) else ""
            if name in {"open_dict", "read_write"} or (owner == "OmegaConf" and name in WRITERS):
                out.append(f"{path.relative_to(root)}:{node.lineno}: {owner + '.' if owner else ''}{name}")
    return out


def test_no_rlec_module_but_config_writes_opens_or_writes_a_config():
    """A new write into verl's config goes into rlec.config_writes with the verl behaviour that forces it."""
    found = [hit for path in sorted(RLEC.rglob("*.py")) if path.name != "config_writes.py" or path.parent != RLEC
             for hit in _writes(path)]
    assert found == []
    assert len(_writes(RLEC / "config_writes.py")) >= 4  # the scan sees the writes where they are


def test_the_scan_finds_a_write(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text("from omegaconf import OmegaConf, open_dict\nwith open_dict(c):\n    OmegaConf.update(c, 'a', 1)\n")
    assert [hit.split(": ")[1] for hit in _writes(sample, tmp_path)] == ["open_dict", "OmegaConf.update"]
