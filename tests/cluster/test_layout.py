"""rlec.layout: the one ParallelLayout and its rule set, as the Megatron side raises them
and as the config check reports them; vLLM's FP8 block rule with the sizes of the refusal."""

from __future__ import annotations

import json

import pytest

from rlec.layout import ParallelLayout, model_findings, rollout_findings, size_findings
from rlec.model_shape import ModelShape


@pytest.fixture(scope="module")
def qwen(repo_root) -> ModelShape:
    return ModelShape.from_hf_config(json.loads((repo_root / "megatron_configs/model/qwen3_30b_a3b.json").read_text()))


@pytest.fixture(scope="module")
def tiny(repo_root) -> ModelShape:
    return ModelShape.from_hf_config(json.loads((repo_root / "megatron_configs/model/tiny_qwen3_moe.json").read_text()))


def errors(findings) -> list[str]:
    return [f"{f.key}: {f.message}" for f in findings if f.level == "error"]


def test_defaults_resolve_like_megatron() -> None:
    layout = ParallelLayout(tp=2, ep=4, world_size=8)
    assert layout.expert_tp == 2  # expert_tensor_parallel_size None means TP
    assert (layout.dp, layout.expert_dp) == (4, 1)
    assert layout.as_dict() == {"tp": 2, "ep": 4, "etp": 2, "pp": 1, "world_size": 8, "dp": 4}
    assert ParallelLayout(tp=4, pp=2).world == 8  # no world size: no data parallel
    assert ParallelLayout(8, rollout_quantization="fp8").rollout_weight_bytes == 1.0
    assert ParallelLayout(8).rollout_weight_bytes == 2.0


def test_one_class_everywhere() -> None:
    import rlec.megatron
    from rlec.rules import memory, verl_keys
    from rlec.megatron import parallel

    assert rlec.megatron.ParallelLayout is parallel.ParallelLayout is ParallelLayout
    assert memory.ParallelLayout is verl_keys.ParallelLayout is ParallelLayout


def test_world_must_be_a_multiple_of_the_model_parallel_sizes() -> None:
    with pytest.raises(ValueError, match=r"^world_size: world size 1 is not a multiple of TP x PP x CP = 2 x 1 x 1 = 2"):
        ParallelLayout(tp=2, world_size=1).check()
    with pytest.raises(ValueError, match=r"--ep: EP x ETP = 4 x 2 must divide the 4 GPUs of a pipeline stage"):
        ParallelLayout(tp=2, ep=4, world_size=4).check(names={"ep": "--ep"})
    with pytest.raises(ValueError, match="parallel size tp=0: expected an integer >= 1"):
        ParallelLayout(tp=0).check()
    with pytest.raises(ValueError, match="parallel size ep=True: expected an integer >= 1"):
        ParallelLayout(ep=True).check()


@pytest.mark.parametrize("layout", [ParallelLayout(tp=4, ep=8, etp=1, pp=2, world_size=32),
                                    ParallelLayout(tp=2, ep=8, etp=1, world_size=8)])
def test_real_model_cluster_layouts_fit(qwen, layout) -> None:
    assert size_findings(layout) == [] and model_findings(layout, qwen) == []
    layout.check_model(qwen)  # does not raise


@pytest.mark.parametrize(
    ("layout", "message"),
    [
        (ParallelLayout(tp=8, world_size=8), "--tp: TP 8 must divide the 4 KV heads (num_key_value_heads)"),
        (ParallelLayout(ep=3, world_size=3), "--ep: EP 3 must divide the 128 experts (num_experts)"),
        (ParallelLayout(pp=5, world_size=5), "--pp: PP 5 must divide the 48 layers (num_hidden_layers)"),
        (ParallelLayout(etp=5, world_size=5), "--etp: ETP 5 must divide the 768 expert intermediate size"),
        (ParallelLayout(tp=2, vpp=5, pp=2, world_size=4), "vpp: VPP 5 must divide the 24 layers of a pipeline stage"),
    ],
)
def test_layout_that_does_not_divide_the_model_names_setting_and_sizes(qwen, layout, message) -> None:
    with pytest.raises(ValueError) as info:
        layout.check_model(qwen, source="Qwen3-30B-A3B/config.json",
                           names={"tp": "--tp", "ep": "--ep", "pp": "--pp", "etp": "--etp"})
    assert str(info.value).startswith("Qwen3-30B-A3B/config.json: ")
    assert message in str(info.value)


def test_uneven_first_and_last_stages_lift_the_layer_rule(qwen) -> None:
    assert errors(model_findings(ParallelLayout(pp=5, world_size=5), qwen))
    assert not errors(model_findings(ParallelLayout(pp=5, world_size=5, first_stage_layers=8, last_stage_layers=10), qwen))


def test_dense_model_refuses_expert_parallel_and_checks_the_mlp_width(tiny_dense_dir) -> None:
    from transformers import AutoConfig

    dense = AutoConfig.from_pretrained(tiny_dense_dir)  # a transformers config object, as build_model passes it
    with pytest.raises(ValueError, match="EP 2 > 1 but the model is dense"):
        ParallelLayout(ep=2, world_size=2).check_model(dense)
    shape = ModelShape.of(dense)
    assert shape.num_experts == 0 and shape.moe_layers == 0
    assert errors(model_findings(ParallelLayout(tp=3, world_size=3), shape)) == [
        "tp: TP 3 must divide the 4 attention heads (num_attention_heads)",
        "tp: TP 3 must divide the 2 KV heads (num_key_value_heads); Megatron does not replicate KV heads",
        "tp: TP 3 must divide the 151936 vocabulary entries (vocab_size)",
        "tp: TP 3 must divide the 256 MLP intermediate size (intermediate_size)",
    ]


def test_transformers_saved_moe_config_is_read_as_moe(tiny_moe_dir, tiny) -> None:
    from transformers import AutoConfig

    assert ModelShape.of(AutoConfig.from_pretrained(tiny_moe_dir)) == tiny


# --- vLLM rollout ---------------------------------------------------------------------------

def test_rollout_expert_parallel_is_one_or_tp_times_dp(qwen) -> None:
    assert errors(rollout_findings(ParallelLayout(8, rollout_tp=4, rollout_ep=3), qwen)) == [
        "rollout_ep: rollout EP must be 1 or TP x DP = 4 x 1 = 4 (verl's RolloutConfig), got 3"]
    assert errors(rollout_findings(ParallelLayout(8, rollout_tp=2, rollout_dp=2, rollout_ep=4), qwen)) == []
    assert "rollout TP 3 must divide the 32 attention heads" in errors(
        rollout_findings(ParallelLayout(6, rollout_tp=3), qwen))[0]
    assert "must tile the 12 GPUs (8 per node)" in errors(
        rollout_findings(ParallelLayout(12, rollout_tp=4, rollout_dp=3), qwen, gpus_per_node=8))[0]


def test_fp8_rollout_at_tp4_without_expert_parallel_is_refused_with_the_sizes(qwen) -> None:
    """The failure of the shipped fp8 overlays before the fix: 768 / 4 = 192 per GPU."""
    found = errors(rollout_findings(ParallelLayout(32, rollout_tp=4, rollout_quantization="fp8"), qwen))
    assert len(found) == 1
    assert found[0].startswith("rollout_ep: FP8 rollout quantizes weights in 128 x 128 blocks")
    assert "expert intermediate size / rollout TP = 768 / 4 = 192 with rollout EP 1" in found[0]
    assert "set rollout expert parallel = TP x DP = 4" in found[0]
    # the same layout in bf16 is fine: the rule is FP8's
    assert errors(rollout_findings(ParallelLayout(32, rollout_tp=4), qwen)) == []


@pytest.mark.parametrize(("tp", "ep"), [(1, 1), (2, 1), (4, 4), (8, 8)])
def test_fp8_rollout_layouts_that_vllm_accepts(qwen, tp, ep) -> None:
    # TP <= 2 keeps 384 or 768 per GPU; EP = TP keeps whole experts; TP 8 replicates KV heads (128 each)
    assert errors(rollout_findings(ParallelLayout(8, rollout_tp=tp, rollout_ep=ep, rollout_quantization="fp8"), qwen)) == []


def test_fp8_rollout_checks_attention_and_dense_slices(qwen, tiny) -> None:
    # TP 8 without EP: experts 96 wide, queries 512 per GPU (fine)
    found = errors(rollout_findings(ParallelLayout(8, rollout_tp=8, rollout_quantization="fp8"), qwen))
    assert len(found) == 1 and "768 / 8 = 96" in found[0]
    # the tiny model: K/V 2 x 32 = 64 wide, experts 64 wide -> no FP8 rollout at any size
    found = errors(rollout_findings(ParallelLayout(1, rollout_quantization="fp8"), tiny))
    assert any("key/value projections KV heads per GPU x head_dim = 2 x 32 = 64" in e for e in found)
    assert any("768" not in e and "= 64 with rollout EP 1" in e and "cannot use FP8 rollout" in e for e in found)


def test_fp8_capable_tiny_model_passes(repo_root) -> None:
    fp8_tiny = ModelShape.from_hf_config(json.loads((repo_root / "megatron_configs/model/tiny_qwen3_moe_fp8.json").read_text()))
    assert errors(rollout_findings(ParallelLayout(1, rollout_quantization="fp8"), fp8_tiny)) == []
