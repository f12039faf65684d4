"""The environment prompt source's rows (rlec's data contract, RLEC targets like the static data)
and their grading through rlec.grading / the reward manager's scoring as registered data sources."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections import Counter

import pytest

from rlec.data.contract import check_row
from rlec.environments import EnvironmentSource, SourceConfig, builtin_names, get_environment
from rlec.grading import ENV, TASKS, grade, grade_batch
from rlec.prompts import build_messages
from rlec.grading.outcome import Outcome
from rlec.reward.batch import score_one_async
from rlec.reward.schedule import LinearSchedule

AT_B1 = LinearSchedule(end_step=2)  # b = 1 from step 2 on


@pytest.fixture(scope="module")
def rows():
    source = EnvironmentSource({"samples_per_prompt": 2, "seed": 3})
    for name in source.controllers:
        source.controllers[name].h = 2
    return [source.next_row() for _ in range(1500)]


def test_rows_follow_the_data_contract(rows):
    for i, row in enumerate(rows[:200]):
        check_row(row, f"row {i}")
        info = row["extra_info"]
        assert row["data_source"] == f"rlve/{info['environment']}" and TASKS[row["data_source"]] == ENV
        assert row["prompt"] == build_messages(info["task_text"], info["target_p"] or None)
        assert info["index"] == i and info["split"] == "train" and info["source"] == f"{info['environment']}/d{info['difficulty']}"
        assert info["env_seed"] % 2 == 0  # training seeds are even, test seeds odd
        assert 0 <= info["difficulty"] <= 2


def test_targets_are_drawn_like_the_static_data(rows):
    infos = [r["extra_info"] for r in rows]
    binary = [i for i in infos if i["objective"] == "binary"]
    assert all(i["target_p"] == 0.0 for i in binary)
    assert abs(len(binary) / len(infos) - 0.1) < 0.03
    targets = [round(i["target_p"] * 100) for i in infos if i["objective"] == "rlec"]
    assert min(targets) >= 1 and max(targets) <= 90 and all(abs(t - i * 100) < 1e-9 for t, i in
                                                           zip(targets, [x["target_p"] for x in infos if x["objective"] == "rlec"]))
    assert len(set(targets)) > 80  # the whole 0.01 grid is used


def test_environments_are_sampled_uniformly_by_default(rows):
    counts = Counter(r["extra_info"]["environment"] for r in rows)
    assert set(counts) == set(builtin_names())  # 'all' = the built-in environments (RLVE-Gym's: rlve_gym:all)
    assert all(abs(n / len(rows) - 1 / len(builtin_names())) < 0.04 for n in counts.values())


def test_weights_and_determinism():
    config = {"environments": ["maze", "sorting", "counting"], "weights": {"maze": 3, "sorting": 1}, "seed": 5}
    a, b = EnvironmentSource(config), EnvironmentSource(config)
    rows_a = [a.next_row() for _ in range(400)]
    assert rows_a == [b.next_row() for _ in range(400)]
    assert b.row(17) == rows_a[17]  # a row depends on its index, not on the rows before it
    counts = Counter(r["extra_info"]["environment"] for r in rows_a)
    assert "counting" not in counts and 2.2 < counts["maze"] / counts["sorting"] < 4.0
    other = EnvironmentSource({**config, "seed": 6})
    assert [other.next_row() for _ in range(5)] != rows_a[:5]


@pytest.mark.parametrize(("settings", "message"), [
    ({"environments": ["nope"]}, "unknown environment 'nope'"),
    ({"environments": ["maze"], "weights": [1, 2]}, "weights must be 1"),
    ({"weights": {"nope": 1}}, "not configured"),
    ({"window": 0}, "window"),
    ({"binary_fraction": 1.5}, "binary_fraction"),
    ({"target_max": 1.0}, "target p must be in"),
    ({"difficulty": {"maze": {"start": 1}}}, "unknown keys"),
    ({"colour": "red"}, "unknown rlve settings"),
    # issue 34: accepted before (an empty list trained on all 8, a float or string difficulty became an int)
    ({"environments": []}, r"names no environment: .*an empty list never means all"),
    ({"environments": ","}, "names no environment"),
    ({"environments": ["maze", "sorting", "maze"]}, r"name \['maze'\] more than once"),
    ({"environments": "maze,maze"}, "more than once"),
    ({"lookahead": 1_000_000}, "lookahead must be <= 4096 rows"),
    ({"environments": ["maze"], "difficulty": {"maze": {"initial": 1.5}}}, r"difficulty.maze.initial must be an int >= 0, got 1.5"),
    ({"environments": ["maze"], "difficulty": {"maze": {"maximum": "3"}}}, r"difficulty.maze.maximum must be an int >= 0, got '3'"),
    ({"target_max": float("nan")}, r"rlec.rlve.target_max=nan: must be a finite number"),  # the generic reader's rule
])
def test_bad_settings_are_refused_with_the_key(settings, message):
    with pytest.raises(ValueError, match=message):
        SourceConfig.from_mapping(settings)


def test_from_mapping_ignores_the_users_keys():
    config = SourceConfig.from_mapping({"enable": True, "rows_per_epoch": 10, "environments": "maze,sorting", "weights": None})
    assert config.environments == ("maze", "sorting") and config.weights is None and config.min_samples == 64


def test_rows_are_graded_by_rlec_grading_and_the_reward_managers_scoring(rows):
    for row in rows[:60]:
        info, gold, source = row["extra_info"], row["reward_model"]["ground_truth"], row["data_source"]
        answer = get_environment(info["environment"]).generate(info["env_seed"], info["difficulty"]).answer
        right = grade(f"\\boxed{{{answer}}}", gold, source)
        assert right.outcome is Outcome.CORRECT and right.task == ENV and right.format_ok and right.detail == "env:correct"
        assert grade("\\boxed{I don't know}", gold, source).outcome is Outcome.ABSTAIN
        assert grade("no idea", gold, source).detail == "env:no_answer"
        score = asyncio.run(score_one_async(f"\\boxed{{{answer}}}", gold, source, info, 2, AT_B1))
        assert score["correct"] == 1.0 and abs(score["score"] - (1.0 - info["target_p"])) < 1e-12
        wrong = asyncio.run(score_one_async("\\boxed{}", gold, source, info, 2, AT_B1))
        assert wrong["correct"] == 0.0 and abs(wrong["score"] + info["target_p"]) < 1e-12


def test_grade_batch_mixes_environment_and_math_items():
    problem = get_environment("arithmetic").generate(1, 0)
    results = grade_batch([f"\\boxed{{{problem.answer}}}", "\\boxed{4}", "\\boxed{0}"],
                          [problem.to_json(), "4", problem.to_json()], ["rlve/arithmetic", "math", "rlve/arithmetic"])
    assert [r.outcome for r in results] == [Outcome.CORRECT, Outcome.CORRECT, Outcome.INCORRECT]


def test_bad_environment_gold_is_a_grader_error_naming_the_problem():
    """A bad row never fails the batch (issue 12): it grades incorrect with the reason as grader_error."""
    from rlec.grading.outcome import Outcome

    maze = get_environment("maze").generate(0, 0).to_json()
    for gold, source, reason in (("RRD", "rlve/maze", "not valid JSON"), (maze, "rlve/sorting", "holds a problem of environment 'maze'")):
        result = grade("\\boxed{R}", gold, source)
        assert result.outcome is Outcome.INCORRECT and result.detail == "grader_error" and reason in result.grader_error


_GRADE_IN_A_FRESH_PROCESS = """
import asyncio
import sys
import {first}
from rlec.grading import TASKS, grade
from rlec.reward.batch import score_one_async
from rlec.reward.schedule import LinearSchedule
assert ("rlec.environments" in sys.modules) == ({first!r} == "rlec.environments"), "grading imported rlec.environments"
response, gold, source = sys.argv[1:4]
result = grade(response, gold, source)
assert result.outcome.value == "correct" and result.task == "env", result
assert asyncio.run(score_one_async("no answer", gold, source, {{"target_p": 0.5}}, 2, LinearSchedule(end_step=2)))["correct"] == 0.0
assert "rlec.environments" in sys.modules
assert sorted(k for k in TASKS if k.startswith("rlve/")) == {builtins!r}, TASKS
"""


@pytest.mark.parametrize("first", ["rlec.environments", "rlec.grading", "rlec.reward.score", "rlec.reward.batch", "rlec.eval.metrics"])
def test_an_environment_row_grades_whichever_package_a_process_imported(first, repo_root):
    """Grading never imports rlec.environments itself; a process that grades an rlve/ row gets its
    verifier on the row's first use: verl's reward workers (rlec.reward.score, and rlec.reward.batch
    through the reward manager), the batch scoring (rlec.reward.batch) and the evaluation (rlec.eval.metrics)."""
    problem = get_environment("sorting").generate(4, 1)
    code = _GRADE_IN_A_FRESH_PROCESS.format(first=first, builtins=sorted("rlve/" + n for n in builtin_names()))
    subprocess.run([sys.executable, "-c", code, f"\\boxed{{{problem.answer}}}", problem.to_json(), "rlve/sorting"],
                   check=True, cwd=repo_root)


def test_a_lookahead_at_the_cap_and_a_null_maximum_are_accepted():
    from rlec.environments.source import MAX_LOOKAHEAD

    config = SourceConfig.from_mapping({"environments": ["maze"], "lookahead": MAX_LOOKAHEAD,
                                        "difficulty": {"maze": {"initial": 1, "maximum": None}}})
    assert config.lookahead == MAX_LOOKAHEAD


def test_check_refuses_a_negative_difficulty_in_one_line_and_fails_when_nothing_was_checked(capsys):
    from rlec.environments.__main__ import main

    assert main(["check", "--environments", "sorting", "--difficulties=-1", "--no-determinism"]) == 2
    out = capsys.readouterr().out
    assert out.startswith("error: difficulty list item '-1'") and "Traceback" not in out
    assert main(["check", "--environments", "sorting", "--difficulties=1000", "--no-determinism"]) == 1
    out = capsys.readouterr().out
    assert "FAIL: nothing checked: d1000 > cap" in out and "0 problems, 1 failed" in out
    assert main(["check", "--environments", "sorting", "--difficulties=0", "--no-determinism"]) == 0


def test_one_default_per_value_the_overlay_repeats_the_dataclass():
    # issue 35: rlve.yaml, the settings dataclass and the controller's keyword defaults held each default
    # separately. The dataclass (RLVESettings: SourceConfig + enable, rows_per_epoch) is the reader's default; the
    # overlay repeats it for its readers, so the two are pinned equal here. The overlay's interpolations follow
    # verl's keys at compose time (rollout.n, the prompt length, the batch size): no default of their own.
    import dataclasses
    import inspect

    from omegaconf import OmegaConf

    from rlec.algorithms.rlve import RLVESettings
    from rlec.config import CONFIG_DIR
    from rlec.environments.controller import DifficultyController

    overlay = OmegaConf.to_container(OmegaConf.load(CONFIG_DIR / "algorithm" / "rlve.yaml").rlec.rlve, resolve=False)
    fields = {f.name: f for f in dataclasses.fields(RLVESettings)}
    assert set(overlay) == set(fields)
    interpolated = {k for k, v in overlay.items() if isinstance(v, str) and v.startswith("${")}
    assert interpolated == {"samples_per_prompt", "max_prompt_tokens", "lookahead"}
    for key in sorted(set(overlay) - interpolated - {"enable"}):  # enable: the overlay switches RLVE on
        f = fields[key]
        default = f.default_factory() if f.default is dataclasses.MISSING else f.default
        given = tuple(overlay[key]) if isinstance(overlay[key], list) else overlay[key]
        assert given == default, (key, given, default)
    assert overlay["enable"] is True and fields["enable"].default is False
    keyword = inspect.signature(DifficultyController).parameters
    assert keyword["window"].default == fields["window"].default and keyword["threshold"].default == fields["threshold"].default
    assert keyword["initial"].default == fields["initial_difficulty"].default
