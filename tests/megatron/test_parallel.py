"""ParallelLayout: resolved sizes and the errors for layouts that do not fit the world or the model."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from rlec.megatron.parallel import ParallelLayout

QWEN3_30B_A3B = SimpleNamespace(num_attention_heads=32, num_key_value_heads=4, vocab_size=151936, num_hidden_layers=48,
                                num_experts=128, moe_intermediate_size=768, intermediate_size=6144)


def test_defaults_resolve_like_megatron() -> None:
    layout = ParallelLayout(tp=2, ep=4, world_size=8)
    assert layout.expert_tp == 2  # expert_tensor_parallel_size None means TP
    assert layout.as_dict() == {"tp": 2, "ep": 4, "etp": 2, "pp": 1, "world_size": 8, "dp": 4}
    assert ParallelLayout(tp=4, pp=2).world == 8


def test_world_must_be_a_multiple_of_the_model_parallel_sizes() -> None:
    with pytest.raises(ValueError, match="world size 1 is not a multiple of tp\\*pp = 2\\*1"):
        ParallelLayout(tp=2, world_size=1).check()
    with pytest.raises(ValueError, match="not a multiple of ep\\*etp\\*pp = 4\\*2\\*1"):
        ParallelLayout(tp=2, ep=4, world_size=4).check()
    with pytest.raises(ValueError, match="expected an integer >= 1"):
        ParallelLayout(tp=0).check()


def test_real_model_cluster_layouts_fit() -> None:
    for layout in (ParallelLayout(tp=4, ep=8, etp=1, pp=2, world_size=32), ParallelLayout(tp=2, ep=8, etp=1, world_size=8)):
        layout.check_model(QWEN3_30B_A3B)


@pytest.mark.parametrize(
    ("layout", "message"),
    [
        (ParallelLayout(tp=8, world_size=8), "num_key_value_heads=4 is not divisible by tensor parallel size \\(--tp\\)=8"),
        (ParallelLayout(ep=3, world_size=3), "num_experts=128 is not divisible by expert parallel size \\(--ep\\)=3"),
        (ParallelLayout(pp=5, world_size=5), "num_hidden_layers=48 is not divisible by pipeline parallel size \\(--pp\\)=5"),
        (ParallelLayout(tp=1, etp=5, ep=1, world_size=5), "moe_intermediate_size=768 is not divisible by expert tensor parallel size \\(--etp\\)=5"),
    ],
)
def test_layout_that_does_not_divide_the_model_names_the_key(layout: ParallelLayout, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        layout.check_model(QWEN3_30B_A3B, source="Qwen3-30B-A3B/config.json")


def test_dense_model_refuses_expert_parallel() -> None:
    dense = SimpleNamespace(num_attention_heads=4, num_key_value_heads=2, vocab_size=64, num_hidden_layers=2, intermediate_size=256)
    with pytest.raises(ValueError, match="dense model .* cannot use expert parallel size --ep=2"):
        ParallelLayout(ep=2, world_size=2).check_model(dense)
