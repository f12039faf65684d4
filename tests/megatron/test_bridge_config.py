"""The mbridge adapter's config side: RoPE base as verl reads it, and clear errors for bad folders."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


def test_rope_theta_agrees_with_verls_helper(tiny_moe_dir: Path, tiny_dense_dir: Path) -> None:
    from transformers import AutoConfig
    from verl.utils.megatron_utils import get_hf_rope_theta

    from rlec.megatron.bridge import load_hf_config, rope_theta

    for folder in (tiny_moe_dir, tiny_dense_dir):
        config = AutoConfig.from_pretrained(str(folder))
        assert rope_theta(config) == get_hf_rope_theta(config) == 1_000_000.0
        assert load_hf_config(folder).rope_theta == 1_000_000.0


def test_bad_folders_are_named(tmp_path: Path) -> None:
    from rlec.megatron.bridge import load_hf_config

    with pytest.raises(FileNotFoundError, match="config.json: missing"):
        load_hf_config(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama", "hidden_size": 8}))
    with pytest.raises(ValueError, match="model_type 'llama' is not supported; supported: qwen3, qwen3_moe"):
        load_hf_config(tmp_path)


def test_preflight_accepts_the_tiny_models(tiny_moe_dir: Path, tiny_dense_dir: Path, tmp_path: Path) -> None:
    from rlec.megatron.parallel import ParallelLayout
    from rlec.megatron.preflight import check_conversion

    moe = check_conversion(tiny_moe_dir, tmp_path / "a", ParallelLayout(tp=2, ep=2, world_size=4))
    assert moe.n_tensors == 3 + 2 * (8 + 1 + 8 * 3)  # embed/norm/lm_head + per layer: attention+norms, router, experts
    dense = check_conversion(tiny_dense_dir, tmp_path / "b", ParallelLayout(tp=2, world_size=2))
    assert dense.n_tensors == 3 + 2 * 11
