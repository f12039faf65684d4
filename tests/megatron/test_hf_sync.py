"""Weight sync into a live transformers model: hub-layout names <-> fused in-memory experts."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch


@pytest.fixture(scope="module")
def hf_model(tiny_moe_dir: Path):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(tiny_moe_dir), dtype=torch.float32).eval()


def _hub(tiny_moe_dir: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(tiny_moe_dir / "model.safetensors"))


def test_stacking_agrees_with_transformers_own_conversion(hf_model, tiny_moe_dir: Path) -> None:
    from rlec.megatron.hf_sync import hub_to_model_state, model_to_hub_state

    hub = _hub(tiny_moe_dir)
    state = hub_to_model_state(hf_model, hub)
    assert set(state) == set(hf_model.state_dict())
    for name, tensor in hf_model.state_dict().items():
        assert torch.equal(state[name], tensor), name
    back = model_to_hub_state(hf_model, state)  # transformers' revert_weight_conversion (save_pretrained)
    assert set(back) == set(hub)
    assert all(torch.equal(back[k], hub[k]) for k in hub)


def test_load_into_hf_model_restores_every_weight(hf_model, tiny_moe_dir: Path) -> None:
    from rlec.megatron.hf_sync import load_into_hf_model

    ids = torch.tensor([[1, 2, 3, 4, 5]])
    with torch.no_grad():
        before = hf_model(input_ids=ids).logits
        for p in hf_model.parameters():
            p.add_(0.01)
    assert load_into_hf_model(hf_model, _hub(tiny_moe_dir).items()) == len(hf_model.state_dict())
    with torch.no_grad():
        assert torch.equal(hf_model(input_ids=ids).logits, before)


def test_unknown_or_incomplete_weights_are_refused(hf_model, tiny_moe_dir: Path) -> None:
    from rlec.megatron.hf_sync import hub_to_model_state, load_into_hf_model

    hub = _hub(tiny_moe_dir)
    with pytest.raises(KeyError, match="model.layers.9.self_attn.q_proj.weight: not a weight of Qwen3MoeForCausalLM"):
        hub_to_model_state(hf_model, {**hub, "model.layers.9.self_attn.q_proj.weight": torch.zeros(1)})
    partial = {k: v for k, v in hub.items() if k != "model.layers.1.mlp.experts.7.down_proj.weight"}
    with pytest.raises(KeyError, match="model.layers.1.mlp.experts: expert projection \\(7, 'down_proj'\\) missing"):
        hub_to_model_state(hf_model, partial)
    with pytest.raises(RuntimeError, match="Missing key"):
        load_into_hf_model(hf_model, {k: v for k, v in hub.items() if k != "model.norm.weight"})
