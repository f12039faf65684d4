"""`python -m rlec.models build`: the 2-layer full-width Qwen3-30B-A3B smoke model (issue 58), its shipped config
checked analytically, and a narrow slice of it (the real hidden, head and expert widths, fewer experts, layers and
vocabulary) built and run on CPU."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from rlec.model_shape import ModelShape
from rlec.config_base import CONFIG_DIR
from rlec.models import build_model_from_config, main, saved_parameter_count

TWO_LAYER = CONFIG_DIR / "model" / "qwen3_30b_a3b_2l.json"


def test_two_layer_config_is_the_real_one_cut_to_two_layers_with_the_hand_counted_parameters():
    full = {k: v for k, v in json.loads((CONFIG_DIR / "model" / "qwen3_30b_a3b.json").read_text()).items() if k[0] != "_"}
    cut = {k: v for k, v in json.loads(TWO_LAYER.read_text()).items() if k[0] != "_"}
    assert {k: v for k, v in cut.items() if k in full and k != "num_hidden_layers"} == {
        k: v for k, v in full.items() if k != "num_hidden_layers"}
    assert cut["num_hidden_layers"] == 2
    shape = ModelShape.from_hf_config(cut)
    # per layer: Q 2048x4096 + K, V 2048x512 each + O 4096x2048 = 18,874,368; QK-norm 2 x 128; two RMSNorms 2 x 2048;
    # router 2048 x 128 = 262,144; 128 experts x 3 x 2048 x 768 = 603,979,776 -> 623,120,640.
    # Embedding and output layer 2 x 151,936 x 2048 = 622,329,856; final norm 2048.
    assert shape.total_params() == 2 * 623_120_640 + 622_329_856 + 2048 == 1_868_573_184
    # active: 8 of 128 experts, 8 x 4,718,592 = 37,748,736 per layer instead of 603,979,776
    assert shape.active_params() == 1_868_573_184 - 2 * 120 * 4_718_592 == 736_111_104


@pytest.mark.minutes(0.5)
def test_build_a_narrow_slice_with_the_real_expert_widths_and_run_a_forward(tmp_path: Path):
    import torch
    from transformers import AutoModelForCausalLM

    out = tmp_path / "slice"
    # the real widths (hidden 2048, 32 x 128 query / 4 x 128 KV heads, experts 768 wide, top-8), 16 experts,
    # 1 layer, a 1,024-word vocabulary: ~99e6 parameters instead of 1.87e9
    rc = main(["build", "--config", "qwen3_30b_a3b", "--layers", "1", "--out", str(out),
               "--set", "num_experts=16", "--set", "vocab_size=1024", "--set", "pad_token_id=0"])
    assert rc == 0
    cfg = json.loads((out / "config.json").read_text())
    assert (cfg["num_hidden_layers"], cfg["hidden_size"], cfg["moe_intermediate_size"], cfg["head_dim"]) == (1, 2048, 768, 128)
    assert (cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["num_experts_per_tok"]) == (32, 4, 8)
    assert cfg["dtype"] == "bfloat16" and (out / "tokenizer.json").is_file()
    model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    experts = model.model.layers[0].mlp.experts
    assert tuple(experts.gate_up_proj.shape) == (16, 2 * 768, 2048)  # transformers 5 keeps the experts fused
    n = sum(p.numel() for p in model.parameters())
    shape = ModelShape.from_hf_config(cfg)
    assert n == shape.total_params() == saved_parameter_count(out)
    with torch.no_grad():
        logits = model(torch.tensor([[1, 2, 3, 4, 5]])).logits
    assert logits.shape == (1, 5, 1024) and torch.isfinite(logits).all()
    # same seed, same weights: a second build of the same slice is bit-identical
    again = build_model_from_config(tmp_path / "again", "qwen3_30b_a3b", layers=1,
                                    overrides={"num_experts": 16, "vocab_size": 1024, "pad_token_id": 0})
    assert (again / "model.safetensors").read_bytes() == (out / "model.safetensors").read_bytes()


@pytest.mark.parametrize(("args", "message"), [
    (["--config", "qwen3_30b_a3c"], "--config qwen3_30b_a3c: no such file"),
    (["--config", "qwen3_30b_a3b", "--layers", "0"], "--layers 0: must be >= 1"),
    (["--config", "qwen3_30b_a3b", "--set", "num_experts"], "expected KEY=VALUE"),
    (["--config", "qwen3_30b_a3b", "--set", "hidden_size=0"], "'hidden_size' must be a positive integer, got 0"),
])
def test_cli_refuses_bad_input_in_one_line_before_building(tmp_path: Path, args, message):
    out = tmp_path / "m"
    proc = subprocess.run([sys.executable, "-m", "rlec.models", "build", *args, "--out", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert not out.exists()


def test_cli_refuses_an_existing_output_folder(tmp_path: Path):
    out = tmp_path / "m"
    out.mkdir()
    (out / "keep").write_text("x")
    assert main(["build", "--config", "qwen3_30b_a3b", "--layers", "2", "--out", str(out)]) == 2
    assert (out / "keep").read_text() == "x"
