"""rlec.demo.verl_run: what a launch writes, read back (the run's metrics.jsonl and hf_final, verl's rollout dump)."""

from __future__ import annotations

import json
from pathlib import Path

from rlec.demo import verl_run


def test_metrics_are_the_runs_metrics_jsonl_numbers_only_a_torn_line_skipped(tmp_path: Path) -> None:
    assert verl_run.read_metrics(tmp_path) == []  # before the first step
    (tmp_path / "metrics.jsonl").write_text(json.dumps({"step": 1, "actor/entropy": 0.5}) + "\n"
                                            + json.dumps({"step": 2, "actor/entropy": 0.3, "x": "s"}) + "\n{cut")
    assert verl_run.read_metrics(tmp_path) == [{"actor/entropy": 0.5, "step": 1}, {"actor/entropy": 0.3, "step": 2}]


def test_the_final_model_is_hf_final_of_the_asked_step_only(tmp_path: Path) -> None:
    final = tmp_path / "hf_final"
    assert verl_run.hf_model(tmp_path, 3) is None
    final.mkdir()
    (final / "config.json").write_text("{}")
    (final / "rlec_step.txt").write_text("2\n")
    assert verl_run.hf_model(tmp_path, 3) is None  # an earlier run's weights are not this one's
    assert verl_run.hf_model(tmp_path, 2) == final


def test_rollout_groups_are_read_by_prompt_uid(tmp_path: Path) -> None:
    (tmp_path / "rollouts").mkdir()
    rows = [{"uid": "abc_0_0", "score": 1.0, "input": "What is 1 + 2?"}, {"uid": "abc_1_0", "score": 0.0, "input": "What is 1 + 2?"},
            {"uid": "d_e_0_0", "score": 0.0, "input": "What is 3 + 4?"}]
    (tmp_path / "rollouts" / "1.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert verl_run.read_groups(tmp_path, 2) == [[[1.0, 0.0], [0.0]], []]
    # each group's prompt text (verl's dump field "input"), in the groups' order: what follows a prompt across steps
    assert verl_run.read_group_prompts(tmp_path, 2) == [["What is 1 + 2?", "What is 3 + 4?"], []]
