"""tools/resolved_configs.py: DRY_RUN's resolved config of every committed layout x precision x algorithm equals the
committed snapshot (tests/tools/resolved_configs.txt, issue 59 item 6), and the comparison names what changed."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

TOOL = Path(__file__).resolve().parents[2] / "tools" / "resolved_configs.py"


@pytest.fixture(scope="module")
def rc():
    """The tool's module, loaded from its file (tools/ is not an installed package)."""
    spec = importlib.util.spec_from_file_location("resolved_configs_tool", TOOL)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def snapshot(rc):
    return rc.parse(rc.SNAPSHOT.read_text())


def test_snapshot_lists_every_committed_combination_base_first(rc, snapshot):
    # a layout, precision or algorithm file added or removed without `--update` fails here, before any composing
    assert list(snapshot) == [c.name for c in rc.combinations()]
    assert next(iter(snapshot)) == rc.BASE.name and isinstance(snapshot[rc.BASE.name], dict)
    assert all(isinstance(r, dict) or r.startswith(("refused (exit 1): ", "refused (exit 2): ")) for r in snapshot.values())


@pytest.mark.slow  # 48 Hydra compositions and their checks: ~2 CPU-s each
def test_every_combination_resolves_as_the_snapshot_records(rc, snapshot):
    differences = rc.compare(snapshot, rc.current())
    assert not differences, rc.failure_message(differences)


def test_a_changed_key_is_reported_alone_with_both_values(rc):
    composed = rc.current([rc.BASE])
    base = composed[rc.BASE.name]
    assert base["actor_rollout_ref.actor.clip_ratio_high"] == 0.28 and base["actor_rollout_ref.model.path"].startswith("<repo>/")
    other = rc.Combination("tiny_1gpu", "fp8").name
    recorded = rc.parse(rc.render({**composed, other: "refused (exit 1): ERROR [k] a rule"}))  # through the file format
    changed = {rc.BASE.name: {**base, "actor_rollout_ref.actor.clip_ratio_high": 0.3},
               other: "refused (exit 1): ERROR [k] a rule"}
    differences = rc.compare(recorded, changed)
    assert differences == {rc.BASE.name: ["actor_rollout_ref.actor.clip_ratio_high: 0.28 -> 0.3"]}
    message = rc.failure_message(differences)
    assert "clip_ratio_high: 0.28 -> 0.3" in message and rc.UPDATE_COMMAND in message and "issue 59" in message
    # a combination that now composes, or is refused by another rule, is named too
    assert rc.compare(recorded, {**changed, rc.BASE.name: base, other: "refused (exit 2): ERROR [j] b"}) == {
        other: ["refused (exit 1): ERROR [k] a rule -> refused (exit 2): ERROR [j] b"]}


def test_parse_refuses_a_difference_whose_reference_value_is_not_the_reference(rc):
    text = ("[layout=a precision=b algorithm=none] base\nx.y: 1\n\n"
            "[layout=a precision=b algorithm=e3] from [layout=a precision=b algorithm=none]\n~ x.y: 2 -> 3\n")
    with pytest.raises(ValueError, match="x.y's reference value is 1"):
        rc.parse(text)
    parsed = rc.parse(text.replace("~ x.y: 2 -> 3", '~ x.y: 1 -> "a -> b"\n+ z: [1, 2]'))
    assert parsed["layout=a precision=b algorithm=e3"] == {"x.y": "a -> b", "z": [1, 2]}


def test_help_names_the_update_flag(rc, capsys):
    with pytest.raises(SystemExit) as exit_:
        rc.main(["--help"])
    assert exit_.value.code == 0 and "--update" in capsys.readouterr().out
