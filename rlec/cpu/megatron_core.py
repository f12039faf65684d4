"""Megatron-core 0.16.1's CUDA assumptions, answered on CPU: the CPU wing's Megatron shims.

megatron-core assumes a CUDA device in a handful of spots that have nothing to do with the maths
(RNG bookkeeping, side streams, ``device='cuda'`` literals, type-name assertions, collectives
gloo does not offer) and, without Apex / Transformer Engine, loads a distributed-optimizer checkpoint
wrongly. Each :class:`rlec.megatron.compat.Shim` below answers exactly one error, names it, and carries a
``needed`` probe that checks the *unpatched* library still has the problem, so a megatron-core
upgrade that fixes (or moves) the code is noticed by ``tests/megatron/test_compat.py``. ``docs/cpu.md`` lists
them with the verl-side shims (:mod:`rlec.cpu.verl_shims`) in one table.

Applied by :func:`apply_cpu_shims`: in verl's workers on the CPU platform through the ``megatron_core_cpu`` shim of
:mod:`rlec.cpu.verl_shims`, and in rlec's own Megatron processes (the converter, the update benchmark, the tests) by
:func:`rlec.megatron.parallel.init_parallel`, which imports this module only when CUDA is absent.

Rules:

- :func:`apply_cpu_shims` is a no-op when ``torch.cuda.is_available()``: nothing here ever runs on
  a GPU machine.
- Patches are scoped where the library allows it: a ``torch`` stand-in seen only by the one
  megatron module that needs it, or a wrapper around the one function. Only
  ``torch.cuda.current_device`` is patched process-wide (it is called from ~100 places).
- A shim is applied only where its probe finds the error, once per process; a replaced function is marked
  (:func:`rlec.megatron.compat.mark_patched`), so applying twice is harmless. :data:`rlec.megatron.compat.APPLIED`
  lists what was applied in this process, :data:`rlec.megatron.compat.NOT_NEEDED` what was skipped.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import types
from typing import Any, Callable, Iterator

import torch

from rlec.megatron.compat import (
    APPLIED,
    NOT_NEEDED,
    Shim,
    apply_no_te_shims,
    apply_shims,
    cuda_available,
    is_patched,
    mark_patched,
    source_has,
)

__all__ = ["SHIMS", "apply_cpu_shims", "probe_shims"]


class _TorchView(types.ModuleType):
    """``torch`` (or ``torch.cuda``) as one megatron module sees it: a few attributes replaced,
    everything else delegated to the real module."""

    def __init__(self, base: types.ModuleType, **overrides: Any) -> None:
        super().__init__(base.__name__)
        self.__dict__.update(overrides)
        self.__dict__["_base"] = base

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["_base"], name)


def _cpu_device(fn: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> torch.Tensor:
        if str(kwargs.get("device", "")).startswith("cuda"):
            kwargs["device"] = "cpu"
        return fn(*args, **kwargs)

    return wrapper


class _NoOpStream:
    """Stand-in for ``torch.cuda.Stream``/``Event`` on CPU, where every op is synchronous."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def wait_stream(self, stream: Any) -> None:
        pass

    def record_event(self, event: Any = None) -> "_NoOpStream":
        return _NoOpStream()

    def synchronize(self) -> None:
        pass

    def wait_event(self, event: Any) -> None:
        pass


_NOOP_STREAM = _NoOpStream()


def _raises(fn: Callable[[], Any]) -> bool:
    try:
        fn()
    except Exception:  # noqa: BLE001 - any failure means the problem is still there
        return True
    return False


@contextlib.contextmanager
def _cuda_type_names() -> Iterator[None]:
    """Within the block, ``t.type()`` of a CPU tensor answers ``torch.cuda.<Kind>Tensor``."""
    original = torch.Tensor.type

    def cuda_named_type(self: torch.Tensor, dtype: Any = None, non_blocking: bool = False, **kw: Any) -> Any:
        if dtype is None and not kw and self.device.type == "cpu":
            return original(self).replace("torch.", "torch.cuda.", 1)
        return original(self, dtype, non_blocking, **kw)

    torch.Tensor.type = cuda_named_type  # type: ignore[method-assign]
    try:
        yield
    finally:
        torch.Tensor.type = original  # type: ignore[method-assign]


def _with_cuda_type_names(fn: Callable[..., Any]) -> Callable[..., Any]:
    if is_patched(fn, "cuda_type_names"):
        return fn

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with _cuda_type_names():
            return fn(*args, **kwargs)

    return mark_patched(wrapper, "cuda_type_names")


# --- 1. RNG tracker ---------------------------------------------------------------------------
def _rng_apply() -> None:
    from megatron.core.tensor_parallel import random as mrandom

    def add(self: Any, name: str, seed: int) -> None:  # CudaRNGStatesTracker.add on the CPU generator
        self._is_initialized = True
        if seed in self.seeds_:
            raise Exception(f"seed {seed} already exists")
        self.seeds_.add(seed)
        if name in self.states_:
            raise Exception(f"rng state {name} already exists")
        orig = torch.get_rng_state()
        torch.manual_seed(seed)
        self.states_[name] = torch.get_rng_state()
        torch.set_rng_state(orig)

    mrandom.CudaRNGStatesTracker.add = add
    mrandom._get_cuda_rng_state = lambda *a, **k: torch.get_rng_state()
    mrandom._set_cuda_rng_state = lambda state, *a, **k: torch.set_rng_state(state)


# --- 2. current_device ------------------------------------------------------------------------
def _current_device_apply() -> None:
    torch.cuda.current_device = lambda: "cpu"  # type: ignore[assignment]


# --- 4. side streams in the alltoall dispatcher -----------------------------------------------
def _streams_apply() -> None:
    from megatron.core.transformer.moe import token_dispatcher

    cuda = _TorchView(
        torch.cuda,
        Stream=_NoOpStream,
        Event=_NoOpStream,
        current_stream=lambda *a, **k: _NOOP_STREAM,
        stream=lambda s=None: contextlib.nullcontext(),
    )
    token_dispatcher.torch = _TorchView(torch, cuda=cuda)


# --- 5. alltoall split sizes --------------------------------------------------------------------
def _splits_needed() -> bool:
    from megatron.core.transformer.moe import moe_utils

    return not isinstance(moe_utils.maybe_move_tensor_to_cpu(torch.ones(2), as_numpy=True), type(torch.ones(1).numpy()))


def _splits_apply() -> None:
    from megatron.core.transformer.moe import moe_utils, token_dispatcher

    original = moe_utils.maybe_move_tensor_to_cpu
    if is_patched(original, "alltoall_splits"):
        return

    def maybe_move_tensor_to_cpu(tensor: Any, as_numpy: bool = False, record_stream: bool = False) -> Any:
        if torch.is_tensor(tensor) and not tensor.is_cuda:
            return tensor.numpy() if as_numpy else tensor
        return original(tensor, as_numpy=as_numpy, record_stream=record_stream)

    mark_patched(maybe_move_tensor_to_cpu, "alltoall_splits")
    moe_utils.maybe_move_tensor_to_cpu = maybe_move_tensor_to_cpu
    token_dispatcher.maybe_move_tensor_to_cpu = maybe_move_tensor_to_cpu


# --- 6. torch RMSNorm under sequence parallel -----------------------------------------------------
def _norm_needed() -> bool:
    from megatron.core.transformer.torch_norm import WrappedTorchNorm

    return source_has(WrappedTorchNorm, "sequence parallel not supported by torch LayerNorm")


def _norm_apply() -> None:
    from megatron.core.transformer import torch_norm

    original_new = torch_norm.WrappedTorchNorm.__dict__["__new__"]
    if is_patched(original_new, "sequence_parallel_norm"):
        return

    def __new__(cls: type, config: Any, hidden_size: int, eps: float = 1e-5, **kwargs: Any) -> torch.nn.Module:
        sequence_parallel = bool(config.sequence_parallel)
        config.sequence_parallel = False
        try:
            norm = original_new(cls, config, hidden_size, eps, **kwargs)
        finally:
            config.sequence_parallel = sequence_parallel
        # Same contract as TE's norms: under SP each rank sees a slice of the sequence, so these
        # replicated weights get partial gradients that finalize_model_grads all-reduces over TP.
        for p in norm.parameters():
            p.sequence_parallel = sequence_parallel
        return norm

    torch_norm.WrappedTorchNorm.__new__ = staticmethod(mark_patched(__new__, "sequence_parallel_norm"))


# --- 7. uneven all-gather / reduce-scatter over gloo -----------------------------------------------
def _uneven_needed() -> bool:
    from megatron.core.tensor_parallel import mappings

    return source_has(mappings._gather_along_first_dim, "torch.distributed.all_gather(") and source_has(
        mappings._reduce_scatter_along_first_dim, "torch.distributed.reduce_scatter("
    )


def _uneven_apply() -> None:
    from megatron.core.tensor_parallel import mappings

    gather, scatter = mappings._gather_along_first_dim, mappings._reduce_scatter_along_first_dim
    if is_patched(gather, "uneven_collectives"):
        return

    def gather_along_first_dim(input_: torch.Tensor, group: Any, output_split_sizes: Any = None, use_global_buffer: bool = False) -> torch.Tensor:
        if output_split_sizes is None or group.size() == 1:
            return gather(input_, group, output_split_sizes, use_global_buffer)
        sizes = [int(s) for s in output_split_sizes]
        longest = max(sizes)
        padded = input_.new_zeros((longest, *input_.shape[1:]))
        padded[: input_.shape[0]] = input_
        out = input_.new_empty((longest * len(sizes), *input_.shape[1:]))
        torch.distributed.all_gather_into_tensor(out, padded.contiguous(), group=group)
        return torch.cat([out[i * longest : i * longest + s] for i, s in enumerate(sizes)])

    def reduce_scatter_along_first_dim(input_: torch.Tensor, group: Any, input_split_sizes: Any = None, use_global_buffer: bool = False) -> torch.Tensor:
        if input_split_sizes is None or group.size() == 1:
            return scatter(input_, group, input_split_sizes, use_global_buffer)
        total = input_.contiguous().clone()
        torch.distributed.all_reduce(total, group=group)
        return torch.split(total, [int(s) for s in input_split_sizes])[group.rank()].contiguous()

    mappings._gather_along_first_dim = mark_patched(gather_along_first_dim, "uneven_collectives")
    mappings._reduce_scatter_along_first_dim = reduce_scatter_along_first_dim


# --- 8. device='cuda' literals in the optimizer and the pipeline schedules ----------------------------
def _optim_modules() -> list[types.ModuleType]:
    from megatron.core import utils
    from megatron.core.optimizer import clip_grads, grad_scaler, optimizer
    from megatron.core.pipeline_parallel import schedules

    return [optimizer, clip_grads, grad_scaler, schedules, utils]


def _literals_needed() -> bool:
    return all(source_has(m, "device='cuda'") or source_has(m, 'device="cuda"') for m in _optim_modules())


def _literals_apply() -> None:
    view = _TorchView(torch, **{n: _cpu_device(getattr(torch, n)) for n in ("tensor", "zeros", "ones", "empty", "full")})
    for module in _optim_modules():
        module.torch = view


# --- 9. grad type assertion in clip_grads ---------------------------------------------------------------
def _clip_needed() -> bool:
    from megatron.core.optimizer import clip_grads

    return source_has(clip_grads.clip_grad_by_total_norm_fp32, "'torch.cuda.FloatTensor'")


def _clip_apply() -> None:
    from megatron.core.optimizer import clip_grads, optimizer

    wrapped = _with_cuda_type_names(clip_grads.clip_grad_by_total_norm_fp32)
    clip_grads.clip_grad_by_total_norm_fp32 = wrapped
    optimizer.clip_grad_by_total_norm_fp32 = wrapped


# --- 10. param type check in the distributed optimizer -----------------------------------------------------
def _distopt_needed() -> bool:
    from megatron.core.optimizer.distrib_optimizer import DistributedOptimizer

    return source_has(DistributedOptimizer._build_model_and_main_param_groups, "'torch.cuda.FloatTensor'")


def _distopt_apply() -> None:
    from megatron.core.optimizer.distrib_optimizer import DistributedOptimizer

    raw = DistributedOptimizer.__dict__["_build_model_and_main_param_groups"]
    kind = type(raw) if isinstance(raw, (staticmethod, classmethod)) else None
    fn = raw.__func__ if kind else raw
    wrapped = _with_cuda_type_names(fn)
    DistributedOptimizer._build_model_and_main_param_groups = kind(wrapped) if kind else wrapped


# --- 11. torch.cuda.synchronize in the dist-checkpoint writer and pipeline p2p ------------------------------
def _sync_modules() -> list[types.ModuleType]:
    from megatron.core.dist_checkpointing.strategies import async_utils, filesystem_async
    from megatron.core.pipeline_parallel import p2p_communication

    return [filesystem_async, async_utils, p2p_communication]


def _sync_needed() -> bool:
    return _raises(torch.cuda.synchronize) and any(source_has(m, "torch.cuda.synchronize()") for m in _sync_modules())


def _sync_apply() -> None:
    for module in _sync_modules():
        module.torch = _TorchView(torch, cuda=_TorchView(torch.cuda, synchronize=lambda *a, **k: None))


# --- 12. loading a distributed-optimizer checkpoint into a fresh optimizer without Apex / TE -------
def _distopt_load_needed() -> bool:
    from megatron.core.optimizer import distrib_optimizer

    return (not getattr(distrib_optimizer, "HAVE_APEX_OR_TE", True)
            and "assert len(steps) == 1" in inspect.getsource(distrib_optimizer.DistributedOptimizer.state_dict))


def _distopt_load_apply() -> None:
    from megatron.core.optimizer.distrib_optimizer import DistributedOptimizer

    sharded = DistributedOptimizer.sharded_state_dict
    if is_patched(sharded, "distributed_optimizer_load"):
        return

    @functools.wraps(sharded)
    def sharded_state_dict(self: Any, model_sharded_state_dict: Any, is_loading: bool = False, **kwargs: Any) -> Any:
        if is_loading and not self.optimizer.state:
            # what megatron does for FSDP (sharded_param_state_fsdp_dtensor): dummy states, replaced in
            # place by the load; without them the non-Apex/TE state_dict finds no 'step' to read
            self._init_optimizer_states_with_dummy_values()
        return sharded(self, model_sharded_state_dict, is_loading, **kwargs)

    DistributedOptimizer.sharded_state_dict = mark_patched(sharded_state_dict, "distributed_optimizer_load")


# --- 13. fp32 parameters: the distributed optimizer's load copies into the live parameters ---------
def _distopt_fp32_load_needed() -> bool:
    from megatron.core.optimizer.distrib_optimizer import DistributedOptimizer

    fn = DistributedOptimizer._set_main_param_and_optimizer_states
    return "dst_tensors[key].copy_(tensors[key])" in inspect.getsource(fn) and not is_patched(
        fn, "distributed_optimizer_fp32_load")


def _distopt_fp32_load_apply() -> None:
    from megatron.core.optimizer.distrib_optimizer import DistributedOptimizer

    setter = DistributedOptimizer._set_main_param_and_optimizer_states

    @functools.wraps(setter)
    def set_states(self: Any, model_param: Any, tensors: Any) -> None:
        with torch.no_grad():  # with fp32 parameters the "main param" is a view of the live parameter
            setter(self, model_param, tensors)

    DistributedOptimizer._set_main_param_and_optimizer_states = mark_patched(set_states, "distributed_optimizer_fp32_load")


# --- 14. one Adam step counter per parameter after loading a distributed-optimizer checkpoint -------
def _own_step_tensors(optimizer: Any, value: Callable[[torch.Tensor], torch.Tensor]) -> None:
    """Give every parameter's Adam state its own ``step`` tensor, ``value(current step)``, as a fresh torch Adam keeps
    them (what shims 14 and 15 do after Megatron's load, each with its own value)."""
    for state in optimizer.state.values():
        step = state.get("step")
        if isinstance(step, torch.Tensor):
            state["step"] = value(step)


def _distopt_shared_step_needed() -> bool:
    from megatron.core.optimizer import distrib_optimizer

    fn = distrib_optimizer.DistributedOptimizer.load_state_dict
    return (not getattr(distrib_optimizer, "HAVE_APEX_OR_TE", True) and not is_patched(fn, "distributed_optimizer_shared_step")
            and 's["step"] = step' in inspect.getsource(fn))


def _distopt_shared_step_apply() -> None:
    from megatron.core.optimizer.distrib_optimizer import DistributedOptimizer

    load = DistributedOptimizer.load_state_dict

    @functools.wraps(load)
    def load_state_dict(self: Any, state_dict: Any) -> Any:
        out = load(self, state_dict)
        # megatron gives every parameter's state the same 'step' tensor; torch's Adam(W) adds 1 to each
        # parameter's counter in place, so after a resume the shared one grew by the number of parameters
        # per step (bias correction of step 1 + N instead of 2): a copy each, as a fresh Adam keeps them
        _own_step_tensors(self.optimizer, torch.Tensor.clone)
        return out

    DistributedOptimizer.load_state_dict = mark_patched(load_state_dict, "distributed_optimizer_shared_step")


# --- 15. the checkpoint's Adam step counter after loading a dp-reshardable distributed-optimizer checkpoint -------
def _distopt_step_value_needed() -> bool:
    from megatron.core.optimizer import distrib_optimizer

    cls = distrib_optimizer.DistributedOptimizer
    load = cls.load_state_dict
    setter = inspect.unwrap(cls._set_main_param_and_optimizer_states)
    return (not getattr(distrib_optimizer, "HAVE_APEX_OR_TE", True) and not is_patched(load, "distributed_optimizer_step_value")
            # the per-parameter 'step' is saved as a LocalNonpersistentObject: a load hands back the live one ...
            and "if key == 'step':" in inspect.getsource(cls.sharded_param_state_dp_reshardable)
            # ... and the setter copies every state key, 'step' included, over what load_state_dict set
            and "**optim_state}" in inspect.getsource(setter))


def _distopt_step_value_apply() -> None:
    from megatron.core.optimizer.distrib_optimizer import DistributedOptimizer

    load = DistributedOptimizer.load_state_dict

    @functools.wraps(load)
    def load_state_dict(self: Any, state_dict: Any) -> Any:
        out = load(self, state_dict)
        groups = (state_dict.get("optimizer") or {}).get("param_groups", []) if isinstance(state_dict, dict) else []
        steps = {group["step"] for group in groups if group.get("step") is not None}
        if len(steps) == 1:
            # the step the checkpoint holds (megatron keeps it in param_groups for torch's Adam): the parameter state
            # load just copied the fresh optimizer's own counter (1 after the dummy init) over it; one tensor per
            # parameter, as a fresh Adam keeps them
            (step,) = steps
            _own_step_tensors(self.optimizer, lambda live: torch.tensor(float(step), dtype=live.dtype, device=live.device))
        return out

    DistributedOptimizer.load_state_dict = mark_patched(load_state_dict, "distributed_optimizer_step_value")


SHIMS: tuple[Shim, ...] = (
    Shim("rng_tracker", "AssertionError: Torch not compiled with CUDA enabled (CudaRNGStatesTracker.add / fork)",
         lambda: _raises(torch.cuda.get_rng_state), _rng_apply),
    Shim("current_device", "AssertionError: Torch not compiled with CUDA enabled (torch.cuda.current_device() as a device)",
         lambda: _raises(torch.cuda.current_device), _current_device_apply),
    Shim("dispatcher_streams", "AssertionError: Torch not compiled with CUDA enabled (torch.cuda.Stream in MoEAlltoAllTokenDispatcher)",
         lambda: _raises(torch.cuda.Stream), _streams_apply),
    Shim("alltoall_splits", "all_to_all_single: split sizes stay tensors on CPU (maybe_move_tensor_to_cpu converts CUDA tensors only)",
         _splits_needed, _splits_apply),
    Shim("sequence_parallel_norm", "AssertionError: sequence parallel not supported by torch LayerNorm",
         _norm_needed, _norm_apply),
    Shim("uneven_collectives", "RuntimeError from gloo on uneven all_gather / reduce_scatter (alltoall at TP2xEP2)",
         _uneven_needed, _uneven_apply),
    Shim("cuda_literals", "AssertionError: Torch not compiled with CUDA enabled (device='cuda' in optimizer, clip_grads, grad_scaler, schedules, utils' multi-tensor fallbacks)",
         _literals_needed, _literals_apply),
    Shim("clip_grads_type", "AssertionError: param.grad.type() == 'torch.cuda.FloatTensor' in clip_grad_by_total_norm_fp32",
         _clip_needed, _clip_apply),
    Shim("distributed_optimizer_type", "TypeError: Wrapped parameters must be one of torch.cuda.FloatTensor, ... (DistributedOptimizer)",
         _distopt_needed, _distopt_apply),
    Shim("distributed_optimizer_load", "AssertionError: assert len(steps) == 1 in DistributedOptimizer.state_dict (resuming "
         "a dist checkpoint into a fresh optimizer without Apex / TE: its Adam has no state, hence no 'step')",
         _distopt_load_needed, _distopt_load_apply),
    Shim("distributed_optimizer_fp32_load", "RuntimeError: a view of a leaf Variable that requires grad is being used in an "
         "in-place operation (_set_main_param_and_optimizer_states copies into fp32 parameters outside no_grad)",
         _distopt_fp32_load_needed, _distopt_fp32_load_apply),
    Shim("distributed_optimizer_shared_step", "a resumed run's Adam updates differ from the uninterrupted run's (no error): "
         "DistributedOptimizer.load_state_dict without Apex / TE gives every parameter's state one shared 'step' tensor, "
         "which torch's Adam(W) then advances once per parameter per step",
         _distopt_shared_step_needed, _distopt_shared_step_apply),
    Shim("distributed_optimizer_step_value", "a resumed run's Adam updates differ from the uninterrupted run's (no error): "
         "loading a dp-reshardable DistributedOptimizer checkpoint without Apex / TE leaves every parameter's Adam 'step' at the "
         "fresh optimizer's own value (1 after the dummy init of distributed_optimizer_load), not the checkpoint's: the "
         "per-parameter 'step' is saved as a LocalNonpersistentObject and _set_main_param_and_optimizer_states copies it over "
         "the value load_state_dict set from param_groups (exact only when the checkpoint was taken after one optimizer step)",
         _distopt_step_value_needed, _distopt_step_value_apply),
    Shim("cuda_synchronize", "AssertionError: Torch not compiled with CUDA enabled (torch.cuda.synchronize in the dist-checkpoint writer, pipeline p2p)",
         _sync_needed, _sync_apply),
)


def apply_cpu_shims() -> list[str]:
    """Apply every shim of :data:`SHIMS` when CUDA is absent, and the missing-TE one
    (:func:`rlec.megatron.compat.apply_no_te_shims`: no TE on a CPU machine); do nothing on a GPU machine.

    Call before building a Megatron model (``rlec.megatron.parallel.init_parallel`` does).

    Each shim is applied only when its probe (``Shim.needed``) finds the error it answers in the
    unpatched library; the others are listed in :data:`rlec.megatron.compat.NOT_NEEDED`.

    Returns:
        Names of the shims applied in this process, :data:`SHIMS`' then the missing-TE one (empty with CUDA).
    """
    if cuda_available():
        return []
    return apply_shims(SHIMS) + apply_no_te_shims()


def probe_shims() -> dict[str, bool]:
    """For each shim, whether the *unpatched* library still shows the error it answers.

    Run in a process where :func:`apply_cpu_shims` has not been called (the probes look at the
    live functions). A ``False`` means an upgrade fixed or moved the code: drop or update the shim.
    """
    decided = [shim.name for shim in SHIMS if shim.name in APPLIED or shim.name in NOT_NEEDED]
    if decided:
        raise RuntimeError(f"probe_shims must run before apply_cpu_shims (already applied or skipped: {decided})")
    return {shim.name: bool(shim.needed()) for shim in SHIMS}
