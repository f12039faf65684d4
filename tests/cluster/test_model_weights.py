"""A launch checks the model's weights before Ray starts (rlec.cluster.paths, :func:`check_hf_weights`): a truncated
file or a config that does not match the tensors is refused naming the model key (the retired local loop checked
this; verl's path found it inside a Ray worker, after a minute of start-up)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from rlec.cluster.paths import MODEL_KEY, _model
from rlec.run_config import VerlKeys


@pytest.fixture()
def model_copy(tiny_moe_dir: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(tiny_moe_dir, tmp_path / "model"))


def _errors(folder: Path) -> list[str]:
    findings, _ = _model(VerlKeys.read({"actor_rollout_ref": {"model": {"path": str(folder)}}}))
    assert all(f.key == MODEL_KEY for f in findings)
    return [f.message for f in findings]


def test_an_intact_model_passes(model_copy: Path) -> None:
    assert _errors(model_copy) == []


def test_a_truncated_weights_file_is_refused(model_copy: Path) -> None:
    weights = next(model_copy.glob("*.safetensors"))
    with open(weights, "r+b") as f:
        f.truncate(weights.stat().st_size // 2)
    errors = _errors(model_copy)
    assert len(errors) == 1 and weights.name in errors[0]


def test_a_config_the_tensors_do_not_match_is_refused_naming_the_disagreement(model_copy: Path) -> None:
    config = json.loads((model_copy / "config.json").read_text())
    config["num_hidden_layers"] += 1  # a layer whose tensors the files do not hold
    (model_copy / "config.json").write_text(json.dumps(config))
    errors = _errors(model_copy)
    assert len(errors) == 1 and "config and weights disagree" in errors[0] and "missing" in errors[0]
