"""The demo's addition data: the data contract, held-out evaluation questions, the targets, the CLI."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from rlec.demo import data as demo_data
from rlec.demo.warm_start import is_held_out


def load_rows(path: Path) -> list[dict]:
    """The rows of a prepared parquet, after the data-contract check every launch runs (rlec.cluster.paths)."""
    import pyarrow.parquet as pq

    from rlec.data.contract import check_parquet

    check_parquet(path)
    return pq.read_table(path).to_pylist()


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return demo_data.write_demo_data(tmp_path_factory.mktemp("demo") / "data", seed=3, digits=(1, 2, 3), train_rows=600,
                                     test_questions=60)


def test_both_files_load_where_they_are_used(written: dict[str, Path]) -> None:
    from rlec.eval.dataset import load_eval_items
    from rlec.prompts import build_messages

    rows = load_rows(written["train"])  # checks every row against the data contract
    items = load_eval_items(written["test"])
    assert len(rows) == 600 and len(items) == 60
    row = rows[0]
    assert row["data_source"] == "math_dapo" and row["reward_model"]["ground_truth"].isdigit()
    target = None if row["extra_info"]["objective"] == "binary" else row["extra_info"]["target_p"]
    assert row["prompt"] == build_messages(row["extra_info"]["task_text"], target)
    assert Counter(len(it.question_id.split("+")[1]) for it in items) == {1: 20, 2: 20, 3: 20}


def test_evaluation_questions_are_held_out_from_training(written: dict[str, Path]) -> None:
    from rlec.eval.dataset import load_eval_items
    from rlec.demo.warm_start import AdditionProblem

    train = {r["extra_info"]["question_id"] for r in load_rows(written["train"])}
    test = load_eval_items(written["test"])
    multi = [it for it in test if len(it.question_id.split("+")[1]) > 1]
    assert multi and not {it.question_id for it in multi} & train
    for it in multi:
        a, b = it.question_id.removeprefix("add-").split("+")
        assert is_held_out(AdditionProblem(f"What is {a} + {b}?", it.ground_truth, len(b)))
        assert int(a) + int(b) == int(it.ground_truth)


def test_training_targets_follow_the_data_preparation_mix(written: dict[str, Path]) -> None:

    rows = load_rows(written["train"])
    binary = [r for r in rows if r["extra_info"]["objective"] == "binary"]
    assert len(binary) == 60 and all(r["extra_info"]["target_p"] == 0.0 for r in binary)
    targets = [r["extra_info"]["target_p"] for r in rows if r["extra_info"]["objective"] == "rlec"]
    assert min(targets) >= 0.01 and max(targets) <= 0.90 and len(set(targets)) > 50


def test_fixed_training_targets_and_no_binary_rows(tmp_path: Path) -> None:

    paths = demo_data.write_demo_data(tmp_path / "d", seed=1, train_rows=400, test_questions=6, binary_fraction=0.0,
                                      targets=(0.1, 0.8))
    targets = Counter(r["extra_info"]["target_p"] for r in load_rows(paths["train"]))
    assert set(targets) == {0.1, 0.8} and min(targets.values()) > 150
    summary = json.loads((tmp_path / "d" / "summary.json").read_text())
    assert summary["settings"] == demo_data.settings(seed=1, digits=(1, 2, 3), train_rows=400, test_questions=6,
                                                     binary_fraction=0.0, targets=(0.1, 0.8))
    with pytest.raises(ValueError, match="targets must be"):
        demo_data.write_demo_data(tmp_path / "e", targets=(0.1, 1.5))


def test_same_seed_same_bytes(tmp_path: Path, written: dict[str, Path]) -> None:
    again = demo_data.write_demo_data(tmp_path / "again", seed=3, digits=(1, 2, 3), train_rows=600, test_questions=60)
    for key in ("train", "test"):
        assert again[key].read_bytes() == written[key].read_bytes()


def test_cli_writes_and_rejects_bad_digits(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert demo_data.main(["--out", str(tmp_path / "d"), "--train-rows", "20", "--test-questions", "6"]) == 0
    assert (tmp_path / "d" / "train.parquet").is_file() and (tmp_path / "d" / "test.parquet").is_file()
    assert demo_data.main(["--out", str(tmp_path / "e"), "--digits", "0"]) == 2
    assert "--digits" in capsys.readouterr().err
