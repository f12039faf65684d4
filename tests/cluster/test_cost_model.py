"""rlec.cluster.cost_model: FLOPs, EP traffic, decode roofline and step projection against hand-computed
values for Qwen3-30B-A3B, and the FLOPs against verl's own formula."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from rlec.cluster.cost_model import (
    DEVICES,
    Assumptions,
    decode_roofline,
    ep_alltoall_bytes,
    project_step,
    train_flops,
    verl_flops_params,
)
from rlec.layout import ParallelLayout
from rlec.rules.memory import GIB, TrainingSettings, estimate_memory
from rlec.model_shape import ModelShape

H, V, L, E, K, M = 2048, 151936, 48, 128, 8, 768  # Qwen3-30B-A3B
Q, KV = 32 * 128, 4 * 128


@pytest.fixture(scope="module")
def qwen(repo_root) -> ModelShape:
    return ModelShape.from_hf_config(json.loads((repo_root / "megatron_configs/model/qwen3_30b_a3b.json").read_text()))


@pytest.fixture(scope="module")
def layout_4x8() -> ParallelLayout:
    # megatron_configs/layout/qwen3_30b_a3b_4x8.yaml
    return ParallelLayout(world_size=32, tp=4, ep=8, etp=1, optimizer_offload=True, rollout_tp=4,
                          rollout_gpu_memory_utilization=0.55)


def test_flops_parameters_by_hand(qwen) -> None:
    per_layer = 3 * H * K * M + H * E + H * (2 * Q + 2 * KV)  # top-8 experts + router + Q, K, V, O
    assert per_layer == 37_748_736 + 262_144 + 18_874_368
    assert verl_flops_params(qwen) == (L * per_layer, 2 * V * H) == (2_730_491_904, 622_329_856)


def test_train_flops_per_token_at_4096_by_hand(qwen) -> None:
    f = train_flops(qwen, [4096])
    assert f.linear == 6 * 2_730_491_904 * 4096
    assert f.vocab == 6 * 622_329_856 * 4096
    assert f.attention == 6 * 4096**2 * 128 * 32 * L
    assert f.total / 4096 == 20_116_930_560 + 4_831_838_208 == 24_948_768_768  # ~25 GFLOP per token


def test_logit_window_counts_the_output_layer_on_the_window_only(qwen) -> None:
    full, window = train_flops(qwen, [100, 300]), train_flops(qwen, [100, 300], logit_tokens=50)
    assert full.vocab == 6 * 2 * V * H * 400
    assert window.vocab == 6 * V * H * (400 + 50)  # embedding on every token, output layer on 50
    assert (window.linear, window.attention) == (full.linear, full.attention)
    with pytest.raises(ValueError, match="logit_tokens=401"):
        train_flops(qwen, [100, 300], logit_tokens=401)


@pytest.mark.parametrize("model", ["qwen3_30b_a3b", "tiny_qwen3_moe"])
def test_flops_equal_verls_formula(repo_root, model) -> None:
    from verl.utils.flops_counter import ESTIMATE_FUNC

    cfg = json.loads((repo_root / f"megatron_configs/model/{model}.json").read_text())
    seqlens = [17, 512, 4096, 1000]
    ours = train_flops(ModelShape.from_hf_config(cfg), seqlens).total
    theirs = ESTIMATE_FUNC["qwen3_moe"](SimpleNamespace(**cfg), sum(seqlens), seqlens, 1.0) * 1e12
    assert ours == pytest.approx(theirs, rel=1e-12)


def test_ep_alltoall_bytes_by_hand(qwen, layout_4x8) -> None:
    tokens = 2048 * 2048  # 256 prompts x 8 responses x 2048 tokens
    per_gpu_tokens = tokens // 32
    expected = per_gpu_tokens * L * (2 * K * H * 2) * 7 / 8 * 3  # dispatch+combine, bf16, 7/8 remote, 3 passes
    assert ep_alltoall_bytes(qwen, layout_4x8, tokens) == pytest.approx(expected) == 1_082_331_758_592
    assert ep_alltoall_bytes(qwen, ParallelLayout(world_size=8, tp=4), tokens) == 0.0  # no expert parallelism


def test_memory_of_the_4x8_layout_by_hand(qwen, layout_4x8) -> None:
    mem = estimate_memory(qwen, layout_4x8, TrainingSettings(16384, "selective", ("core_attn", "moe_act", "layernorm")), 80 * GIB)
    expert = 48 * (128 // 8) * 3 * H * M  # 16 experts per GPU in each of 48 layers
    dense = 48 * ((2 * H * Q + 2 * H * KV) // 4 + 2 * H + 2 * 128 + H * E) + 2 * V * H // 4 + H
    assert (dense, expert) == (394_868_736, 3_623_878_656)
    assert mem.params == 2 * (dense + expert) and mem.grads == 4 * (dense + expert)
    assert mem.optimizer == pytest.approx(12 * (dense / 8 + expert / 4))  # DP 8 for dense, expert DP 4
    # vLLM TP 4: bf16 linear weights and embeddings / 4
    linear_dense = qwen.total_params() - 48 * 128 * 3 * H * M - 2 * V * H
    assert mem.vllm_weights == pytest.approx(2 * (linear_dense + 48 * 128 * 3 * H * M + 2 * V * H) / 4)
    assert mem.kv_bytes_per_token == 2 * L * 1 * 128 * 2  # K and V, one KV head per GPU, bf16


def test_decode_roofline_by_hand(qwen, layout_4x8) -> None:
    mem = estimate_memory(qwen, layout_4x8, TrainingSettings(16384), 80 * GIB)
    a = Assumptions()
    d = decode_roofline(qwen, layout_4x8, mem, DEVICES["H100"], a, sequences=64)
    expert_bytes = 48 * 128 * 3 * H * M * 2 / 4
    dense_bytes = mem.vllm_weights - expert_bytes
    assert dense_bytes == pytest.approx(770_546_688)
    touched = 1 - (1 - 8 / 128) ** 64
    kv = 64 * (512 + 1536 / 2) * 24_576
    step = (dense_bytes + touched * expert_bytes + kv) / (3.35e12 * 0.5)
    assert d["batch"] == 64 and d["bound"] == 1.0
    assert d["kv_capacity_seqs"] == int((0.5 * 80 * GIB - mem.vllm_weights) // (24_576 * 2048)) == 550
    assert d["step_s"] == pytest.approx(step)
    assert d["tokens_per_s_per_gpu"] == pytest.approx(64 / step / 4)
    assert decode_roofline(qwen, layout_4x8, mem, DEVICES["H100"], a, sequences=10_000)["batch"] == 256  # max_num_seqs


def test_step_projection_by_hand(qwen, layout_4x8) -> None:
    mem = estimate_memory(qwen, layout_4x8, TrainingSettings(16384), 80 * GIB)
    a = Assumptions(update_mfu=0.25)
    p = project_step(qwen, layout_4x8, mem, DEVICES["H100"], a, responses=2048, gpus_per_node=8)
    seq = 512 + 1536
    per_token = 6 * (2_730_491_904 + 622_329_856) + 6 * seq * 128 * 32 * L
    assert p["train_flops_per_token"] == per_token
    assert p["update_s"] == pytest.approx(2048 * seq * per_token / (32 * 989e12 * 0.25))
    assert p["logprob_s"] == pytest.approx(p["update_s"] / 3)
    assert p["step_s"] == pytest.approx(p["rollout_s"] + p["logprob_s"] + p["update_s"])
    assert p["tokens_per_s_per_gpu"] == pytest.approx(2048 * seq / (p["step_s"] * 32))
    assert p["alltoall_intra_node"] == 1.0  # EP 8 x ETP 1 fits a node of 8
    assert p["alltoall_s"] == pytest.approx(p["alltoall_bytes_per_gpu"] / 150e9)


def test_each_decode_wave_lasts_its_longest_response(qwen, layout_4x8) -> None:
    """The long tail (issue 26, item 8): 2,048 responses on 8 replicas of TP 4 = one wave of 256 per
    replica, which lasts longest_response_tokens decode steps, not the mean's 1,536."""
    mem = estimate_memory(qwen, layout_4x8, TrainingSettings(16384), 80 * GIB)
    tail = project_step(qwen, layout_4x8, mem, DEVICES["H100"], Assumptions(), responses=2048, gpus_per_node=8)
    ideal = project_step(qwen, layout_4x8, mem, DEVICES["H100"], Assumptions(longest_response_tokens=1536), responses=2048,
                         gpus_per_node=8)
    step_s = tail["decode_step_ms"] / 1e3
    assert tail["decode_waves"] == 1 and tail["decode_batch"] == 256
    assert tail["rollout_s"] - tail["prefill_s"] == pytest.approx(4096 * step_s)
    assert ideal["rollout_s"] - ideal["prefill_s"] == pytest.approx(1536 * step_s)
    assert tail["rollout_tokens_per_s_per_gpu"] == pytest.approx(2048 * 1536 / (4096 * step_s * 32))
    assert tail["rollout_peak_tokens_per_s_per_gpu"] == ideal["rollout_peak_tokens_per_s_per_gpu"]
    assert tail["generation_share"] > 0.7 > ideal["generation_share"]  # verl measured 70 %


def test_anchor_comparison_gives_each_anchor_with_its_ratio() -> None:
    from rlec.cluster.cost_model import ANCHORS, anchor_comparison

    row = {"tokens_per_s_per_gpu": 2204.0, "generation_share": 0.35, "update_tflops_per_gpu": 222.0,
           "rollout_peak_tokens_per_s_per_gpu": 6300.0}
    got = {x["metric"]: x for x in anchor_comparison(row, "H100", 32)}
    assert len(got) == len(ANCHORS)
    rl = got["RL step tokens/s/GPU"]
    assert (rl["anchor"], rl["ratio"], rl["same_setup"]) == (1102.0, 2.0, True)
    assert got["generation share of step time"]["ratio"] == pytest.approx(0.5)
    assert got["update TFLOP/s/GPU"]["anchor"] == 222.0 and not got["update TFLOP/s/GPU"]["same_setup"]
    assert anchor_comparison({"generation_share": 0.7}, "H200", 8)[0]["ratio"] == pytest.approx(1.0)


def test_shape_of_a_transformers_saved_model_matches_its_source(repo_root, tiny_moe_dir) -> None:
    """transformers 5 saves the expert count as ``num_local_experts``: still read as MoE."""
    saved = json.loads((tiny_moe_dir / "config.json").read_text())
    source = json.loads((repo_root / "megatron_configs/model/tiny_qwen3_moe.json").read_text())
    assert ModelShape.from_hf_config(saved) == ModelShape.from_hf_config(source)
    assert ModelShape.from_hf_config(saved).num_experts == 8
