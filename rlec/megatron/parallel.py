"""Megatron process-group set-up for a parallel layout (TP / EP / ETP / PP), on gloo or NCCL.

Also the one home of rank helpers (:func:`rank`, :func:`barrier`,
:func:`broadcast_object`, data-parallel rank and size). The layout is :class:`rlec.layout.ParallelLayout`, the one layout class of rlec (also
importable here and as ``rlec.megatron.ParallelLayout``); its rules
(:meth:`~rlec.layout.ParallelLayout.check_model`) reject a layout that does not fit a
Hugging Face config *before* any heavy work, with the setting and the numbers involved.
:func:`init_parallel` starts ``torch.distributed`` (from torchrun's environment, or as a
one-process world when launched plainly), applies the CPU shims when CUDA is absent and
initialises ``megatron.core.parallel_state``.
"""

from __future__ import annotations

import datetime
import os
from typing import Any

import torch

from rlec.layout import ParallelLayout

__all__ = ["ParallelLayout", "barrier", "broadcast_object", "data_parallel_rank_and_size", "destroy_parallel",
           "init_distributed", "init_parallel", "rank", "sequence_parallel_gather",
           "sequence_parallel_slice"]


def init_distributed(world_size: int | None = None, backend: str | None = None, timeout_s: int = 600) -> None:
    """Start ``torch.distributed`` once: torchrun's environment, or a one-process world.

    The one-process world (no ``WORLD_SIZE`` in the environment) meets at an in-memory store
    (``torch.distributed.HashStore``): no TCP port, so nothing another process does can collide
    with it. (It took a port "free a moment ago" for ``MASTER_PORT``; under load another process
    took it first and the store failed with EADDRINUSE.) Several processes on one node: start
    them with ``torchrun --standalone``, whose agent binds port 0 and hands its store to the
    workers (no free-port guess either).

    Args:
        world_size: expected number of processes (checked against ``WORLD_SIZE``); ``None`` skips.
        backend: ``"nccl"`` with CUDA, else ``"gloo"`` when ``None``.
        timeout_s: collective timeout in seconds.

    Raises:
        ValueError: the launched world size differs from ``world_size`` (e.g. ``--tp 2`` without
            ``torchrun --nproc_per_node 2``).
    """
    if not torch.distributed.is_initialized():
        rendezvous: dict[str, Any] = {}  # torchrun's environment (env://)
        if "WORLD_SIZE" not in os.environ:
            os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1")
            rendezvous = {"store": torch.distributed.HashStore(), "rank": 0, "world_size": 1}
        launched = int(os.environ["WORLD_SIZE"])
        if world_size is not None and launched != world_size:
            raise ValueError(
                f"the layout needs {world_size} processes but {launched} were launched: "
                f"run with `torchrun --nproc_per_node {world_size} ...`"
            )
        backend = backend or ("nccl" if torch.cuda.is_available() else "gloo")
        if backend == "nccl":
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        torch.distributed.init_process_group(backend, timeout=datetime.timedelta(seconds=timeout_s), **rendezvous)
    elif world_size is not None and torch.distributed.get_world_size() != world_size:
        raise ValueError(f"the layout needs {world_size} processes, torch.distributed has {torch.distributed.get_world_size()}")


def init_parallel(layout: ParallelLayout, seed: int = 1234, backend: str | None = None) -> None:
    """Initialise torch.distributed and Megatron's parallel state for ``layout``.

    Applies the CPU wing's Megatron shims (:func:`rlec.cpu.megatron_core.apply_cpu_shims`, imported only when CUDA is
    absent) and the missing-TE one (:func:`rlec.megatron.compat.apply_no_te_shims`), then
    ``parallel_state.initialize_model_parallel`` and Megatron's model-parallel RNG seeds.
    Re-initialising with another layout first destroys the previous parallel state.

    Args:
        layout: the sizes; its world size must equal the launched one.
        seed: base seed of the tensor/expert-parallel RNG streams (and the CPU generator).
        backend: ``"gloo"`` or ``"nccl"``; ``None`` picks NCCL with CUDA, gloo without.

    Raises:
        ValueError: the layout is inconsistent or does not match the launched world size.
    """
    from megatron.core import parallel_state as mpu
    from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed

    from rlec.megatron.compat import apply_no_te_shims, cuda_available

    layout.check()
    if not cuda_available():  # the one place rlec's own Megatron processes load the CPU wing (pyproject.toml's contract)
        from rlec.cpu.megatron_core import apply_cpu_shims

        apply_cpu_shims()
    apply_no_te_shims()  # a GPU node without Transformer Engine: megatron's MoE router GEMM (local spec)
    init_distributed(layout.world, backend)
    if mpu.model_parallel_is_initialized():
        mpu.destroy_model_parallel()
    mpu.initialize_model_parallel(
        tensor_model_parallel_size=layout.tp,
        pipeline_model_parallel_size=layout.pp,
        expert_model_parallel_size=layout.ep,
        expert_tensor_parallel_size=layout.expert_tp,
        context_parallel_size=layout.cp,
    )
    torch.manual_seed(seed)
    model_parallel_cuda_manual_seed(seed)


def destroy_parallel(process_group: bool = True) -> None:
    """Tear down Megatron's parallel state and, unless ``process_group=False``, the default
    process group (idempotent). Keep the process group to call :func:`init_parallel` again with
    another layout in the same processes."""
    if not torch.distributed.is_initialized():
        return  # Megatron's parallel state cannot exist without a process group
    from megatron.core import parallel_state as mpu

    if mpu.model_parallel_is_initialized():
        mpu.destroy_model_parallel()
    if process_group and torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


def rank() -> int:
    """Global rank (0 before torch.distributed is started, or in a single process)."""
    if torch.distributed.is_initialized():
        return torch.distributed.get_rank()
    return int(os.environ.get("RANK", "0"))


def barrier() -> None:
    """Wait for every rank (a no-op without torch.distributed)."""
    if torch.distributed.is_initialized():
        torch.distributed.barrier()


def broadcast_object(obj: Any, src: int = 0) -> Any:
    """``obj`` as rank ``src`` holds it, on every rank (pickled over the default process group).

    Without torch.distributed, or with one process, ``obj`` is returned as is.
    """
    if not torch.distributed.is_initialized() or torch.distributed.get_world_size() == 1:
        return obj
    box = [obj]
    torch.distributed.broadcast_object_list(box, src=src)
    return box[0]


def data_parallel_rank_and_size() -> tuple[int, int]:
    """This rank's data-parallel index and the data-parallel size (Megatron's parallel state)."""
    from megatron.core import parallel_state as mpu

    return mpu.get_data_parallel_rank(), mpu.get_data_parallel_world_size()


def sequence_parallel_slice(rows: torch.Tensor) -> torch.Tensor:
    """This TP rank's slice of ``rows`` along dim 0 (Megatron's sequence-parallel split of ``(seq * batch, ...)``).

    ``megatron.core.tensor_parallel.scatter_to_sequence_parallel_region``: dim 0 must divide by the TP size.
    """
    from megatron.core.tensor_parallel import scatter_to_sequence_parallel_region

    return scatter_to_sequence_parallel_region(rows)


def sequence_parallel_gather(rows: torch.Tensor) -> torch.Tensor:
    """Every TP rank's ``rows`` concatenated along dim 0 (the inverse of :func:`sequence_parallel_slice`)."""
    from megatron.core.tensor_parallel import gather_from_sequence_parallel_region

    return gather_from_sequence_parallel_region(rows.contiguous(), tensor_parallel_output_grad=False)
