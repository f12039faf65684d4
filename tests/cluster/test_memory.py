"""Per-GPU memory arithmetic (rlec.rules.memory): parameter counts against transformers, sharding by hand."""

from __future__ import annotations

import json

import pytest

from rlec.layout import ParallelLayout
from rlec.rules.memory import GIB, TrainingSettings, estimate_memory
from rlec.model_shape import ModelShape


@pytest.fixture(scope="module")
def qwen3_30b(repo_root):
    return json.loads((repo_root / "megatron_configs/model/qwen3_30b_a3b.json").read_text())


@pytest.fixture(scope="module")
def tiny(repo_root):
    return json.loads((repo_root / "megatron_configs/model/tiny_qwen3_moe.json").read_text())


def _hf_param_count(cfg_dict):
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = AutoConfig.for_model(**{k: v for k, v in cfg_dict.items() if not k.startswith("_")})
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(cfg)
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("model_type", ["qwen3_moe", "qwen3"])
def test_total_params_match_transformers(tiny, model_type):
    cfg = dict(tiny)
    if model_type == "qwen3":
        cfg.update(model_type="qwen3", architectures=["Qwen3ForCausalLM"])
        cfg = {k: v for k, v in cfg.items() if k not in ("num_experts", "num_experts_per_tok", "moe_intermediate_size")}
    assert ModelShape.from_hf_config(cfg).total_params() == _hf_param_count(cfg)


def test_qwen3_30b_a3b_counts(qwen3_30b):
    shape = ModelShape.from_hf_config(qwen3_30b)
    assert shape.total_params() == _hf_param_count(qwen3_30b)
    assert shape.total_params() == pytest.approx(30.5e9, rel=0.01)  # model card: 30.5B total
    assert shape.active_params() == pytest.approx(3.3e9, rel=0.03)  # model card: 3.3B activated
    assert shape.moe_layers == 48


def test_tiny_single_gpu_states_are_exact(tiny):
    shape = ModelShape.from_hf_config(tiny)
    # per layer: attention 2*128*128 + 2*128*64, norms 2*128 + 2*32, router 128*8, experts 8*3*128*64
    per_layer = 49152 + 320 + 1024 + 196608
    total = 2 * per_layer + 2 * 151936 * 128 + 128
    assert shape.total_params() == total == 39389952
    est = estimate_memory(shape, ParallelLayout(world_size=1), TrainingSettings(tokens_per_micro_batch=1024), 80 * GIB)
    assert est.params_local == total
    assert (est.params, est.grads, est.optimizer) == (2 * total, 4 * total, 12 * total)


def test_qwen3_tp4_ep8_on_32_gpus_hand_computed(qwen3_30b):
    shape = ModelShape.from_hf_config(qwen3_30b)
    layout = ParallelLayout(world_size=32, tp=4, ep=8, etp=1, optimizer_offload=True, rollout_tp=4)
    est = estimate_memory(shape, layout, TrainingSettings(16384, "full"), 80 * GIB)
    attention, replicated = 2 * 2048 * 4096 + 2 * 2048 * 512, 2 * 2048 + 2 * 128 + 2048 * 128
    dense = 48 * (attention // 4 + replicated) + 2 * 151936 * 2048 // 4 + 2048
    expert = 48 * (128 // 8) * 3 * 2048 * 768
    assert est.params_local == dense + expert == 4_018_747_392
    # Adam: dense states sharded over DP = 32 / 4 = 8, expert states over 32 / 8 = 4
    assert est.optimizer == pytest.approx((dense / 8 + expert / 4) * 12)
    assert est.rollout_resident == pytest.approx(6 * (dense + expert))  # optimizer offloaded


def test_offload_and_recompute_move_memory_in_the_right_direction(qwen3_30b):
    shape = ModelShape.from_hf_config(qwen3_30b)
    base = dict(world_size=8, tp=4, ep=8, etp=1)
    no_offload = estimate_memory(shape, ParallelLayout(**base), TrainingSettings(16384), 141 * GIB)
    offload = estimate_memory(shape, ParallelLayout(**base, param_offload=True, optimizer_offload=True),
                              TrainingSettings(16384), 141 * GIB)
    cpu_adam = estimate_memory(shape, ParallelLayout(**base, optimizer_cpu_fraction=1.0), TrainingSettings(16384),
                               141 * GIB)
    assert offload.rollout_resident == 0 < no_offload.rollout_resident
    assert offload.train_total == no_offload.train_total  # verl loads everything back for the update
    assert cpu_adam.optimizer == 0
    full = estimate_memory(shape, ParallelLayout(**base), TrainingSettings(16384, "full"), 141 * GIB)
    selective = estimate_memory(shape, ParallelLayout(**base),
                                TrainingSettings(16384, "selective", ("core_attn", "moe_act", "layernorm")), 141 * GIB)
    assert full.activations < selective.activations < no_offload.activations


def test_fp8_rollout_halves_linear_weights(qwen3_30b):
    shape = ModelShape.from_hf_config(qwen3_30b)
    bf16 = estimate_memory(shape, ParallelLayout(8, rollout_tp=4), TrainingSettings(1024), 80 * GIB)
    fp8 = estimate_memory(shape, ParallelLayout(8, rollout_tp=4, rollout_quantization="fp8"), TrainingSettings(1024),
                          80 * GIB)
    embeddings = 2 * 151936 * 2048 * 2 / 4  # stay bf16
    assert fp8.vllm_weights - embeddings == pytest.approx((bf16.vllm_weights - embeddings) / 2)
    assert bf16.kv_bytes_per_token == 2 * 48 * 1 * 128 * 2  # K and V, 1 KV head per GPU at TP 4, bf16


def test_pipeline_parallel_sizes_the_heaviest_stage(qwen3_30b):
    shape = ModelShape.from_hf_config(qwen3_30b)
    one = estimate_memory(shape, ParallelLayout(16, tp=4, ep=4, etp=1), TrainingSettings(1024), 80 * GIB)
    two = estimate_memory(shape, ParallelLayout(16, tp=4, ep=4, etp=1, pp=2), TrainingSettings(1024), 80 * GIB)
    assert two.params_local == pytest.approx(one.params_local / 2, rel=0.2)
    assert two.params_local > one.params_local / 2  # first stage also holds the embedding


def test_bad_config_names_key():
    with pytest.raises(ValueError, match="config.json: 'hidden_size' must be a positive integer"):
        ModelShape.from_hf_config({"vocab_size": 10, "num_attention_heads": 2, "num_hidden_layers": 1})
