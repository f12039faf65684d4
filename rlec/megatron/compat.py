"""Every workaround for a third-party private API or a missing CUDA device, in one place.

Five kinds, each with the error or gap it answers and a probe that the unpatched library
still has it (tested in ``tests/megatron/test_compat.py``, so an upgrade that fixes or moves the
code shows):

1. CPU shims for megatron-core 0.16.1 (:data:`SHIMS`, :func:`apply_cpu_shims`), below;
2. the in-process results queue of megatron's synchronous checkpoint writer
   (:func:`in_process_checkpoint_results`, scoped to one save);
3. mbridge 0.15.1's private ``Bridge`` methods rlec needs (:func:`use_layer_spec`,
   :func:`model_provider`, :func:`reporting_weight_conversions`) and, for verl's engine on CPU, its
   ``get_model``'s unconditional ``.cuda()`` (:func:`mbridge_get_model_cuda_apply`; verl-side CPU
   shims are in :mod:`rlec.verl_plugin.cpu`);
4. megatron's forked checkpoint writers, tied to their parent (:func:`writers_die_with_parent`).
5. Ray's fixed 30 s wait for its local node on a loaded machine: ``ray.init`` started again
   (:func:`ray_start_retried`, probe :func:`ray_start_timeout_needed`).

megatron-core assumes a CUDA device in a handful of spots that have nothing to do with the maths
(RNG bookkeeping, side streams, ``device='cuda'`` literals, type-name assertions, collectives
gloo does not offer). Each :class:`Shim` below answers exactly one error, names it, and carries a
``needed`` probe that checks the *unpatched* library still has the problem, so a megatron-core
upgrade that fixes (or moves) the code is noticed by ``tests/megatron/test_compat.py``.

Rules:

- :func:`apply_cpu_shims` is a no-op when ``torch.cuda.is_available()``: nothing here ever runs on
  a GPU machine.
- Patches are scoped where the library allows it: a ``torch`` stand-in seen only by the one
  megatron module that needs it, or a wrapper around the one function. Only
  ``torch.cuda.current_device`` is patched process-wide (it is called from ~100 places).
- A shim is applied only where its probe finds the error; applying twice is harmless.
  :data:`APPLIED` lists what was applied in this process, :data:`NOT_NEEDED` what was skipped.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import inspect
import multiprocessing
import os
import signal
import sys
import types
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import torch

APPLIED: list[str] = []
NOT_NEEDED: list[str] = []


@dataclass(frozen=True)
class Shim:
    """One workaround: the error it answers, a probe on the unpatched library, and the patch."""

    name: str
    error: str
    needed: Callable[[], bool]
    apply: Callable[[], None]


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


def _source_has(obj: Any, text: str) -> bool:
    return text in inspect.getsource(obj)


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
    if getattr(fn, "_rlec_cuda_type_names", False):
        return fn

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with _cuda_type_names():
            return fn(*args, **kwargs)

    wrapper._rlec_cuda_type_names = True  # type: ignore[attr-defined]
    return wrapper


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


# --- 3. te_general_gemm -----------------------------------------------------------------------
def _te_gemm_needed() -> bool:
    from megatron.core.transformer.moe import moe_utils

    return "te_general_gemm" not in vars(moe_utils) and _source_has(moe_utils, "te_general_gemm is not None")


def _te_gemm_apply() -> None:
    from megatron.core.transformer.moe import moe_utils

    moe_utils.te_general_gemm = None


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
    if getattr(original, "_rlec", False):
        return

    def maybe_move_tensor_to_cpu(tensor: Any, as_numpy: bool = False, record_stream: bool = False) -> Any:
        if torch.is_tensor(tensor) and not tensor.is_cuda:
            return tensor.numpy() if as_numpy else tensor
        return original(tensor, as_numpy=as_numpy, record_stream=record_stream)

    maybe_move_tensor_to_cpu._rlec = True  # type: ignore[attr-defined]
    moe_utils.maybe_move_tensor_to_cpu = maybe_move_tensor_to_cpu
    token_dispatcher.maybe_move_tensor_to_cpu = maybe_move_tensor_to_cpu


# --- 6. torch RMSNorm under sequence parallel -----------------------------------------------------
def _norm_needed() -> bool:
    from megatron.core.transformer.torch_norm import WrappedTorchNorm

    return _source_has(WrappedTorchNorm, "sequence parallel not supported by torch LayerNorm")


def _norm_apply() -> None:
    from megatron.core.transformer import torch_norm

    original_new = torch_norm.WrappedTorchNorm.__dict__["__new__"]
    if getattr(original_new, "_rlec", False):
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

    __new__._rlec = True  # type: ignore[attr-defined]
    torch_norm.WrappedTorchNorm.__new__ = staticmethod(__new__)


# --- 7. uneven all-gather / reduce-scatter over gloo -----------------------------------------------
def _uneven_needed() -> bool:
    from megatron.core.tensor_parallel import mappings

    return _source_has(mappings._gather_along_first_dim, "torch.distributed.all_gather(") and _source_has(
        mappings._reduce_scatter_along_first_dim, "torch.distributed.reduce_scatter("
    )


def _uneven_apply() -> None:
    from megatron.core.tensor_parallel import mappings

    gather, scatter = mappings._gather_along_first_dim, mappings._reduce_scatter_along_first_dim
    if getattr(gather, "_rlec", False):
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

    gather_along_first_dim._rlec = True  # type: ignore[attr-defined]
    mappings._gather_along_first_dim = gather_along_first_dim
    mappings._reduce_scatter_along_first_dim = reduce_scatter_along_first_dim


# --- 8. device='cuda' literals in the optimizer and the pipeline schedules ----------------------------
def _optim_modules() -> list[types.ModuleType]:
    from megatron.core import utils
    from megatron.core.optimizer import clip_grads, grad_scaler, optimizer
    from megatron.core.pipeline_parallel import schedules

    return [optimizer, clip_grads, grad_scaler, schedules, utils]


def _literals_needed() -> bool:
    return all(_source_has(m, "device='cuda'") or _source_has(m, 'device="cuda"') for m in _optim_modules())


def _literals_apply() -> None:
    view = _TorchView(torch, **{n: _cpu_device(getattr(torch, n)) for n in ("tensor", "zeros", "ones", "empty", "full")})
    for module in _optim_modules():
        module.torch = view


# --- 9. grad type assertion in clip_grads ---------------------------------------------------------------
def _clip_needed() -> bool:
    from megatron.core.optimizer import clip_grads

    return _source_has(clip_grads.clip_grad_by_total_norm_fp32, "'torch.cuda.FloatTensor'")


def _clip_apply() -> None:
    from megatron.core.optimizer import clip_grads, optimizer

    wrapped = _with_cuda_type_names(clip_grads.clip_grad_by_total_norm_fp32)
    clip_grads.clip_grad_by_total_norm_fp32 = wrapped
    optimizer.clip_grad_by_total_norm_fp32 = wrapped


# --- 10. param type check in the distributed optimizer -----------------------------------------------------
def _distopt_needed() -> bool:
    from megatron.core.optimizer.distrib_optimizer import DistributedOptimizer

    return _source_has(DistributedOptimizer._build_model_and_main_param_groups, "'torch.cuda.FloatTensor'")


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
    return _raises(torch.cuda.synchronize) and any(_source_has(m, "torch.cuda.synchronize()") for m in _sync_modules())


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
    if getattr(sharded, "_rlec_cpu", False):
        return

    @functools.wraps(sharded)
    def sharded_state_dict(self: Any, model_sharded_state_dict: Any, is_loading: bool = False, **kwargs: Any) -> Any:
        if is_loading and not self.optimizer.state:
            # what megatron does for FSDP (sharded_param_state_fsdp_dtensor): dummy states, replaced in
            # place by the load; without them the non-Apex/TE state_dict finds no 'step' to read
            self._init_optimizer_states_with_dummy_values()
        return sharded(self, model_sharded_state_dict, is_loading, **kwargs)

    sharded_state_dict._rlec_cpu = True  # type: ignore[attr-defined]
    DistributedOptimizer.sharded_state_dict = sharded_state_dict


# --- 13. fp32 parameters: the distributed optimizer's load copies into the live parameters ---------
def _distopt_fp32_load_needed() -> bool:
    from megatron.core.optimizer.distrib_optimizer import DistributedOptimizer

    fn = DistributedOptimizer._set_main_param_and_optimizer_states
    return "dst_tensors[key].copy_(tensors[key])" in inspect.getsource(fn) and not getattr(fn, "_rlec_cpu", False)


def _distopt_fp32_load_apply() -> None:
    from megatron.core.optimizer.distrib_optimizer import DistributedOptimizer

    setter = DistributedOptimizer._set_main_param_and_optimizer_states

    @functools.wraps(setter)
    def set_states(self: Any, model_param: Any, tensors: Any) -> None:
        with torch.no_grad():  # with fp32 parameters the "main param" is a view of the live parameter
            setter(self, model_param, tensors)

    set_states._rlec_cpu = True  # type: ignore[attr-defined]
    DistributedOptimizer._set_main_param_and_optimizer_states = set_states


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
    return (not getattr(distrib_optimizer, "HAVE_APEX_OR_TE", True) and not getattr(fn, "_rlec_cpu", False)
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

    load_state_dict._rlec_cpu = True  # type: ignore[attr-defined]
    DistributedOptimizer.load_state_dict = load_state_dict


# --- 15. the checkpoint's Adam step counter after loading a dp-reshardable distributed-optimizer checkpoint -------
def _distopt_step_value_needed() -> bool:
    from megatron.core.optimizer import distrib_optimizer

    cls = distrib_optimizer.DistributedOptimizer
    load = cls.load_state_dict
    setter = inspect.unwrap(cls._set_main_param_and_optimizer_states)
    return (not getattr(distrib_optimizer, "HAVE_APEX_OR_TE", True) and not getattr(load, "_rlec_step_value", False)
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

    load_state_dict._rlec_cpu = True  # type: ignore[attr-defined]
    load_state_dict._rlec_step_value = True  # type: ignore[attr-defined]
    DistributedOptimizer.load_state_dict = load_state_dict


SHIMS: tuple[Shim, ...] = (
    Shim("rng_tracker", "AssertionError: Torch not compiled with CUDA enabled (CudaRNGStatesTracker.add / fork)",
         lambda: _raises(torch.cuda.get_rng_state), _rng_apply),
    Shim("current_device", "AssertionError: Torch not compiled with CUDA enabled (torch.cuda.current_device() as a device)",
         lambda: _raises(torch.cuda.current_device), _current_device_apply),
    Shim("te_general_gemm", "NameError: name 'te_general_gemm' is not defined (moe_utils router gemm without TE)",
         _te_gemm_needed, _te_gemm_apply),
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


def cuda_available() -> bool:
    """Whether this process can use CUDA (the GPU path: TE spec, bf16, NCCL)."""
    return torch.cuda.is_available()


def apply_cpu_shims() -> list[str]:
    """Apply every shim when CUDA is absent; do nothing on a GPU machine.

    Call before building a Megatron model (``rlec.megatron.parallel.init_parallel`` does).

    Each shim is applied only when its probe (``Shim.needed``) finds the error it answers in the
    unpatched library; the others are listed in :data:`NOT_NEEDED`.

    Returns:
        Names of the shims applied in this process (empty with CUDA).
    """
    if cuda_available():
        return []
    return apply_shims(SHIMS, APPLIED, NOT_NEEDED)


def apply_no_te_shims() -> list[str]:
    """On any machine, a GPU node too: the one shim a missing Transformer Engine needs, ``te_general_gemm``.

    megatron-core 0.16.1's MoE router GEMM (``moe_utils.RouterGatingLinearFunction``) tests
    ``te_general_gemm is not None``, a name its failed TE import never defines: without TE the MoE forward raises
    ``NameError`` on CUDA as on CPU (seen on an H200 with the local layer spec, README "GPU runs"). With the name set
    to ``None`` the ``torch.mm`` fallback beside that test runs. The probe (``_te_gemm_needed``) finds the error only
    where TE failed to import, so with TE this does nothing. Called by :func:`rlec.megatron.parallel.init_parallel`
    after :func:`apply_cpu_shims`.

    Returns:
        Names of the shims applied in this process so far.
    """
    return apply_shims(tuple(s for s in SHIMS if s.name == "te_general_gemm"), APPLIED, NOT_NEEDED)


def apply_shims(shims: tuple[Shim, ...], applied: list[str], not_needed: list[str]) -> list[str]:
    """Apply each shim whose probe finds its error (once per process); record it in ``applied``, or in
    ``not_needed`` when an upgrade fixed (or moved) the code. Returns ``applied`` (a copy)."""
    for shim in shims:
        if shim.name in applied or shim.name in not_needed:
            continue
        if shim.needed():
            shim.apply()
            applied.append(shim.name)
        else:  # the shim would be dead or wrong
            not_needed.append(shim.name)
    return list(applied)


def probe_shims() -> dict[str, bool]:
    """For each shim, whether the *unpatched* library still shows the error it answers.

    Run in a process where :func:`apply_cpu_shims` has not been called (the probes look at the
    live functions). A ``False`` means an upgrade fixed or moved the code: drop or update the shim.
    """
    if APPLIED or NOT_NEEDED:
        raise RuntimeError(f"probe_shims must run before apply_cpu_shims (already applied: {APPLIED})")
    return {shim.name: bool(shim.needed()) for shim in SHIMS}


@contextlib.contextmanager
def in_process_checkpoint_results() -> Iterator[bool]:
    """During one synchronous save, let megatron's checkpoint writer return its results in-process.

    A speed workaround on a private module attribute (not a CPU shim): for a synchronous save
    ``FileSystemWriterAsync`` otherwise starts a ``spawn`` multiprocessing Manager on every rank
    that writes, only to hand the write results back to this same process (~5 s and a fresh
    interpreter importing torch per rank per save, measured on CPU). Scoped: the module's queue is
    set for the ``with`` block only and restored afterwards, so an async save elsewhere in the
    process (verl's, on a cluster) still gets megatron's own queue. Its probe
    (:func:`results_queue_needed`) is tested in ``tests/megatron/test_compat.py``.

    Yields:
        True when the in-process queue is in place for the block; False when megatron-core no
        longer has the attribute (the writer then works as upstream intends, only slower).
    """
    import queue

    from megatron.core.dist_checkpointing.strategies import filesystem_async

    if not results_queue_needed():
        yield False
        return
    filesystem_async._results_queue = queue.Queue()
    try:
        yield True
    finally:
        filesystem_async._results_queue = None


def results_queue_needed() -> bool:
    """megatron-core still keeps the writer's results queue as a lazily created module attribute."""
    from megatron.core.dist_checkpointing.strategies import filesystem_async

    return getattr(filesystem_async, "_results_queue", "absent") is None and _source_has(
        filesystem_async, "_results_queue")


# --- mbridge 0.15.1 private API (GPU and CPU) --------------------------------------------------
# mbridge exposes no public hook for these three needs; each use is here, with a probe that the
# attribute still exists, tested in tests/megatron/test_compat.py so an mbridge upgrade shows.
def mbridge_get_model_cuda_needed() -> bool:
    """Whether mbridge's ``get_model`` still moves every model chunk to CUDA unconditionally."""
    from mbridge.core import util

    return "model_module.cuda(torch.cuda.current_device())" in inspect.getsource(util.get_model)


def mbridge_get_model_cuda_apply() -> None:
    """CPU only: mbridge's ``get_model`` (verl's Megatron engine builds its model with it) keeps the
    chunks where they were built. Answers ``AssertionError: Torch not compiled with CUDA enabled``
    from ``model_module.cuda(torch.cuda.current_device())`` in ``mbridge/core/util.py``; the
    ``Module.cuda`` no-op is scoped to the call.
    """
    from mbridge.core import bridge as bridge_module
    from mbridge.core import util

    get_model = util.get_model
    if getattr(get_model, "_rlec_cpu", False):
        return

    @functools.wraps(get_model)
    def cpu_get_model(*args: Any, **kwargs: Any) -> Any:
        cuda = torch.nn.Module.cuda
        torch.nn.Module.cuda = lambda self, *a, **k: self
        try:
            return get_model(*args, **kwargs)
        finally:
            torch.nn.Module.cuda = cuda

    cpu_get_model._rlec_cpu = True  # type: ignore[attr-defined]
    util.get_model = cpu_get_model
    bridge_module.get_model = cpu_get_model


MBRIDGE_PRIVATE = ("_get_transformer_layer_spec", "_model_provider", "_weight_to_mcore_format")


def mbridge_private_api_present() -> dict[str, bool]:
    """For each private method of mbridge's ``LLMBridge`` (the Qwen3 bridges' base) rlec relies on, whether it still exists."""
    from mbridge.core.llm_bridge import LLMBridge

    return {name: callable(getattr(LLMBridge, name, None)) for name in MBRIDGE_PRIVATE}


def use_layer_spec(bridge: Any, spec: Callable[..., Any]) -> None:
    """Make ``bridge`` build its model with ``spec(vp_stage=None)`` instead of the TE layer spec.

    The CPU path needs Megatron's local (non-TE) spec; mbridge always asks for the TE one via its
    private ``_get_transformer_layer_spec`` (instance attribute set, the class is untouched).
    """
    bridge._get_transformer_layer_spec = spec


def model_provider(bridge: Any) -> Callable[..., Any]:
    """mbridge's model provider (``provider(pre_process, post_process) -> GPTModel``).

    ``bridge.get_model()`` always moves the model to CUDA; its private ``_model_provider`` builds it
    where ``use_cpu_initialization`` says, which both paths need.
    """
    return bridge._model_provider([])


@contextlib.contextmanager
def reporting_weight_conversions(bridge: Any, progress: Callable[[str], None] | None) -> Iterator[None]:
    """Within the block, call ``progress(megatron_name)`` as mbridge converts each loaded weight.

    mbridge's ``load_weights`` has no progress callback; its private ``_weight_to_mcore_format``
    is wrapped on the instance for the block only. ``progress=None`` changes nothing.
    """
    if progress is None:
        yield
        return
    to_mcore = bridge._weight_to_mcore_format

    def reporting(name: str, weights: list[torch.Tensor]) -> torch.Tensor:
        progress(name)
        return to_mcore(name, weights)

    bridge._weight_to_mcore_format = reporting
    try:
        yield
    finally:
        del bridge._weight_to_mcore_format


# --- megatron's forked checkpoint writers die with their parent ----------------------------------
# megatron-core 0.16.1's FileSystemWriterAsync forks one writer process per bucket even for a
# synchronous save; killed with kill -9 mid-write, the parent leaves them alive (0.5-1.4 GB each,
# measured) holding the partial folder. No megatron option turns the fork off.

_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
_fork_guard: dict[str, Any] = {"active": False, "forker": 0, "prctl": None}


def _remember_forker() -> None:
    _fork_guard["forker"] = os.getpid()


def _die_with_parent() -> None:
    """In a child forked inside :func:`writers_die_with_parent`: ask the kernel for SIGKILL when the parent dies."""
    if not _fork_guard["active"] or _fork_guard["prctl"] is None:
        return
    _fork_guard["prctl"](_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    if os.getppid() != _fork_guard["forker"]:  # the parent died before prctl took effect
        os._exit(1)


@contextlib.contextmanager
def writers_die_with_parent() -> Iterator[None]:
    """Tie every process forked inside the block to this process (megatron's checkpoint writers).

    - Linux: each child forked meanwhile gets ``PR_SET_PDEATHSIG = SIGKILL``, so the kernel kills
      it when this process dies, ``kill -9`` included (strictly: when the forking thread exits,
      which for a synchronous save is the saving thread, after its children are done). Elsewhere
      only the next point applies.
    - An exception inside the block (Ctrl-C, a failed write) kills the multiprocessing children
      started meanwhile before it propagates, so none outlives the write it belonged to.

    Not re-entrant across threads: save from one thread at a time (as every rlec caller does).
    Probe: :func:`forked_writers_needed` (megatron still forks its writers).
    """
    if _fork_guard["prctl"] is None and sys.platform.startswith("linux"):
        # resolved here, not in the child: a freshly forked child should not go through dlopen
        _fork_guard["prctl"] = ctypes.CDLL(None, use_errno=True).prctl
        os.register_at_fork(before=_remember_forker, after_in_child=_die_with_parent)
    before = set(multiprocessing.active_children())
    _fork_guard["active"] = True
    try:
        yield
    except BaseException:
        for child in set(multiprocessing.active_children()) - before:
            child.kill()
            child.join(timeout=5)
        raise
    finally:
        _fork_guard["active"] = False


def forked_writers_needed() -> bool:
    """megatron-core's checkpoint writer still forks worker processes (the reason for :func:`writers_die_with_parent`)."""
    from megatron.core.dist_checkpointing.strategies import filesystem_async

    return _source_has(filesystem_async, "Process(") or _source_has(filesystem_async, "mp.get_context")


# --- Ray's local node start on a loaded machine --------------------------------------------------
# ray 2.x's Node.__init__ waits a fixed 30 s (a literal, no setting) for its raylet to register with
# the GCS and then raises "The current node timed out during startup ...", leaving the GCS, the
# raylet and its workers running (only an atexit hook stops them). On the 2-core box with a second
# launch starting its Megatron ranks beside it, ray.init failed so (fresh clone of cd20779,
# 2026-12-06: the SIGKILL scenario's launch died in ray.init and its three tests errored). Left
# alive, those processes carry the launch's RLEC_RUN_FOLDER and would hold the next launch into
# the folder (rlec.cluster.resume.launch_processes).

RAY_START_TIMEOUT = "The current node timed out during startup"
"""The start of the error Ray 2.x's ``Node.__init__`` raises when its raylet has not registered within 30 s."""


def ray_start_timeout_needed() -> bool:
    """Ray's ``Node.__init__`` still waits a fixed 30 s for its raylet and raises :data:`RAY_START_TIMEOUT`, and
    ``Node.kill_all_processes`` (what :func:`ray_start_retried` stops a failed start with) is still there.
    False when the source cannot be read (the retry is then not applied)."""
    from ray._private import node

    try:
        return (_source_has(node.Node.__init__, RAY_START_TIMEOUT)
                and _source_has(node.Node.__init__, "raylet_start_wait_time_s = 30")
                and "wait" in inspect.signature(node.Node.kill_all_processes).parameters)
    except (OSError, TypeError, ValueError):
        return False


@contextlib.contextmanager
def ray_start_retried(attempts: int = 3, pause_s: float = 5.0,
                      say: Callable[[str], None] | None = None) -> Iterator[None]:
    """Inside the block, ``ray.init`` is tried again when Ray's local node timed out during start-up.

    A start that times out (:data:`RAY_START_TIMEOUT`) first stops the processes it started, the
    ones Ray recorded (``Node.kill_all_processes``: the raylet, which takes its workers down, then
    the GCS and the rest), also on the last try; then, after ``pause_s`` seconds, ``ray.init`` is
    called again with the same arguments. Any other error is raised as it came, at once. Both
    patches (``ray.init``, ``ray._private.node.Node.__init__``) are undone when the block ends.
    Probe: :func:`ray_start_timeout_needed`.

    Args:
        attempts: tries in all, >= 1.
        pause_s: seconds between tries (the load that delayed the raylet may pass), >= 0.
        say: one line per retry (a warning).

    Raises:
        ValueError: ``attempts`` < 1 or ``pause_s`` < 0 (on entry).
    """
    import time

    import ray
    from ray._private import node

    if attempts < 1 or pause_s < 0:
        raise ValueError(f"ray_start_retried: attempts must be >= 1 and pause_s >= 0, got {attempts} and {pause_s}")
    node_init, init = node.Node.__init__, ray.init

    @functools.wraps(node_init)
    def stopping_node_init(self: Any, *args: Any, **kwargs: Any) -> None:
        try:
            node_init(self, *args, **kwargs)
        except Exception as exc:  # Ray raises a bare Exception for this
            if RAY_START_TIMEOUT in str(exc):
                self.kill_all_processes(check_alive=False, allow_graceful=True, wait=True)
            raise

    @functools.wraps(init)
    def retrying_init(*args: Any, **kwargs: Any) -> Any:
        for attempt in range(1, attempts + 1):
            try:
                return init(*args, **kwargs)
            except Exception as exc:
                if RAY_START_TIMEOUT not in str(exc) or attempt == attempts:
                    raise
                ray.shutdown()  # resets the driver's state (nothing was connected)
                if say is not None:
                    say(f"Ray's local node did not register within Ray's fixed 30 s (a loaded machine): stopped the "
                        f"processes it started; starting Ray again in {pause_s:g} s (try {attempt + 1} of {attempts})")
                time.sleep(pause_s)
        raise AssertionError("unreachable: the last try returns or raises")

    node.Node.__init__, ray.init = stopping_node_init, retrying_init
    try:
        yield
    finally:
        node.Node.__init__, ray.init = node_init, init
