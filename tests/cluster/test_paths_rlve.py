"""data.train_files=[] is RLVE's environments-only training (megatron_configs/algorithm/rlve.yaml), accepted only with RLVE on."""

from __future__ import annotations

from pathlib import Path

from rlec.cluster.paths import path_findings
from rlec.run_config import RunConfig


def _cfg(tmp_path: Path, rlve: bool) -> dict:
    return {"actor_rollout_ref": {"model": {"path": str(tmp_path / "model")}},
            "data": {"train_files": [], "val_files": []},
            "trainer": {"default_local_dir": str(tmp_path / "ckpt")}, "rlec": {"rlve": {"enable": rlve}}}


def test_empty_train_files_are_refused_without_rlve_and_accepted_with_it(tmp_path: Path) -> None:
    keys = lambda cfg: [f.key for f in path_findings(RunConfig(cfg))[0] if f.key.startswith("data.")]  # noqa: E731
    assert keys(_cfg(tmp_path, rlve=False)) == ["data.train_files", "data.val_files"]
    assert keys(_cfg(tmp_path, rlve=True)) == ["data.val_files"]  # validation still needs a file


def test_the_rule_asks_the_registry_not_an_algorithm_by_name() -> None:
    """paths.py names no algorithm: the one that serves prompts of its own says so (Algorithm.serves_prompts)."""
    from rlec.algorithms.registry import ALGORITHMS

    assert [cls.name for cls in ALGORITHMS if cls.serves_prompts] == ["rlve"]
    assert "rlve" not in (Path(__file__).resolve().parents[2] / "rlec" / "cluster" / "paths.py").read_text()
