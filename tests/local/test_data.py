"""The local prompt source: the data contract checked first, then verl's dataset and stateful dataloader."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlec.config import compose
from rlec.local.data import PromptLoader, check_parquet


@pytest.fixture(scope="module")
def train_parquet(sample_data_dir: Path) -> Path:
    return sample_data_dir / "train.parquet"  # prepared once per session (tests/conftest.py)


def _ids(batch: dict) -> list[str]:
    return [f"{e['question_id']}/{e.get('repeat')}/{e.get('target_p')}" for e in batch["extra_info"]]


def test_resumed_loader_draws_the_same_prompts(train_parquet: Path, qwen_tokenizer) -> None:
    cfg = compose([f"data.train_files={train_parquet}", "data.train_batch_size=4"], "local")
    loader = PromptLoader(cfg, qwen_tokenizer)
    first = [_ids(loader.next_batch()) for _ in range(3)]
    state = loader.state_dict()
    rest = [_ids(loader.next_batch()) for _ in range(2)]
    resumed = PromptLoader(cfg, qwen_tokenizer)
    resumed.load_state_dict(state)
    assert [_ids(resumed.next_batch()) for _ in range(2)] == rest
    fresh = PromptLoader(cfg, qwen_tokenizer)
    assert [_ids(fresh.next_batch()) for _ in range(3)] == first  # seeded by data.seed
    assert set(loader.next_batch()) >= {"raw_prompt", "data_source", "reward_model", "extra_info"}


def test_epochs_follow_one_another(train_parquet: Path, qwen_tokenizer) -> None:
    cfg = compose([f"data.train_files={train_parquet}", "data.train_batch_size=64"], "local")
    loader = PromptLoader(cfg, qwen_tokenizer)
    for _ in range(len(loader) + 1):
        loader.next_batch()
    assert loader.epoch == 1


def test_contract_errors_name_file_row_and_key(tmp_path: Path, train_parquet: Path) -> None:
    import pyarrow.parquet as pq

    rows = pq.read_table(train_parquet).to_pylist()[:3]
    rows[2]["reward_model"] = {"ground_truth": "  "}
    bad = tmp_path / "bad.parquet"
    pq.write_table(__import__("pyarrow").Table.from_pylist(rows), bad)
    with pytest.raises(ValueError, match=rf"{bad}: row 2: key 'reward_model.ground_truth' must be a non-empty string"):
        check_parquet(bad)
    (tmp_path / "junk.parquet").write_text("not parquet")
    with pytest.raises(ValueError, match="not a readable parquet file"):
        check_parquet(tmp_path / "junk.parquet")
    with pytest.raises(FileNotFoundError, match="run `python -m rlec.data.prepare`"):
        check_parquet(tmp_path / "missing.parquet")
    assert check_parquet(train_parquet) > 0


def test_rlec_rows_without_a_numeric_target_are_refused_naming_file_row_and_key(tmp_path: Path, train_parquet: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from rlec.data.contract import check_row

    rows = pq.read_table(train_parquet).to_pylist()[:3]
    rows[1]["extra_info"] = rows[1]["extra_info"] | {"objective": "rlec", "target_p": None}
    bad = tmp_path / "null_target.parquet"
    pq.write_table(pa.Table.from_pylist(rows), bad)
    with pytest.raises(ValueError, match=rf"{bad}: row 1: extra_info\['target_p'\] is null but extra_info\['objective'\] "
                                         r"is 'rlec': expected a number in \[0, 1\)"):
        check_parquet(bad)
    row = pq.read_table(train_parquet).to_pylist()[0]
    row["extra_info"] = row["extra_info"] | {"objective": "rlec", "target_p": "0.5"}
    with pytest.raises(ValueError, match=r"train.parquet: row 0: extra_info\['target_p'\] must be a real number in \[0, 1\), "
                                         r"got '0.5'"):
        check_row(row, "train.parquet: row 0")
