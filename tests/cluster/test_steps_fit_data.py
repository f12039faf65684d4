"""trainer.total_training_steps beyond what trainer.total_epochs passes over the data give is refused before Ray starts:
verl's loop ends after its epochs whatever the step count says (an e3_budget run of 20 steps over 4 steps of data
stopped at step 4, with its LR schedule planned for 20, and its export then failed)."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq

from rlec.cluster.paths import path_findings, steps_findings
from rlec.run_config import RunConfig


def _cfg(steps: int | None, epochs: int = 1, batch: int = 8, **extra) -> dict:
    cfg = {"data": {"train_batch_size": batch}, "trainer": {"total_epochs": epochs, "total_training_steps": steps}}
    for key, value in extra.items():
        cfg.setdefault(key, {}).update(value)
    return cfg


def test_more_steps_than_the_epochs_hold_are_refused_naming_the_epochs_that_would_hold_them() -> None:
    assert steps_findings(RunConfig(_cfg(4)), rows=32) == []  # 32 rows / 8 = 4 steps a pass
    assert steps_findings(RunConfig(_cfg(20, epochs=5)), rows=32) == []
    assert steps_findings(RunConfig(_cfg(None)), rows=32) == []  # verl's own count: len(loader) x epochs
    (found,) = steps_findings(RunConfig(_cfg(20)), rows=32)
    assert found.level == "error" and found.key == "trainer.total_training_steps"
    assert "trainer.total_epochs=1" in found.message and "give 4" in found.message
    assert "set trainer.total_epochs=5 (TOTAL_EPOCHS=5) or at most 4 steps" in found.message
    # the last partial batch is dropped (verl's drop_last=True): 39 rows are still 4 steps of 8
    (found,) = steps_findings(RunConfig(_cfg(5)), rows=39)
    assert "= 4 a pass" in found.message and "total_epochs=2" in found.message
    # data.gen_batch_size, when set, is what verl's loader batches by
    assert steps_findings(RunConfig(_cfg(2, batch=8, data={"gen_batch_size": 16})), rows=32) == []
    assert steps_findings(RunConfig(_cfg(3, batch=8, data={"gen_batch_size": 16})), rows=32)


def test_fewer_rows_than_a_batch_run_no_step() -> None:
    (found,) = steps_findings(RunConfig(_cfg(1, batch=64)), rows=32)
    assert found.key == "data.train_batch_size" and "no step would run" in found.message


def test_an_algorithm_serving_its_own_prompts_is_not_bound_by_the_files() -> None:
    assert steps_findings(RunConfig(_cfg(100, rlec={"rlve": {"enable": True}})), rows=32) == []


def test_path_findings_counts_every_train_file(tmp_path: Path, sample_data_dir: Path) -> None:
    train = sample_data_dir / "train.parquet"
    rows = pq.ParquetFile(train).metadata.num_rows
    cfg = {"actor_rollout_ref": {"model": {"path": str(tmp_path / "model")}},
           "data": {"train_files": [str(train), str(train)], "val_files": [str(sample_data_dir / "test.parquet")],
                    "train_batch_size": 8},
           "trainer": {"default_local_dir": str(tmp_path / "ckpt"), "total_epochs": 1}}
    steps = lambda findings: [f for f in findings if f.key == "trainer.total_training_steps"]  # noqa: E731
    cfg["trainer"]["total_training_steps"] = (2 * rows) // 8
    assert steps(path_findings(RunConfig(cfg))[0]) == []
    cfg["trainer"]["total_training_steps"] = (2 * rows) // 8 + 1
    (found,) = steps(path_findings(RunConfig(cfg))[0])
    assert f"{2 * rows:,} rows" in found.message


def test_less_than_a_batch_is_refused_without_a_step_count_too() -> None:
    """verl's own count (len(loader) x epochs) is then 0: nothing would train."""
    (found,) = steps_findings(RunConfig(_cfg(None, batch=64)), rows=32)
    assert found.key == "data.train_batch_size"
