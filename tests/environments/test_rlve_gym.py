"""RLVE-Gym's environments behind rlec's interface: names, caps, refusals, isolation, retries,
grading, the source, the evaluation set and the ``python -m rlec.environments`` commands.

Tests that generate use the process-wide pool (started once per session: its workers import Gym)
and one more small pool with a short limit (timeouts, retries, the determinism check)."""

from __future__ import annotations

import random
import subprocess
import sys

import numpy as np
import pytest
import torch

from rlec.environments import EnvironmentSource, Problem, SourceConfig, get_environment, parse_environment_names
from rlec.environments.__main__ import main
from rlec.environments.check import check_environments, cost_markdown, perturb, perturbations
from rlec.environments.gym_pool import GenerationFailed, GymPool, shared_gym_pool
from rlec.environments.rlve_gym import DEFAULT_PROMPT_TOKENS, cap_for, gym_identifiers, levels, refusal
from rlec.grading import grade
from rlec.run_config import RunConfig

MAZE = "rlve_gym:Maze"


@pytest.fixture(scope="session")
def pool():
    return shared_gym_pool()


@pytest.fixture(scope="session")
def short_pool():
    """A second pool: 1 worker, a 1 s limit, 2 attempts, no same-seed rerun."""
    p = GymPool(max_workers=1, timeout_s=1.0, attempts=2, slow_factor=1.0)  # the next-seed retry at once
    yield p
    p.close()


def test_names_come_from_the_installed_package_without_importing_it():
    code = ("import sys; from rlec.environments.rlve_gym import gym_identifiers; "
            "import rlec.environments as E; n = E.parse_environment_names('rlve_gym:all'); "
            "print(len(gym_identifiers()), len(n), 'Gym.environments' in sys.modules, 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    usable = sum(refusal(i) is None for i in gym_identifiers())
    assert out == ["400", str(usable), "False", "False"]
    assert 390 <= usable < 400  # PolyaModel's own reference answer fails its verifier


def test_selection_syntax_all_glob_and_mixed_lists():
    assert parse_environment_names("sorting,rlve_gym:Maze,sorting") == ["sorting", MAZE]
    trees = parse_environment_names("rlve_gym:Tree*")
    assert trees and all(n.startswith("rlve_gym:Tree") for n in trees) and trees == sorted(trees)
    assert "rlve_gym:Sudoku" in parse_environment_names(["rlve_gym:all"])
    assert parse_environment_names("all") == sorted(n for n in parse_environment_names("all") if ":" not in n)
    for spec, match in (("rlve_gym:NoSuchEnv", "rlve_gym:NoSuchEnv is refused: not an RLVE-Gym environment"),
                        ("rlve_gym:PolyaModel", "rlve_gym:PolyaModel is refused: its reference answer is rejected"),
                        ("rlve_gym:Zz*", "no environment matches 'rlve_gym:Zz\\*'"),
                        ("nope:all", "unknown environment namespace 'nope'")):
        with pytest.raises(ValueError, match=match):
            parse_environment_names(spec)


def test_caps_follow_the_prompt_budget_and_bound_the_controller():
    tokens = levels()["environments"]["Sudoku"]["tokens"]
    cap = cap_for("Sudoku", DEFAULT_PROMPT_TOKENS)
    assert all(t <= DEFAULT_PROMPT_TOKENS for t in tokens[:cap + 1]) and tokens[cap + 1] > DEFAULT_PROMPT_TOKENS
    assert cap_for("Sudoku", 256) == -1 and cap_for("Sudoku", 100_000) >= cap
    env, top = get_environment("rlve_gym:Sudoku"), len(tokens) - 1
    assert env.cap(None) == cap and env.cap(1024) == cap_for("Sudoku", 1024) <= cap < top == env.max_difficulty
    with pytest.raises(ValueError, match=f"rlve_gym:Sudoku: difficulty {top + 1} is above its maximum {top}"):
        env.generate(0, top + 1)
    assert SourceConfig(environments=("rlve_gym:Sudoku",), max_prompt_tokens=8192).controller("rlve_gym:Sudoku").maximum == top
    config = SourceConfig(environments=("rlve_gym:Sudoku",), max_prompt_tokens=1024)
    assert config.controller("rlve_gym:Sudoku").maximum == cap_for("Sudoku", 1024)
    with pytest.raises(ValueError, match="'rlve_gym:Sudoku' is refused: its easiest prompts exceed max_prompt_tokens 256"):
        SourceConfig(environments=("rlve_gym:Sudoku",), max_prompt_tokens=256).validated()  # construction checks nothing


def test_generation_is_deterministic_isolated_and_graded_by_the_environment(pool):
    env = get_environment(MAZE)
    states = random.getstate(), np.random.get_state()[1].copy(), torch.get_rng_state().clone()
    a, b = env.generate(5, 2), env.generate(5, 2)
    assert a == b and a != env.generate(6, 2)
    assert random.getstate() == states[0] and (np.random.get_state()[1] == states[1]).all()
    assert torch.equal(torch.get_rng_state(), states[2])  # RLVE-Gym re-seeds all three, in its worker only
    assert Problem.from_json(a.to_json()) == a and a.prompt.count("\n") > 5 and set(a.answer) <= set("LRUD")
    # rlec's extraction, the environment's verifier, its threshold; the shaped score beside the outcome
    right = grade(f"I walk it.\n\\boxed{{{a.answer}}}", a.to_json(), "rlve/" + MAZE)
    wrong = grade(f"\\boxed{{{a.answer}L}}", a.to_json(), "rlve/" + MAZE)  # one step more: not the shortest path
    idk = grade("\\boxed{I don't know}", a.to_json(), "rlve/" + MAZE)
    assert (right.outcome.value, right.env_score, right.detail) == ("correct", 1.0, "env:correct")
    assert wrong.outcome.value == "incorrect" and wrong.env_score is not None and wrong.env_score < 1.0
    assert (idk.outcome.value, idk.env_score) == ("abstain", None)
    assert pool.metrics()["rlve_gym/Maze/generated"] >= 3


def test_timeouts_retry_on_the_next_seed_then_skip_with_counts(short_pool):
    slow = short_pool.generate_many([("KnightsAndKnaves", 1, 11)], timeout_s=0.2)[0]  # 1.4-4.3 s per problem at d = 11
    assert isinstance(slow, GenerationFailed) and len(slow.reasons) == 2, slow
    assert all(r.startswith("timeout after 0.2s") for r in slow.reasons)
    m = short_pool.metrics()
    assert (m["rlve_gym/KnightsAndKnaves/gen_timeouts"], m["rlve_gym/KnightsAndKnaves/retries"],
            m["rlve_gym/KnightsAndKnaves/skipped"]) == (2.0, 1.0, 1.0)
    fast = short_pool.generate("Maze", 1, 0)  # the pool replaced its killed worker
    assert fast["attempt"] == 0 and fast["answer"]


def test_check_passes_on_a_fixed_sample_and_fails_on_a_bad_verifier(short_pool, capsys, monkeypatch):
    rows = check_environments(["sorting", MAZE, "rlve_gym:Sudoku", "rlve_gym:GraphIsomorphism"], "0,1", (1, 2),
                              second=short_pool, progress=False)
    assert [r.failures for r in rows] == [[]] * 4 and all(r.same_ok == r.problems == 4 for r in rows)
    table = cost_markdown(rows, "cmd")
    assert f"| {MAZE} | 1 | {levels()['environments']['Maze']['tokens'][0]} |" in table and "| sorting | 1 | - | - |" in table
    assert main(["check", "--environments", "rlve_gym:PolyaModel"]) == 2
    assert "refused: its reference answer is rejected" in capsys.readouterr().out
    monkeypatch.setattr("rlec.environments.check.perturbations", lambda answer: [answer])  # "wrong" answers that are right
    assert main(["check", "--environments", MAZE, "--no-determinism"]) == 1
    assert "perturbed answer accepted" in capsys.readouterr().out


def test_perturbations_change_every_kind_of_answer():
    assert perturbations("41") == ["42", "40", "413"] and perturbations("0") == ["1", "-1", "3"]
    assert perturbations("1 2 3") == ["1 2 4", "2 2 3", "1 2"]
    assert perturbations("DDRR") == ["DDR"] and perturbations("x") == ["x X"]
    assert perturb("1.5") == "1.6"


def test_list_names_source_cap_and_cost(capsys):
    assert main(["list", "--environments", "maze,rlve_gym:Maze,rlve_gym:PolyaModel"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].split()[:3] == ["maze", "builtin", "18"]
    assert lines[2].split()[:3] == [MAZE, "rlve_gym", str(cap_for("Maze", 2048))]
    assert "refused: its reference answer is rejected" in lines[3]


def test_source_rows_and_pool_metrics(pool):
    source = EnvironmentSource({"environments": [MAZE, "sorting"], "max_prompt_tokens": 2048, "seed": 3})
    rows = [source.next_row() for _ in range(6)]
    again = EnvironmentSource({"environments": [MAZE, "sorting"], "max_prompt_tokens": 2048, "seed": 3})
    assert [r["reward_model"]["ground_truth"] for r in rows] == [again.row(i)["reward_model"]["ground_truth"] for i in range(6)]
    gym_rows = [r for r in rows if r["data_source"] == "rlve/" + MAZE]
    assert gym_rows and gym_rows[0]["extra_info"]["source"].startswith(MAZE + "/d")
    metrics = source.update([{"environment": MAZE, "difficulty": 0, "correct": 1}])
    assert metrics["rlve/gym/Maze/generated"] >= len(gym_rows) and "rlve/gym/Maze/gen_timeouts" in metrics


def test_the_cpu_runs_config_evaluation_set_and_metric_groups_take_rlve_gym_names(pool):
    """``ENVIRONMENTS=rlve_gym:Maze,sorting make run``: the launcher's overrides (``algorithm=rlve``,
    ``rlec.rlve.environments=[...]``) on the CPU layout; an environment RLVE's check refuses is named."""
    from rlec.rules.settings_rules import early_errors
    from rlec.config import CPU_LAYOUT, CPU_PRECISION, compose
    from rlec.environments.testset import EnvTestConfig, build_rows
    from rlec.eval.metrics import source_groups

    def cpu_run(environments: str):
        overrides = [f"layout={CPU_LAYOUT}", f"precision={CPU_PRECISION}", "algorithm=rlve", f"rlec.rlve.environments=[{environments}]"]
        cfg = compose(overrides)
        return cfg, early_errors(RunConfig(cfg), overrides)

    cfg, errors = cpu_run("rlve_gym:Maze,sorting")
    assert not errors and list(cfg.rlec.rlve.environments) == [MAZE, "sorting"]
    assert cfg.rlec.rlve.max_prompt_tokens == cfg.data.max_prompt_length
    _, errors = cpu_run("rlve_gym:PolyaModel")
    assert len(errors) == 1 and "rlve_gym:PolyaModel is refused: its reference answer" in errors[0].message
    rows = build_rows(EnvTestConfig(environments=(MAZE,), difficulties=(0, 3), per_difficulty=2))
    assert [r["extra_info"]["source"] for r in rows] == [f"{MAZE}/d0"] * 2 + [f"{MAZE}/d3"] * 2
    assert all(r["extra_info"]["env_seed"] % 2 == 1 and r["data_source"] == "rlve/" + MAZE for r in rows)
    assert source_groups(sorted({r["extra_info"]["source"] for r in rows}))[MAZE] == [f"{MAZE}/d0", f"{MAZE}/d3"]


def test_evaluation_set_records_and_metrics_by_rlve_gym_environment(pool, tmp_path, capsys):
    """``rlec.data.prepare --environments`` -> evaluation records -> ``rlec.eval.metrics``: a scripted model
    right at d = 0 and wrong (binary) or abstaining (p = 0.5) at d = 1, graded by RLVE-Gym's verifiers."""
    import json

    from rlec.data.prepare import main as prepare
    from rlec.eval.dataset import load_eval_items
    from rlec.eval.metrics import main as metrics
    from rlec.eval.records import target_label

    names = ["rlve_gym:Division", "rlve_gym:Multiplication"]
    data = tmp_path / "environments"
    assert prepare(["--environments", ",".join(names), "--env-difficulties", "0-1", "--env-per-difficulty", "2",
                    "--env-output-dir", str(data), "--no-progress"]) == 0
    items = load_eval_items(data / "test.parquet")
    assert sorted({it.source for it in items}) == [f"{n}/d{d}" for n in names for d in (0, 1)] and len(items) == 8
    records = []
    for it in items:
        problem = Problem.from_json(it.ground_truth)
        for p in (None, 0.5):
            response = (f"\\boxed{{{problem.answer}}}" if problem.difficulty == 0
                        else "\\boxed{I don't know}" if p else f"\\boxed{{{problem.answer}1}}")
            records.append({"question_id": it.question_id, "source": it.source, "data_source": it.data_source,
                            "target": target_label(p), "target_p": p, "sample_index": 0,
                            "ground_truth": it.ground_truth, "response": response})
    path = tmp_path / "env.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    out = tmp_path / "metrics"
    assert metrics([str(path), "--out-dir", str(out), "--targets", "binary,0.5", "--bootstrap", "0", "--no-plots",
                    "--quiet"]) == 0, capsys.readouterr().err
    run = json.loads((out / "metrics.json").read_text())["runs"]["env"]
    groups = run["groups"]
    assert [g for g in groups if g.startswith("rlve_gym:")] == [f"{n}{s}" for n in names for s in ("", "/d0", "/d1")]
    for name in names:
        binary, at_half = (groups[name]["per_target"][k] for k in (0, 1))
        assert groups[name]["n_questions"] == 4 and binary["accuracy"] == 0.5 and at_half["coverage"] == 0.5
        assert groups[f"{name}/d0"]["per_target"][0]["accuracy"] == 1.0
        assert groups[f"{name}/d1"]["per_target"][0]["accuracy"] == 0.0
    graded = [json.loads(line) for line in (out / "graded-env.jsonl").read_text().splitlines()]
    assert {g["grade"]["detail"] for g in graded} == {"env:correct", "env:wrong", "env:abstain"}
    assert all(g["grade"]["env_score"] is not None for g in graded if g["grade"]["detail"] != "env:abstain")


class _Scores:
    """A stand-in pool whose verifier scores every answer (shaped, threshold) as given."""

    def __init__(self, shaped: float, threshold: float = 1.0) -> None:
        self.result = (shaped, threshold, 0.0)

    def score_many(self, jobs):
        return [self.result for _ in jobs]


def test_integer_answers_beyond_2_53_are_compared_exactly_not_in_floating_point():
    from rlec.environments.base import Problem
    from rlec.environments.rlve_gym import GymEnvironment, exact_integer_mismatch

    gold = str(2**60 + 1)
    problem = Problem("rlve_gym:AdditionTable", 1, 0, "p", gold, {"index": 0, "gym_seed": 1, "threshold": 1.0})
    env = GymEnvironment("AdditionTable", pool=_Scores(1.0))  # float(2**60) == float(2**60 + 1): RLVE-Gym says 1.0
    assert float(gold) == float(2**60) and env.score(str(2**60), problem) == (False, 1.0, "wrong_integer")
    assert env.score(gold, problem) == (True, 1.0, "correct") and env.score("+" + gold, problem)[0]
    off = env.verify(f"\\boxed{{{2**60 + 2}}}", problem)
    assert not off.correct and off.score == 0.999 and off.reason == "wrong_integer"
    assert not exact_integer_mismatch("12", "13")  # exact in a float: the verifier's own verdict stands
    assert not exact_integer_mismatch("1/2", gold) and not exact_integer_mismatch("9" * 5000, gold)
    assert exact_integer_mismatch(str(-(2**60)), str(-(2**60) - 1))
