"""Checkpoint bookkeeping of the local run: the latest pointer and pruning."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlec.local.checkpoint import LATEST_FILE, checkpoint_dir, latest, prune


def _make(out: Path, *steps: int) -> None:
    for s in steps:
        checkpoint_dir(out, s).mkdir(parents=True)


def test_prune_keeps_the_newest_at_or_below_the_step_and_drops_stale_higher_ones(tmp_path: Path) -> None:
    _make(tmp_path, 5, 10, 3)  # 5 and 10 were left by an earlier, longer run
    assert prune(tmp_path, 3, keep=2) == [3]
    assert not checkpoint_dir(tmp_path, 10).exists() and checkpoint_dir(tmp_path, 3).exists()
    _make(tmp_path, 6, 9)
    assert prune(tmp_path, 9, keep=2) == [6, 9]


def test_latest_follows_the_pointer_and_refuses_a_dangling_one(tmp_path: Path) -> None:
    assert latest(tmp_path) is None
    _make(tmp_path, 4)
    (tmp_path / "checkpoints" / LATEST_FILE).write_text("4\n")
    assert latest(tmp_path) == checkpoint_dir(tmp_path, 4)
    (tmp_path / "checkpoints" / LATEST_FILE).write_text("7\n")
    with pytest.raises(FileNotFoundError, match="global_step_7, which is missing"):
        latest(tmp_path)
