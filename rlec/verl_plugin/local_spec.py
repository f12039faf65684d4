"""Megatron's local layer spec for verl's engine on a GPU node without Transformer Engine (``RLEC_LAYER_SPEC=local``).

verl 0.9.1's Megatron engine builds its model through ``verl.models.mcore.mbridge.AutoBridge`` (``from_config(hf_config,
dtype=param_dtype)`` in ``verl/workers/engine/megatron/transformer_impl.py``), which gives mbridge's Transformer Engine
spec: without TE it fails (``TENorm`` NameError). On CPU rlec's CPU wing swaps in the same local-spec bridge in fp32
(:mod:`rlec.cpu.verl_shims`); with ``RLEC_LAYER_SPEC=local`` in every process (the launcher's environment and
``ray_kwargs.ray_init.runtime_env.env_vars``) this module does the same on CUDA, in verl's ``param_dtype`` (bf16):
:func:`local_spec_bridge` (no fusions, no grouped GEMM, TE parameter names for mbridge's load and
export). ``tools/gpu_smoke.sh --offline`` uses it when the wheelhouse has no TE. Pair it with padded batches
(``use_remove_padding=false``: packed sequences need TE's attention); routing replay then is refused off the CPU
platform (``rlec.rules.moe``). Not yet run on a GPU (issue 58).
"""

from __future__ import annotations

import os
from typing import Any

import torch

__all__ = ["ENV", "LocalSpecAutoBridge", "enable_local_spec", "local_spec_bridge", "local_spec_requested"]

ENV = "RLEC_LAYER_SPEC"
TRANSFORMER_IMPL = "verl.workers.engine.megatron.transformer_impl"


def local_spec_requested() -> bool:
    """``RLEC_LAYER_SPEC=local`` is set and this is not the CPU platform (which has its own local-spec bridge).

    Raises:
        ValueError: ``RLEC_LAYER_SPEC`` set to anything but ``local`` or empty.
    """
    value = os.environ.get(ENV, "")
    if value not in ("", "local"):
        raise ValueError(f"{ENV}={value!r}: expected 'local' (Megatron's local layer spec on a GPU node without TE) or unset")
    from rlec.verl_plugin.cpu_interface import cpu_requested

    return value == "local" and not cpu_requested()


class LocalSpecAutoBridge:
    """``AutoBridge`` as verl's Megatron engine sees it with ``RLEC_LAYER_SPEC=local``: the local spec in verl's dtype."""

    @staticmethod
    def from_config(hf_config: Any, dtype: Any = None, **kwargs: Any) -> Any:
        return local_spec_bridge(hf_config, dtype or torch.bfloat16)


def local_spec_bridge(hf_config: Any, dtype: torch.dtype) -> Any:
    """rlec's local-spec mbridge bridge as verl's engine uses it: no fusions whatever verl's overrides ask, TE parameter
    names for mbridge's load and export (:class:`LocalSpecAutoBridge` on a GPU node without Transformer Engine, in
    ``dtype``; the CPU wing's bridge, :mod:`rlec.cpu.verl_shims` ``mbridge_cpu_spec``, in fp32)."""
    from rlec.megatron.bridge import TENamedView, make_bridge, rope_theta

    hf_config.rope_theta = rope_theta(hf_config)
    bridge = make_bridge(hf_config, use_te=False, dtype=dtype)
    set_extra = bridge.set_extra_args
    load, export = bridge.load_weights, bridge.export_weights

    def set_extra_args(**extra: Any) -> None:
        from rlec.megatron.bridge import CPU_CONFIG_OVERRIDES

        # verl passes the layout's overrides (grouped GEMM, permute fusion, ...): the local spec's win
        set_extra(**{**extra, **CPU_CONFIG_OVERRIDES})

    def views(models: Any) -> list[Any]:
        return [TENamedView(m) for m in (models if isinstance(models, (list, tuple)) else [models])]

    bridge.set_extra_args = set_extra_args
    bridge.load_weights = lambda models, path, *a, **k: load(views(models), path, *a, **k)
    bridge.export_weights = lambda models, *a, **k: export(views(models), *a, **k)
    return bridge


def _apply(_module: Any = None) -> None:
    import verl.models.mcore.mbridge as verl_mbridge

    verl_mbridge.AutoBridge = LocalSpecAutoBridge


def enable_local_spec() -> bool:
    """Swap verl's mbridge ``AutoBridge`` for :class:`LocalSpecAutoBridge` when verl's engine module is imported
    (at once where it is loaded), if :func:`local_spec_requested`. Returns whether it was requested."""
    if not local_spec_requested():
        return False
    import wrapt

    wrapt.register_post_import_hook(_apply, TRANSFORMER_IMPL)
    return True
