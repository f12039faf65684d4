"""Every workaround for a third-party private API rlec uses on any machine, in one place.

Five kinds, each with the error or gap it answers and a probe that the unpatched library
still has it (tested in ``tests/megatron/test_compat.py``, so an upgrade that fixes or moves the
code shows):

1. megatron-core 0.16.1's MoE router GEMM without Transformer Engine (:func:`apply_no_te_shims`, a GPU node without
   TE as a CPU machine), and the :class:`Shim` record and :func:`apply_shims` every shim uses;
2. the in-process results queue of megatron's synchronous checkpoint writer
   (:func:`in_process_checkpoint_results`, scoped to one save);
3. mbridge 0.15.1's private ``Bridge`` methods rlec needs (:func:`use_layer_spec`,
   :func:`model_provider`, :func:`reporting_weight_conversions`);
4. megatron's forked checkpoint writers, tied to their parent (:func:`writers_die_with_parent`).
5. Ray's fixed 30 s wait for its local node on a loaded machine: ``ray.init`` started again
   (:func:`ray_start_retried`, probe :func:`ray_start_timeout_needed`).

The shims that exist only to run on a machine without CUDA are the CPU wing's: megatron-core's in
:mod:`rlec.cpu.megatron_core`, verl's and mbridge's in :mod:`rlec.cpu.verl_shims` (``docs/cpu.md`` lists them all).
These here stay because the GPU path uses them too: the launcher's Ray start (:mod:`rlec.cluster.main_ppo`,
:mod:`rlec.cluster.ray_cluster`), rlec's Megatron model and checkpoints (:mod:`rlec.megatron.model`,
:mod:`rlec.megatron.bridge`, :mod:`rlec.megatron.checkpoint`) and a GPU node without TE.

A shim is applied only where its probe finds the error, once per process (:func:`apply_shims`); a patch that
replaces a function marks its replacement (:func:`mark_patched`) so that applying it twice is harmless.
:data:`APPLIED` lists every shim applied in this process (rlec's, the CPU wing's), :data:`NOT_NEEDED` those skipped.
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
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import torch

APPLIED: list[str] = []
"""Names of the shims applied in this process, in the order applied: every :func:`apply_shims` call's (this module's,
:mod:`rlec.cpu.megatron_core`'s, :mod:`rlec.cpu.verl_shims`'), one registry (shim names are unique)."""
NOT_NEEDED: list[str] = []
"""Names of the shims whose probe found nothing to answer in this process (an upgrade fixed or moved the code)."""

_PATCH_MARKS = "_rlec_patches"


@dataclass(frozen=True)
class Shim:
    """One workaround: the error it answers, a probe on the unpatched library, and the patch."""

    name: str
    error: str
    needed: Callable[[], bool]
    apply: Callable[[], None]


def is_patched(obj: Any, mark: str) -> bool:
    """Whether ``obj`` (a function or class a shim put in place, or a ``functools.wraps`` wrapper of one, which copies
    its marks) carries ``mark`` (:func:`mark_patched`): the guard that makes a patch's second application a no-op."""
    return mark in getattr(getattr(obj, "__func__", obj), _PATCH_MARKS, ())  # a staticmethod: its function's marks


def mark_patched(obj: Any, mark: str) -> Any:
    """Mark ``obj``, the replacement a patch installs, with ``mark`` (the shim's name) beside any marks it copied from
    what it wraps; returns ``obj``. Read by :func:`is_patched`."""
    setattr(obj, _PATCH_MARKS, frozenset(getattr(obj, _PATCH_MARKS, ())) | {mark})
    return obj


def source_has(obj: Any, text: str) -> bool:
    """Whether the source of ``obj`` (a module, class or function) contains ``text``: the probes' test."""
    return text in inspect.getsource(obj)


# --- megatron-core's MoE router GEMM without Transformer Engine (any machine) -------------------
def _te_gemm_needed() -> bool:
    from megatron.core.transformer.moe import moe_utils

    return "te_general_gemm" not in vars(moe_utils) and source_has(moe_utils, "te_general_gemm is not None")


def _te_gemm_apply() -> None:
    from megatron.core.transformer.moe import moe_utils

    moe_utils.te_general_gemm = None


NO_TE_SHIMS: tuple[Shim, ...] = (
    Shim("te_general_gemm", "NameError: name 'te_general_gemm' is not defined (moe_utils router gemm without TE)",
         _te_gemm_needed, _te_gemm_apply),
)
"""The shims a missing Transformer Engine needs on any machine (:func:`apply_no_te_shims`)."""


def cuda_available() -> bool:
    """Whether this process can use CUDA (the GPU path: TE spec, bf16, NCCL)."""
    return torch.cuda.is_available()


def apply_no_te_shims() -> list[str]:
    """On any machine, a GPU node too: the one shim a missing Transformer Engine needs, ``te_general_gemm``.

    megatron-core 0.16.1's MoE router GEMM (``moe_utils.RouterGatingLinearFunction``) tests
    ``te_general_gemm is not None``, a name its failed TE import never defines: without TE the MoE forward raises
    ``NameError`` on CUDA as on CPU (seen on an H200 with the local layer spec, README "GPU runs"). With the name set
    to ``None`` the ``torch.mm`` fallback beside that test runs. The probe (``_te_gemm_needed``) finds the error only
    where TE failed to import, so with TE this does nothing. Called by :func:`rlec.megatron.parallel.init_parallel`
    after the CPU wing's :func:`rlec.cpu.megatron_core.apply_cpu_shims` (which applies it too).

    Returns:
        The names of :data:`NO_TE_SHIMS` applied in this process so far (``["te_general_gemm"]`` or empty), as
        :func:`apply_shims` returns them; :data:`APPLIED` lists every shim applied.
    """
    return apply_shims(NO_TE_SHIMS)


def apply_shims(shims: tuple[Shim, ...]) -> list[str]:
    """Apply each shim of ``shims`` whose probe finds its error, once per process; record it in :data:`APPLIED`, or in
    :data:`NOT_NEEDED` when an upgrade fixed (or moved) the code.

    Returns:
        The names of ``shims`` applied in this process so far (by this call or an earlier one), in their order.
    """
    for shim in shims:
        if shim.name in APPLIED or shim.name in NOT_NEEDED:
            continue
        if shim.needed():
            shim.apply()
            APPLIED.append(shim.name)
        else:  # the shim would be dead or wrong
            NOT_NEEDED.append(shim.name)
    return [shim.name for shim in shims if shim.name in APPLIED]


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

    return getattr(filesystem_async, "_results_queue", "absent") is None and source_has(
        filesystem_async, "_results_queue")


# --- mbridge 0.15.1 private API (GPU and CPU) --------------------------------------------------
# mbridge exposes no public hook for these three needs; each use is here, with a probe that the
# attribute still exists, tested in tests/megatron/test_compat.py so an mbridge upgrade shows.
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

    return source_has(filesystem_async, "Process(") or source_has(filesystem_async, "mp.get_context")


# --- Ray's local node start on a loaded machine --------------------------------------------------
# ray 2.x's Node.__init__ waits a fixed 30 s (a literal, no setting) for its raylet to register with
# the GCS and then raises "The current node timed out during startup ...", leaving the GCS, the
# raylet and its workers running (only an atexit hook stops them). On the 2-core box with a second
# launch starting its Megatron ranks beside it, ray.init failed so (fresh clone of cd20779,
# 2026-12-06: the SIGKILL scenario's launch died in ray.init and its three tests errored). Left
# alive, those processes carry the launch's RLEC_RUN_FOLDER and would hold the next launch into
# the folder (rlec.rules.resume.launch_processes).

RAY_START_TIMEOUT = "The current node timed out during startup"
"""The start of the error Ray 2.x's ``Node.__init__`` raises when its raylet has not registered within 30 s."""


def ray_start_timeout_needed() -> bool:
    """Ray's ``Node.__init__`` still waits a fixed 30 s for its raylet and raises :data:`RAY_START_TIMEOUT`, and
    ``Node.kill_all_processes`` (what :func:`ray_start_retried` stops a failed start with) is still there.
    False when the source cannot be read (the retry is then not applied)."""
    from ray._private import node

    try:
        return (source_has(node.Node.__init__, RAY_START_TIMEOUT)
                and source_has(node.Node.__init__, "raylet_start_wait_time_s = 30")
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

