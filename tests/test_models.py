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


def test_upcycled_moe_computes_the_dense_models_logits() -> None:
    """Sparse upcycling: every expert a copy of the dense MLP, top-2 of 4 with normalised weights -> the dense function;
    the routers are small and distinct, so transformers' and Megatron's top-k agree without ties."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from rlec.models import upcycle_to_moe

    torch.manual_seed(0)
    dense = AutoModelForCausalLM.from_config(AutoConfig.for_model(
        model_type="qwen3", vocab_size=50, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=8, tie_word_embeddings=False), dtype=torch.float32).eval()
    moe = upcycle_to_moe(dense, num_experts=4, experts_per_token=2, seed=3)
    cfg = moe.config
    assert (cfg.model_type, cfg.num_experts, cfg.num_experts_per_tok, cfg.moe_intermediate_size, cfg.norm_topk_prob) == (
        "qwen3_moe", 4, 2, 48, True)
    ids = torch.randint(0, 50, (3, 11), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want, got = dense(ids).logits, moe(ids).logits
    assert want.abs().max() > 0.1 and torch.allclose(got, want, atol=1e-5)
    router = moe.model.layers[0].mlp.gate.weight
    assert router.abs().max() > 0 and len(torch.unique(router)) == router.numel()
    # without norm_topk_prob the layer would scale the MLP by the top-2 share (about 1/2): the test can see a wrong copy
    for layer in moe.model.layers:
        layer.mlp.gate.norm_topk_prob = False
    with torch.no_grad():
        assert not torch.allclose(moe(ids).logits, want, atol=1e-3)
    with pytest.raises(ValueError, match="expected a dense Qwen3"):
        upcycle_to_moe(moe)
