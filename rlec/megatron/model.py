"""Build the Megatron policy model for a Hugging Face Qwen3 / Qwen3-MoE folder, load and export it.

GPU path: Transformer Engine layer spec, bf16 (``Float16Module``), grouped-GEMM experts, exactly
the model verl's Megatron engine builds through mbridge. CPU path: Megatron's local layer spec,
fp32, no fusions, over gloo (see :mod:`rlec.cpu.megatron_core`). Both paths load Hugging Face
weights and export them back to Hugging Face names through mbridge (:mod:`rlec.megatron.bridge`).

Typical use (under ``torchrun``, or plainly for one process)::

    layout = ParallelLayout(tp=2, ep=2, world_size=4)
    init_parallel(layout)
    policy = build_model("path/to/Qwen3-30B-A3B", layout, wrap_ddp=True)
    for name, tensor in export_hf_weights(policy):   # every rank iterates; rank 0 gets them all
        ...
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import torch

from rlec.megatron.bridge import TENamedView, load_hf_config, make_bridge
from rlec.layout import ParallelLayout
from rlec.megatron.compat import cuda_available, model_provider, reporting_weight_conversions


@dataclass
class MegatronModel:
    """A built Megatron GPTModel (one chunk per virtual pipeline stage) with its mbridge bridge.

    Attributes:
        chunks: the model chunks as Megatron's schedules and optimizer want them (wrapped in
            Megatron DDP when built with ``wrap_ddp=True``, in ``Float16Module`` for bf16).
        bridge: the mbridge bridge (weight mapping; ``bridge.config`` is the TransformerConfig).
        hf_config: the Hugging Face config (with ``rope_theta`` set).
        hf_path: the Hugging Face folder the model was described by.
        layout: the parallel sizes.
        use_te: Transformer Engine spec (GPU) or local spec (CPU).
        dtype: parameter dtype.
    """

    chunks: list[torch.nn.Module]
    bridge: Any
    hf_config: Any
    hf_path: Path
    layout: ParallelLayout
    use_te: bool
    dtype: torch.dtype

    @property
    def config(self) -> Any:
        """The Megatron ``TransformerConfig``."""
        return self.bridge.config

    @property
    def device(self) -> torch.device:
        """Where the parameters live (``cuda:<current>`` whenever CUDA is available, whatever the layer spec; else CPU):
        the device micro-batches are sent to."""
        return next(self.chunks[0].parameters()).device

    def views(self, grads: bool = False) -> list[TENamedView]:
        """The chunks under TE parameter names, as mbridge addresses them."""
        return [TENamedView(chunk, grads=grads) for chunk in self.chunks]

    def unwrapped(self) -> list[torch.nn.Module]:
        """The bare GPTModel of each chunk (no DDP / Float16Module)."""
        return [view.module for view in self.views()]


def _check_parallel_state(layout: ParallelLayout) -> None:
    from megatron.core import parallel_state as mpu

    if not mpu.model_parallel_is_initialized():
        raise RuntimeError("Megatron's parallel state is not initialised: call rlec.megatron.parallel.init_parallel(layout) first")
    have = (
        mpu.get_tensor_model_parallel_world_size(),
        mpu.get_expert_model_parallel_world_size(),
        mpu.get_expert_tensor_parallel_world_size(),
        mpu.get_pipeline_model_parallel_world_size(),
    )
    want = (layout.tp, layout.ep, layout.expert_tp, layout.pp)
    if have != want:
        raise RuntimeError(f"parallel state has (tp, ep, etp, pp) = {have}, the layout asks for {want}")


def build_model(
    hf_path: str | Path,
    layout: ParallelLayout,
    *,
    use_te: bool | None = None,
    dtype: torch.dtype | None = None,
    load_weights: bool = True,
    wrap_ddp: bool = False,
    use_distributed_optimizer: bool = False,
    config_overrides: dict[str, Any] | None = None,
) -> MegatronModel:
    """Build the Megatron model for a Hugging Face folder and (optionally) load its weights.

    Args:
        hf_path: Hugging Face folder (``config.json`` and, to load weights, ``*.safetensors``).
        layout: parallel sizes; :func:`rlec.megatron.parallel.init_parallel` must have been
            called with the same layout.
        use_te: Transformer Engine spec; default: only when CUDA is available.
        dtype: parameter dtype; default bf16 with TE, fp32 without.
        load_weights: load the Hugging Face weights through mbridge (else random init, e.g.
            before :func:`rlec.megatron.checkpoint.load_dist_checkpoint`).
        wrap_ddp: wrap each chunk in Megatron ``DistributedDataParallel`` (needed to train).
        use_distributed_optimizer: DDP buffers laid out for the distributed optimizer.
        config_overrides: extra ``TransformerConfig`` fields passed to mbridge.

    Returns:
        The :class:`MegatronModel`.

    Raises:
        RuntimeError: parallel state missing or not matching ``layout``; TE asked for without CUDA.
        ValueError: unsupported model type, or a layout that does not divide the model.
    """
    from megatron.core import parallel_state as mpu
    from megatron.core import tensor_parallel

    hf_path = Path(hf_path)
    hf_config = load_hf_config(hf_path)
    layout.check_model(hf_config, source=str(hf_path / "config.json"))
    _check_parallel_state(layout)
    use_te = cuda_available() if use_te is None else use_te
    if use_te and not cuda_available():
        raise RuntimeError("the Transformer Engine spec needs CUDA; use use_te=False on CPU")
    dtype = dtype or (torch.bfloat16 if use_te else torch.float32)
    bridge = make_bridge(hf_config, use_te=use_te, dtype=dtype, overrides=config_overrides)
    # mbridge's own get_model() always moves to CUDA; its provider is what we need on both paths.
    provider = model_provider(bridge)
    model = provider(pre_process=mpu.is_pipeline_first_stage(), post_process=mpu.is_pipeline_last_stage())
    for param in model.parameters():
        tensor_parallel.set_defaults_if_not_set_tensor_model_parallel_attributes(param)
    # With CUDA the model lives on the GPU whatever its layer spec: NCCL, the process group there, has no CPU
    # backend, so mbridge's scatter of CPU shards failed for the local spec ("No backend type associated with
    # device type cpu", measured on an H200, 2026-12-04)
    on_gpu = cuda_available()
    if on_gpu:
        model.cuda(torch.cuda.current_device())
    policy = MegatronModel([model], bridge, hf_config, hf_path, layout, use_te, dtype)
    if load_weights:
        load_hf_weights(policy, hf_path)
    if on_gpu and dtype in (torch.bfloat16, torch.float16):  # as Megatron's get_model: half chunks cast their inputs
        from megatron.core.transformer.module import Float16Module

        policy.chunks = [Float16Module(bridge.config, chunk) for chunk in policy.chunks]
    if wrap_ddp:
        from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig

        ddp_config = DistributedDataParallelConfig(
            grad_reduce_in_fp32=True, use_distributed_optimizer=use_distributed_optimizer, overlap_grad_reduce=False
        )
        policy.chunks = [
            DistributedDataParallel(config=bridge.config, ddp_config=ddp_config, module=chunk) for chunk in policy.chunks
        ]
        for chunk in policy.chunks:
            chunk.broadcast_params()
    return policy


@torch.no_grad()
def load_hf_weights(policy: MegatronModel, hf_path: str | Path, progress: Callable[[str], None] | None = None) -> None:
    """Copy Hugging Face safetensors weights into the model through mbridge (all ranks call).

    Args:
        policy: the model.
        hf_path: the Hugging Face folder.
        progress: called with each Megatron parameter name as this rank converts it (ranks
            that receive their shard from a peer report nothing).

    Raises:
        FileNotFoundError: no ``*.safetensors`` in ``hf_path``.
        KeyError: a weight mbridge expects is absent from the safetensors (named by mbridge).
    """
    hf_path = Path(hf_path)
    if not any(hf_path.glob("*.safetensors")):
        raise FileNotFoundError(f"{hf_path}: no *.safetensors weights found")
    with reporting_weight_conversions(policy.bridge, progress):
        policy.bridge.load_weights(policy.views(), str(hf_path), memory_efficient=True)


def export_hf_weights(policy: MegatronModel, grads: bool = False) -> Iterator[tuple[str, torch.Tensor]]:
    """Yield ``(hf_name, full tensor)`` for every Hugging Face weight, through mbridge.

    Every rank must iterate the generator to the end (it runs TP/EP/PP gathers); each rank
    receives the full, unsharded tensors. Use this for the weight sync to a Hugging Face rollout
    model (``hf_model.load_state_dict(dict(export_hf_weights(policy)))``) or to compare weights.

    Args:
        policy: the model.
        grads: export parameter gradients (``main_grad`` after a backward) under the same names,
            instead of weights.

    Yields:
        ``(name, tensor)`` in Hugging Face naming, e.g. ``model.layers.0.mlp.experts.3.up_proj.weight``.
    """
    yield from policy.bridge.export_weights(policy.views(grads=grads))
