"""The mbridge adapter: Hugging Face Qwen3 / Qwen3-MoE <-> Megatron-core, on GPU and on CPU.

mbridge 0.15.1 owns the weight mapping (QKV interleaving per KV group, gate/up fusion, expert
and tensor-parallel splits, EP renumbering). This module only adds what mbridge lacks here:

1. transformers 5 keeps RoPE's base in ``config.rope_parameters["rope_theta"]``; mbridge reads
   ``config.rope_theta``. :func:`load_hf_config` sets the attribute as verl's engine does
   (``verl.utils.megatron_utils.get_hf_rope_theta``); :func:`rope_theta` mirrors that helper
   because importing verl costs ~3 s of CPU per process (measured), and a test checks both agree.
2. CPU path (no Transformer Engine): mbridge builds the TE layer spec. :func:`make_bridge` swaps
   in Megatron's local spec (torch RMSNorm, ``SequentialMLP`` experts), fp32 and no fusions, and
   fixes one key of that spec: megatron's local spec maps ``pre_mlp_layernorm.`` to the fused
   TE name ``mlp.linear_fc1.layer_norm_`` for *every* layer, but in the TE spec an MoE layer
   keeps a separate ``pre_mlp_layernorm`` (only a dense MLP fuses it). Without the fix a dist
   checkpoint written on CPU would not load into verl's TE model.
3. mbridge addresses parameters by their TE names. :class:`TENamedView` shows a local-spec
   model to mbridge under those names (``input_layernorm.weight`` ->
   ``self_attention.linear_qkv.layer_norm_weight``, dense ``pre_mlp_layernorm.weight`` ->
   ``mlp.linear_fc1.layer_norm_weight``, ``experts.local_experts.{j}.linear_fc1.weight`` ->
   ``experts.linear_fc1.weight{j}``); mbridge then renumbers experts across EP ranks itself.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Iterator

import torch

from rlec.megatron.compat import use_layer_spec
from rlec.models import SUPPORTED_MODEL_TYPES, read_model_config

# Config overrides for the CPU (local-spec) model: fusions and TE-only features off, weights
# created on CPU. Everything else (router, top-k, norms, RoPE) comes from mbridge unchanged.
CPU_CONFIG_OVERRIDES: dict[str, Any] = {
    "persist_layer_norm": False,
    "bias_activation_fusion": False,
    "bias_dropout_fusion": False,
    "masked_softmax_fusion": False,
    "gradient_accumulation_fusion": False,
    "apply_rope_fusion": False,
    "moe_grouped_gemm": False,
    "moe_permute_fusion": False,
    "use_cpu_initialization": True,
}

_EXPERT = re.compile(r"^(.*\.mlp\.experts)\.local_experts\.(\d+)\.(linear_fc[12])\.(weight|bias)$")
_LAYER = re.compile(r"^decoder\.layers\.(\d+)\.")


def load_hf_config(hf_path: str | Path) -> Any:
    """Read a Hugging Face folder's config, check the model type, and add ``rope_theta``.

    Args:
        hf_path: local folder with ``config.json``.

    Returns:
        The ``transformers`` config, with ``rope_theta`` set as an attribute.

    Raises:
        FileNotFoundError: ``config.json`` is missing.
        ValueError: the file is not valid JSON, or ``model_type`` is not one of
            :data:`rlec.models.SUPPORTED_MODEL_TYPES`.
    """
    from transformers import AutoConfig

    path = Path(hf_path)
    read_model_config(path, model_types=SUPPORTED_MODEL_TYPES)
    try:
        config = AutoConfig.from_pretrained(str(path), local_files_only=True)
    except (ValueError, OSError) as exc:
        raise ValueError(f"{path / 'config.json'}: cannot be read as a transformers config: {exc}") from exc
    config.rope_theta = rope_theta(config)
    return config


def rope_theta(config: Any) -> float:
    """RoPE base of a transformers config: ``rope_theta`` (transformers 4) or
    ``rope_parameters["rope_theta"]`` (transformers 5), as ``verl.utils.megatron_utils.get_hf_rope_theta``.

    Raises:
        AttributeError: the config has neither.
    """
    theta = getattr(config, "rope_theta", None)
    if theta is not None:
        return float(theta)
    params = getattr(config, "rope_parameters", None) or {}
    if "rope_theta" in params:
        return float(params["rope_theta"])
    for value in params.values():
        if isinstance(value, dict) and "rope_theta" in value:
            return float(value["rope_theta"])
    raise AttributeError(f"{type(config).__name__} has neither rope_theta nor rope_parameters['rope_theta']")


def _local_layer_spec(bridge: Any, vp_stage: int | None = None) -> Any:
    """Megatron's local (non-TE) decoder block spec with MoE layers' checkpoint keys fixed."""
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_decoder_block_spec

    block = get_gpt_decoder_block_spec(bridge.config, use_transformer_engine=False, normalization="RMSNorm", vp_stage=vp_stage)
    for spec in block.layer_specs:
        mlp = spec.submodules.mlp
        is_moe = getattr(mlp, "module", None) is not None and mlp.module.__name__ == "MoELayer"
        if is_moe:
            keys_map = dict(spec.submodules.sharded_state_dict_keys_map)
            keys_map.pop("pre_mlp_layernorm.", None)
            spec.submodules.sharded_state_dict_keys_map = keys_map
    return block


def make_bridge(hf_config: Any, *, use_te: bool, dtype: torch.dtype, overrides: dict[str, Any] | None = None) -> Any:
    """An mbridge bridge for ``hf_config`` on the GPU (TE) or CPU (local spec) path.

    Must be called after :func:`rlec.megatron.parallel.init_parallel` (mbridge reads the
    parallel sizes from Megatron's parallel state).

    Args:
        hf_config: from :func:`load_hf_config`.
        use_te: Transformer Engine layer spec (GPU); ``False`` builds Megatron's local spec.
        dtype: parameter dtype (``torch.bfloat16`` on GPU, ``torch.float32`` on CPU).
        overrides: extra ``TransformerConfig`` fields (e.g. recompute or router settings).

    Returns:
        The bridge; ``bridge.config`` is the ``TransformerConfig`` the model is built with.

    Raises:
        ValueError: ``hf_config.model_type`` has no mbridge bridge.
    """
    from mbridge import AutoBridge

    try:
        bridge = AutoBridge.from_config(hf_config, dtype=dtype)
    except (KeyError, ValueError) as exc:
        raise ValueError(f"mbridge has no bridge for model_type {hf_config.model_type!r}: {exc}") from exc
    extra = dict(overrides or {})
    if not use_te:
        extra = {**CPU_CONFIG_OVERRIDES, **extra}
        use_layer_spec(bridge, lambda vp_stage=None: _local_layer_spec(bridge, vp_stage))
    if extra:
        bridge.set_extra_args(**extra)
    return bridge


def _unwrap(model: torch.nn.Module) -> torch.nn.Module:
    while hasattr(model, "module") and not hasattr(model, "decoder"):
        model = model.module
    return model


class TENamedView:
    """A Megatron GPTModel shown under Transformer Engine parameter names, for mbridge.

    mbridge's ``load_weights`` / ``export_weights`` read ``state_dict()``, ``named_parameters()``
    and ``decoder.layers[i].layer_number``; this view answers those with TE names and the very
    same tensors, so copying into ``state_dict()[name]`` writes the model's parameters. For a TE
    model the view is the identity.

    Args:
        model: a GPTModel, possibly wrapped (DDP, Float16Module).
        grads: show each parameter's gradient (``main_grad`` under Megatron DDP, else ``grad``)
            instead of its value, with the tensor-parallel attributes copied, so mbridge's export
            gathers gradients across TP/EP exactly as it gathers weights.
    """

    def __init__(self, model: torch.nn.Module, grads: bool = False) -> None:
        self.module = _unwrap(model)
        self.decoder = getattr(self.module, "decoder", None)
        self._grads = grads
        self._moe_layers = set()
        if self.decoder is not None:
            for i, layer in enumerate(self.decoder.layers):
                if hasattr(layer.mlp, "router"):
                    self._moe_layers.add(i)
        self._state: dict[str, torch.Tensor] | None = None

    def te_name(self, name: str) -> str:
        """TE form of one local-spec parameter name (identity for names TE shares)."""
        m = _EXPERT.match(name)
        if m:
            return f"{m.group(1)}.{m.group(3)}.{m.group(4)}{m.group(2)}"
        m = _LAYER.match(name)
        if m:
            rest = name[m.end():]
            if rest == "input_layernorm.weight":
                return f"{m.group(0)}self_attention.linear_qkv.layer_norm_weight"
            if rest == "pre_mlp_layernorm.weight" and int(m.group(1)) not in self._moe_layers:
                return f"{m.group(0)}mlp.linear_fc1.layer_norm_weight"
        return name

    def _tensor(self, param: torch.nn.Parameter) -> torch.Tensor:
        if not self._grads:
            return param
        from megatron.core import tensor_parallel

        grad = getattr(param, "main_grad", None)
        grad = param.grad if grad is None else grad
        if grad is None:
            grad = torch.zeros_like(param)
        grad = grad.detach().clone().view_as(param)
        tensor_parallel.copy_tensor_model_parallel_attributes(grad, param)
        return grad

    def named_parameters(self) -> Iterator[tuple[str, torch.Tensor]]:
        for name, param in self.module.named_parameters():
            yield self.te_name(name), self._tensor(param)

    def state_dict(self) -> dict[str, torch.Tensor]:
        if self._state is None:
            self._state = {self.te_name(name): value for name, value in self.module.state_dict().items()}
        return self._state
