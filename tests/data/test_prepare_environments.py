"""``python -m rlec.data.prepare --environments``: the fixed environment test set, in the static
data's schema, read by the evaluator and reported by rlec.eval.metrics per environment and per
difficulty."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

from rlec.environments import testset as env_data
from rlec.data.prepare import main
from rlec.data.writer import SCHEMA
from rlec.environments import Problem, get_environment
from rlec.eval.dataset import load_eval_items
from rlec.eval.metrics import analyze, grade_records, source_groups
from rlec.eval.records import target_label


@pytest.fixture(scope="module")
def env_test_set(qwen_tokenizer, tmp_path_factory):
    out = tmp_path_factory.mktemp("env") / "environments"
    cfg = env_data.EnvTestConfig(environments=("maze", "sorting", "knights_knaves"), per_difficulty=3)
    return out, env_data.prepare_environments(out, cfg, tokenizer=qwen_tokenizer, progress=False)


def test_one_row_per_environment_difficulty_and_seed(env_test_set):
    out, summary = env_test_set
    table = pq.read_table(out / "test.parquet")
    assert table.schema == SCHEMA  # the static evaluation set's schema: both can be read together
    rows = table.to_pylist()
    expected = {"maze": [1, 6, 7, 8], "sorting": list(range(8)), "knights_knaves": list(range(8))}
    assert summary["questions"] == {n: {str(d): 3 for d in ds} for n, ds in expected.items()}
    assert len(rows) == summary["rows"] == 3 * (4 + 8 + 8)
    for i, row in enumerate(rows):
        problem = Problem.from_json(row["reward_model"]["ground_truth"])
        info = row["extra_info"]
        assert problem.seed % 2 == 1  # odd: never a training problem
        assert info["source"] == f"{problem.environment}/d{problem.difficulty}" and info["index"] == i
        assert info["objective"] == "binary" and info["split"] == "test" and info["task_text"] == problem.prompt
        assert get_environment(problem.environment).generate(problem.seed, problem.difficulty) == problem
    assert summary["dropped_too_long"] == {}


def test_rerun_replaces_the_folder_and_foreign_files_are_protected(qwen_tokenizer, tmp_path):
    cfg = env_data.EnvTestConfig(environments=("maze",), difficulties=(0,), per_difficulty=1)
    (tmp_path / "mine.txt").write_text("x")
    with pytest.raises(FileExistsError):
        env_data.prepare_environments(tmp_path, cfg, tokenizer=qwen_tokenizer, progress=False)
    out = tmp_path / "fresh"
    env_data.prepare_environments(out, cfg, tokenizer=qwen_tokenizer, progress=False)
    bigger = env_data.EnvTestConfig(environments=("maze",), difficulties=(0, 1), per_difficulty=2)
    assert env_data.prepare_environments(out, bigger, tokenizer=qwen_tokenizer, progress=False)["rows"] == 4
    assert pq.read_table(out / "test.parquet").num_rows == 4 and sorted(p.name for p in out.iterdir()) == ["summary.json", "test.parquet"]


def test_difficulty_lists():
    assert env_data.parse_difficulties("auto") is None
    assert env_data.parse_difficulties("0-3,8, 2") == (0, 1, 2, 3, 8)
    for bad in ("a", "3-1", "-2", ""):
        with pytest.raises(ValueError):
            env_data.parse_difficulties(bad)
    assert env_data.EnvTestConfig(environments=("maze",), difficulties=(17, 18, 19)).difficulties_of("maze") == [17, 18]


def test_command_line(tmp_path, capsys):
    out = tmp_path / "envs"
    code = main(["--environments", "counting,arithmetic", "--env-difficulties", "0-1", "--env-per-difficulty", "2",
                 "--env-output-dir", str(out), "--no-progress"])
    assert code == 0 and (out / "test.parquet").is_file() and (out / "summary.json").is_file()
    printed = capsys.readouterr().out
    assert "arithmetic" in printed and "counting" in printed and "wrote" in printed
    with pytest.raises(SystemExit) as exc:
        main(["--environments", "nope", "--env-output-dir", str(tmp_path / "x")])
    assert exc.value.code == 2


def test_evaluator_reads_it_and_metrics_group_by_environment_and_difficulty(env_test_set):
    out, _ = env_test_set
    items = load_eval_items(out / "test.parquet")
    assert len(items) == 60 and {it.data_source for it in items} == {"rlve/maze", "rlve/sorting", "rlve/knights_knaves"}
    targets = [None, 0.5]
    records = []
    for it in items:  # a scripted model: right below difficulty 4, abstains at p = 0.5 from there on
        problem = Problem.from_json(it.ground_truth)
        for p in targets:
            easy = problem.difficulty < 4
            response = f"\\boxed{{{problem.answer}}}" if easy else ("\\boxed{I don't know}" if p else "\\boxed{0}")
            records.append({"question_id": it.question_id, "source": it.source, "data_source": it.data_source,
                            "target": target_label(p), "target_p": p, "sample_index": 0,
                            "ground_truth": it.ground_truth, "response": response})
    graded = grade_records(records, progress=False)
    result = analyze(records, graded, targets, n_boot=0)
    groups = result["groups"]
    assert list(groups)[:6] == ["all", "knights_knaves", "knights_knaves/d0", "knights_knaves/d1", "knights_knaves/d2",
                                "knights_knaves/d3"]
    assert {"maze", "maze/d1", "maze/d8", "sorting", "sorting/d7"} <= set(groups)
    binary = {name: g["per_target"][0] for name, g in groups.items()}
    at_half = {name: g["per_target"][1] for name, g in groups.items()}
    assert binary["sorting/d3"]["accuracy"] == 1.0 and binary["sorting/d4"]["accuracy"] == 0.0
    assert binary["sorting"]["accuracy"] == 0.5 and groups["sorting"]["n_questions"] == 24
    assert at_half["maze/d1"]["coverage"] == 1.0 and at_half["maze/d6"]["coverage"] == 0.0
    assert at_half["maze"]["coverage"] == 0.25  # one of its four difficulties is below 4


def test_source_groups_natural_order_and_static_sources_unchanged():
    groups = source_groups(["maze/d10", "maze/d2", "math", "hotpotqa"])
    assert list(groups) == ["hotpotqa", "math", "maze", "maze/d2", "maze/d10"]
    assert groups["maze"] == ["maze/d2", "maze/d10"] and groups["math"] == ["math"]
