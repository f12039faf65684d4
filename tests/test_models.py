"""rlec.models: the model-folder check and the offline tokenizer loader name what is wrong."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from rlec.models import SUPPORTED_MODEL_TYPES, check_model_folder, load_tokenizer


def test_check_model_folder_accepts_the_tiny_model(tiny_moe_dir: Path) -> None:
    assert check_model_folder(tiny_moe_dir, model_types=SUPPORTED_MODEL_TYPES) == tiny_moe_dir


def test_check_model_folder_names_what_is_missing(tmp_path: Path, tiny_moe_dir: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"--model .*absent: does not exist or is not a folder"):
        check_model_folder(tmp_path / "absent", label="--model")
    folder = tmp_path / "m"
    folder.mkdir()
    with pytest.raises(FileNotFoundError, match="config.json: missing"):
        check_model_folder(folder)
    (folder / "config.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match="not a JSON object"):
        check_model_folder(folder)
    (folder / "config.json").write_text("{")
    with pytest.raises(ValueError, match="not valid JSON"):
        check_model_folder(folder)
    (folder / "config.json").write_text(json.dumps({"model_type": "bert"}))
    with pytest.raises(ValueError, match=r"model_type 'bert' is not supported; supported: qwen3, qwen3_moe"):
        check_model_folder(folder, model_types=SUPPORTED_MODEL_TYPES)
    shutil.copy(tiny_moe_dir / "config.json", folder / "config.json")
    with pytest.raises(FileNotFoundError, match=r"no weight files \(\*\.safetensors\)"):
        check_model_folder(folder, model_types=SUPPORTED_MODEL_TYPES)
    (folder / "pytorch_model.bin").write_bytes(b"")
    assert check_model_folder(folder, weights=("*.safetensors", "pytorch_model*.bin")) == folder


def test_load_tokenizer_names_a_folder_without_tokenizer_files(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=re.escape(f"{tmp_path}: no tokenizer files")):
        load_tokenizer(tmp_path)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_tokenizer(tmp_path / "absent")
