"""rlec.demo.verl_run: what a launch writes, read back (verl's file logger per launch, verl's rollout dump)."""

from __future__ import annotations

import json
from pathlib import Path

from rlec.demo import verl_run


def test_metrics_of_several_launches_merge_by_step_the_later_wins(tmp_path: Path) -> None:
    (tmp_path / "metrics").mkdir()
    (tmp_path / "metrics" / "20261202T010000.jsonl").write_text(
        json.dumps({"step": 1, "data": {"actor/entropy": 0.5}}) + "\n" + json.dumps({"step": 2, "data": {"actor/entropy": 0.4}}) + "\n{cut")
    (tmp_path / "metrics" / "20261202T020000.jsonl").write_text(json.dumps({"step": 2, "data": {"actor/entropy": 0.3, "x": "s"}}) + "\n")
    assert verl_run.read_metrics(tmp_path) == [{"actor/entropy": 0.5, "step": 1}, {"actor/entropy": 0.3, "step": 2}]


def test_rollout_groups_are_read_by_prompt_uid(tmp_path: Path) -> None:
    (tmp_path / "rollouts").mkdir()
    rows = [{"uid": "abc_0_0", "score": 1.0}, {"uid": "abc_1_0", "score": 0.0}, {"uid": "d_e_0_0", "score": 0.0}]
    (tmp_path / "rollouts" / "1.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert verl_run.read_groups(tmp_path, 2) == [[[1.0, 0.0], [0.0]], []]
