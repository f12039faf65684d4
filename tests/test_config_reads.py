"""Issue 59 item 1: raw reads of the config tree (``rlec.config_base.select``) live in the readers, and each check
reads the config's keys once. The target is 0 reads outside the readers; the remainder is pinned so it cannot grow
(docs/hyperparameters.md, "Reading verl's keys", says where they are and why)."""

from __future__ import annotations

import ast
import collections
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# the readers: select itself, rlec's settings reader (rlec.* into dataclasses), the process's typed configuration
# (rlec.run_config.RunConfig: verl's raw keys in VerlKeys, each section parsed once, the algorithms' switches), the
# rules' reader of the layout keys, verl's dataclasses for its sections (omega_conf_to_dataclass), and the one module
# that writes into the config
READERS = {"rlec/config_base.py", "rlec/settings.py", "rlec/run_config.py", "rlec/rules/verl_keys.py",
           "rlec/verl_plugin/typed_config.py", "rlec/config_writes.py"}
# select() calls outside the readers (issue 59: 152 calls in rlec before, 75 after, 46 of them outside the readers;
# 24 once the algorithms and verl's trainer read a RunConfig; 0 once the reward manager, the schedule, the report,
# DRY_RUN's checks, the resume rules and the CPU agent loop read one too, and the estimator reads the live section
# verl hands it through rlec.verl_plugin.typed_config.live_algorithm_value). Never raise it.
PINNED_OUTSIDE_READERS = 0


def select_calls(source: str) -> int:
    """The calls of a bare ``select(...)`` in a module's source (``rlec.config_base.select``, however imported)."""
    return sum(isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "select"
               for node in ast.walk(ast.parse(source)))


def reads() -> collections.Counter:
    return collections.Counter({str(p.relative_to(REPO)): n for p in sorted((REPO / "rlec").rglob("*.py"))
                                if (n := select_calls(p.read_text()))})


def test_raw_config_reads_outside_the_readers_do_not_grow():
    found = reads()
    outside = {path: n for path, n in found.items() if path not in READERS}
    assert sum(outside.values()) <= PINNED_OUTSIDE_READERS, sorted(outside.items(), key=lambda kv: -kv[1])


def test_the_rules_read_no_raw_key_but_through_their_reader():
    found = reads()
    for module in ("rlec/rules/checks.py", "rlec/rules/moe.py", "rlec/rules/resources.py", "rlec/cluster/paths.py"):
        assert found.get(module, 0) == 0, module


def test_the_count_sees_a_call_however_it_is_spelt():
    assert select_calls("from rlec.config import select\nx = select(cfg, 'a.b', 1)\ny = [select(c, k) for k in ks]\n") == 2
    assert select_calls("tq.kv_batch_get(select_fields=['a'])\ndf.select('a')\n") == 0  # neither is a config read


def test_each_check_reads_the_configs_verl_keys_once(compose_rlec, monkeypatch):
    """check_layout, the early rule set and the path checks each read the keys once and pass them to every rule; a
    RunConfig handed to them (as DRY_RUN's run_checks hands its one) is not read again."""
    from rlec.cluster.config_check import load_model_config
    from rlec.cluster.paths import path_findings
    from rlec.model_shape import ModelShape
    from rlec.rules.checks import check_layout
    from rlec.rules.settings_rules import settings_rules
    from rlec.run_config import RunConfig, VerlKeys

    reads = []
    original = VerlKeys.read.__func__

    def counted(cls, cfg):
        reads.append(cfg)
        return original(cls, cfg)

    monkeypatch.setattr(VerlKeys, "read", classmethod(counted))
    cfg = compose_rlec("layout=qwen3_30b_a3b_1x8", "precision=bf16", "router_replay=r3")
    run = RunConfig(cfg)
    hf, source, _ = load_model_config(run)
    findings, est = check_layout(run, ModelShape.from_hf_config(hf, source), 141, megatron_fields=None)
    settings_rules(run)
    path_findings(run)
    assert len(reads) == 1 and est is not None  # the RunConfig's one read
    assert not [f for f in findings if f.level == "error"]  # the committed layout passes, as before
    check_layout(RunConfig(cfg), ModelShape.from_hf_config(hf, source), 141, megatron_fields=None)
    assert len(reads) == 2
    settings_rules(RunConfig(cfg))
    assert len(reads) == 3
    path_findings(RunConfig(cfg))
    assert len(reads) == 4


def test_rlec_functions_take_a_run_config_never_a_tree_they_convert():
    """Issue 59: the process's config is converted once where the process gets it and handed on; no function takes
    "a RunConfig or a tree" and converts the tree itself (before: 19 such conversions, ``RunConfig.of``, behind
    functions typed ``RunConfig | Any``)."""
    from rlec.run_config import RunConfig

    typed_either = [str(p.relative_to(REPO)) for p in sorted((REPO / "rlec").rglob("*.py")) if "RunConfig | Any" in p.read_text()]
    assert typed_either == [] and not hasattr(RunConfig, "of")


def test_verl_keys_reads_each_field_from_its_key_and_a_missing_one_as_its_default():
    from rlec.run_config import VerlKeys

    keys = VerlKeys.read({"actor_rollout_ref": {"rollout": {"n": 8, "name": None}}, "data": {"train_batch_size": 4}})
    assert (keys.rollout_n, keys.train_batch_size) == (8, 4)
    assert keys.rollout_name == "vllm"  # null reads as the default, as rlec.config_base.select does
    assert keys.ppo_mini_batch_size == 1 and keys.ppo_micro_batch_size_per_gpu is None
    assert VerlKeys.key_of("rollout_n") == "actor_rollout_ref.rollout.n"
