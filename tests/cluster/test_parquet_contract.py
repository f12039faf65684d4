"""Every row of the train and validation files is checked against the data contract before a launch starts
(rlec.data.contract.check_parquet, run by rlec.cluster.paths; the retired local loop checked every row, verl's path only the first 256)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rlec.cluster.paths import _parquet
from rlec.data.contract import ROWS_PER_BATCH, check_parquet


@pytest.fixture(scope="module")
def train_parquet(sample_data_dir: Path) -> Path:
    return sample_data_dir / "train.parquet"  # prepared once per session (tests/conftest.py)


def test_contract_errors_name_file_row_and_key(tmp_path: Path, train_parquet: Path) -> None:
    rows = pq.read_table(train_parquet).to_pylist()[:3]
    rows[2]["reward_model"] = {"ground_truth": "  "}
    bad = tmp_path / "bad.parquet"
    pq.write_table(pa.Table.from_pylist(rows), bad)
    with pytest.raises(ValueError, match=rf"{bad}: row 2: key 'reward_model.ground_truth' must be a non-empty string"):
        check_parquet(bad)
    (tmp_path / "junk.parquet").write_text("not parquet")
    with pytest.raises(ValueError, match="not a readable parquet file"):
        check_parquet(tmp_path / "junk.parquet")
    with pytest.raises(FileNotFoundError, match="does not exist; prepare it with python -m rlec.data.prepare"):
        check_parquet(tmp_path / "missing.parquet")
    pq.write_table(pa.Table.from_pylist([{"prompt": "x"}]), tmp_path / "schema.parquet")
    with pytest.raises(ValueError, match=r"missing column\(s\) \['data_source', 'reward_model', 'extra_info'\]"):
        check_parquet(tmp_path / "schema.parquet")
    assert check_parquet(train_parquet) == pq.ParquetFile(train_parquet).metadata.num_rows > 0


def test_rlec_rows_without_a_numeric_target_are_refused_naming_file_row_and_key(tmp_path: Path, train_parquet: Path) -> None:
    rows = pq.read_table(train_parquet).to_pylist()[:3]
    rows[1]["extra_info"] = rows[1]["extra_info"] | {"objective": "rlec", "target_p": None}
    bad = tmp_path / "null_target.parquet"
    pq.write_table(pa.Table.from_pylist(rows), bad)
    with pytest.raises(ValueError, match=rf"{bad}: row 1: extra_info\['target_p'\] is null but extra_info\['objective'\] "
                                         r"is 'rlec': expected a number in \[0, 1\)"):
        check_parquet(bad)


def test_a_bad_row_deep_in_the_file_is_refused_before_the_launch(tmp_path: Path, train_parquet: Path) -> None:
    """A bad row in the second read batch (past the 256 rows verl's path used to check): the launch's path check
    names it, so the run does not stop at the step that reads it."""
    good = pq.read_table(train_parquet).to_pylist()
    rows = [good[i % len(good)] for i in range(ROWS_PER_BATCH + 10)]
    where = ROWS_PER_BATCH + 5
    rows[where] = {**rows[where], "extra_info": rows[where]["extra_info"] | {"objective": "rlec", "target_p": 1.5}}
    bad = tmp_path / "deep.parquet"
    pq.write_table(pa.Table.from_pylist(rows), bad, row_group_size=1000)
    findings, summary, count = _parquet("data.train_files", str(bad))
    assert summary is None and count == 0
    assert [f.key for f in findings] == ["data.train_files"]
    assert f"row {where}: extra_info['target_p']" in findings[0].message and "the data contract" in findings[0].message
