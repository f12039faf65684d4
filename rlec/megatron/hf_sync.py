"""Hub-layout weights (what mbridge exports) <-> a live ``transformers`` model's parameters.

mbridge exports Hugging Face *hub* names, one tensor per expert projection
(``model.layers.0.mlp.experts.3.gate_proj.weight``). transformers 5 keeps Qwen3-MoE experts fused
in memory (``model.layers.0.mlp.experts.gate_up_proj``: ``(experts, 2 * moe_intermediate,
hidden)``, gate rows first; ``down_proj``: ``(experts, hidden, moe_intermediate)``) and converts
at load/save time. :func:`load_into_hf_model` is the weight sync Megatron -> HF rollout model;
the reverse direction uses transformers' own ``revert_weight_conversion`` (what
``save_pretrained`` applies), and a test checks the two agree.
"""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Any, Iterable, Mapping

import torch

_HUB_EXPERT = re.compile(r"^(.*\.mlp\.experts)\.(\d+)\.(gate_proj|up_proj|down_proj)\.weight$")


def hub_to_model_state(hf_model: torch.nn.Module, hub: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Rename/stack hub-layout tensors into ``hf_model.state_dict()`` names.

    Args:
        hf_model: the live transformers model (its parameter layout decides the stacking).
        hub: ``{hub_name: tensor}``, e.g. from :func:`rlec.megatron.model.export_hf_weights`.

    Returns:
        ``{model_name: tensor}``.

    Raises:
        KeyError: a name that is neither a model key nor a per-expert projection of a fused one,
            or an expert missing from a layer.
    """
    model_state = hf_model.state_dict()
    out: dict[str, torch.Tensor] = {}
    experts: dict[str, dict[tuple[int, str], torch.Tensor]] = defaultdict(dict)
    for name, tensor in hub.items():
        if name in model_state:
            out[name] = tensor
            continue
        m = _HUB_EXPERT.match(name)
        if m and f"{m.group(1)}.gate_up_proj" in model_state:
            experts[m.group(1)][(int(m.group(2)), m.group(3))] = tensor
            continue
        raise KeyError(f"{name}: not a weight of {type(hf_model).__name__}")
    for prefix, parts in experts.items():
        n = model_state[f"{prefix}.gate_up_proj"].shape[0]
        try:
            out[f"{prefix}.gate_up_proj"] = torch.stack([torch.cat([parts[(e, "gate_proj")], parts[(e, "up_proj")]]) for e in range(n)])
            out[f"{prefix}.down_proj"] = torch.stack([parts[(e, "down_proj")] for e in range(n)])
        except KeyError as exc:
            raise KeyError(f"{prefix}: expert projection {exc.args[0]} missing from the exported weights") from exc
    return out


@torch.no_grad()
def load_into_hf_model(hf_model: torch.nn.Module, hub_weights: Iterable[tuple[str, torch.Tensor]] | Mapping[str, torch.Tensor]) -> int:
    """Copy hub-layout weights into a live transformers model in place (strict: every weight).

    Args:
        hf_model: e.g. the rollout model of the CPU rollout ``rlec_hf``.
        hub_weights: ``(name, tensor)`` pairs or a dict, e.g. ``export_hf_weights(policy)``.

    Returns:
        Number of model tensors written.

    Raises:
        KeyError: unknown names (see :func:`hub_to_model_state`).
        RuntimeError: a model weight not provided, or a shape mismatch (from ``load_state_dict``).
    """
    hub = dict(hub_weights.items() if isinstance(hub_weights, Mapping) else hub_weights)
    state = hub_to_model_state(hf_model, hub)
    tied = "lm_head.weight" not in state and bool(getattr(hf_model.config, "tie_word_embeddings", False))
    hf_model.load_state_dict(state, strict=not tied)
    return len(state)


def model_to_hub_state(hf_model: Any, state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Model-layout tensors (parameters or their gradients) -> hub names, via transformers."""
    from transformers.core_model_loading import revert_weight_conversion

    return revert_weight_conversion(hf_model, dict(state))
