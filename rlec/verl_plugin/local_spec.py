"""Megatron's local layer spec for verl's engine on a GPU node without Transformer Engine (``RLEC_LAYER_SPEC=local``).

verl 0.9.1's Megatron engine builds its model through ``verl.models.mcore.mbridge.AutoBridge`` (``from_config(hf_config,
dtype=param_dtype)`` in ``verl/workers/engine/megatron/transformer_impl.py``), which gives mbridge's Transformer Engine
spec: without TE it fails (``TENorm`` NameError). On CPU rlec's platform plugin swaps in its local-spec bridge in fp32
(:mod:`rlec.verl_plugin.cpu`); with ``RLEC_LAYER_SPEC=local`` in every process (the launcher's environment and
``ray_kwargs.ray_init.runtime_env.env_vars``) this module does the same on CUDA, in verl's ``param_dtype`` (bf16):
:func:`rlec.verl_plugin.cpu.local_spec_bridge` (no fusions, no grouped GEMM, TE parameter names for mbridge's load and
export). ``tools/gpu_smoke.sh --offline`` uses it when the wheelhouse has no TE. Pair it with padded batches
(``use_remove_padding=false``: packed sequences need TE's attention); routing replay then is refused off the CPU
platform (``rlec.rules.moe``). Not yet run on a GPU (issue 58).
"""

from __future__ import annotations

import os
from typing import Any

import torch

__all__ = ["ENV", "LocalSpecAutoBridge", "enable_local_spec", "local_spec_requested"]

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
    from rlec.verl_plugin.cpu import cpu_requested

    return value == "local" and not cpu_requested()


class LocalSpecAutoBridge:
    """``AutoBridge`` as verl's Megatron engine sees it with ``RLEC_LAYER_SPEC=local``: the local spec in verl's dtype."""

    @staticmethod
    def from_config(hf_config: Any, dtype: Any = None, **kwargs: Any) -> Any:
        from rlec.verl_plugin.cpu import local_spec_bridge

        return local_spec_bridge(hf_config, dtype or torch.bfloat16)


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
