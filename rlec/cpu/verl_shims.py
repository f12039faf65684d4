"""The shims that run verl 0.9.1's own trainer (``main_ppo``) on a machine without CUDA.

verl's platform ``cpu`` and its engines are :mod:`rlec.cpu.platform`; beyond its registries a few spots of verl,
mbridge and Megatron-core assume CUDA. Each workaround here is a :class:`rlec.megatron.compat.Shim` naming the error it
answers, with a probe on the unpatched library (``tests/verl_plugin/test_cpu.py`` runs every probe, so an upgrade that
fixes or moves the code shows); Megatron-core's own CPU shims are :mod:`rlec.cpu.megatron_core` (applied through the
last shim here). ``docs/cpu.md`` lists every CPU shim in one table, with those that change how verl runs rather than
only the device it runs on.

Set up by :func:`enable_cpu` on import of the CPU wing :mod:`rlec.cpu` (every Ray process of a CPU launch imports it
through ``VERL_USE_EXTERNAL_MODULES=rlec.cpu,rlec.verl_plugin``) only when the process has no CUDA **and** the launcher
asked for the CPU platform (``VERL_PLATFORM=cpu``, set by ``tools/run_megatron_rlec.sh`` with ``TRAINER=verl`` on a
machine without CUDA). On a GPU machine nothing here runs, and a GPU launch never imports it.

What it does (1 at once, 2 and 3 each when the process imports the module concerned, :data:`SHIM_TRIGGERS`):

1. registers :class:`rlec.cpu.platform.CPUPlatform` as verl platform ``cpu``;
2. registers verl's Megatron engine classes for device ``cpu`` in ``EngineRegistry``;
3. the shims of :data:`VERL_SHIMS` (the duplicate ``cpu:gloo,cpu:gloo`` backend string, a rendezvous without a TCP
   port, mbridge's ``.cuda()`` and Transformer Engine parameter names, fp32 Megatron parameters, response-only
   logits in the LM head's forward (the vocabulary projection, log-probs and entropy at the
   positions that predict response tokens only), verl's padding and unpadding of each micro-batch
   without a Python loop over its rows (:mod:`rlec.cpu.bshd_padding`), one device move per batch instead of one per
   micro-batch (:mod:`rlec.cpu.batch_device`), routing replay (R2 / R3) on the
   padded micro-batches of this layout, every rank reading its own checkpoint shards on a resume at a data-parallel
   size > 1, verl's replay buffer polling for finished rollouts every 0.2 s instead of 2 s, a synchronous checkpoint save's results kept
   in-process (no spawn Manager per rank), verl's agent-loop workers waited for at the launch rather than in
   step 1, one reward call and one TransferQueue put per agent-loop chunk instead of per sample and the agent loop
   built without hydra (:mod:`rlec.cpu.agent_loop_worker`), Megatron-core's own CPU shims).
"""

from __future__ import annotations

import functools
import importlib
import inspect
import os
from typing import Any

import torch

from rlec.cpu.agent_loop_worker import AGENT_LOOP_CHUNKED_PUTS, AGENT_LOOP_DIRECT_BUILD
from rlec.cpu.batch_device import BATCH_DEVICE_ONCE
from rlec.cpu.bshd_padding import BSHD_PADDING_VECTORIZED
from rlec.cpu.padded_forward import BSHD_ATTENTION_MASK, RESPONSE_ONLY_LOGITS, ROUTER_REPLAY_BSHD
from rlec.cpu.platform import register_engines, register_platform
from rlec.megatron.compat import APPLIED, Shim, apply_shims, is_patched, mark_patched
from rlec.verl_plugin.cpu_interface import cpu_requested

__all__ = ["COMPILE_DISABLE_ENV", "SHIM_TRIGGERS", "VERL_SHIMS", "enable_cpu", "entropy_compiled", "probe_verl_shims",
           "rendezvous_store", "wait_until_ready"]


# --- 1. the process-group backend string ------------------------------------------------------
def _backend_needed() -> bool:
    from verl.utils import distributed

    return 'f"cpu:gloo,{get_device_name()}:{get_nccl_backend()}"' in inspect.getsource(distributed)


def _dedupe_backend(backend: Any) -> Any:
    """``cpu:gloo,cpu:gloo`` -> ``gloo``; any other string unchanged."""
    if isinstance(backend, str) and "," in backend:
        parts = dict(part.split(":", 1) for part in backend.split(",") if ":" in part)
        if set(parts) == {"cpu"}:
            return parts["cpu"]
    return backend


def _backend_apply() -> None:
    # verl imports torch.distributed inside the function (a local name), so no module-scoped view
    # reaches it: wrap the one torch function, rewriting only the backend string torch rejects.
    init = torch.distributed.init_process_group
    if is_patched(init, "process_group_backend"):
        return

    @functools.wraps(init)
    def init_process_group(backend: Any = None, *args: Any, **kwargs: Any) -> Any:
        return init(_dedupe_backend(backend), *args, **kwargs)  # backend positional or keyword, as torch takes it

    torch.distributed.init_process_group = mark_patched(init_process_group, "process_group_backend")


# --- 1b. a rendezvous without a TCP port for verl's CPU worker groups ---------------------------
def _rendezvous_needed() -> bool:
    """verl's worker group picks MASTER_PORT by binding port 0 and closing the socket; the rank-0 worker binds it
    again only later, in ``init_process_group``'s TCPStore."""
    from verl.single_controller.base.worker import WorkerHelper

    source = inspect.getsource(WorkerHelper._get_free_port)
    return 'bind(("", 0))' in source and "return sock.getsockname()[1]" in source


def rendezvous_store(world_size: int, env: dict[str, str] | None = None) -> Any:
    """The store a CPU worker group's ranks meet in, with no TCP port: a ``HashStore`` for one rank, else a
    ``FileStore`` named by the worker group's random prefix and its MASTER_ADDR / MASTER_PORT (all ranks of the group
    get the same three; the CPU platform runs on one node, so they share the temp folder)."""
    import tempfile

    env = os.environ if env is None else env
    if world_size == 1:
        return torch.distributed.HashStore()
    folder = os.path.join(tempfile.gettempdir(), "rlec-rendezvous")
    os.makedirs(folder, exist_ok=True)
    name = f"{env.get('WG_PREFIX', 'group')}-{env.get('MASTER_ADDR', 'local')}-{env.get('MASTER_PORT', '0')}"
    return torch.distributed.FileStore(os.path.join(folder, name), world_size)


def _rendezvous_apply() -> None:
    # Measured (2026-12-07, two test suites and other launches on one box): a launch failed with EADDRINUSE on
    # MASTER_PORT, "free a moment ago" when verl's worker group picked it. The CPU platform's worker-group ranks meet
    # in a store that needs no port instead (rlec.megatron.parallel does the same for rlec's own single process).
    init = torch.distributed.init_process_group
    if is_patched(init, "port_free_rendezvous"):
        return

    @functools.wraps(init)
    def init_process_group(*args: Any, **kwargs: Any) -> Any:
        if (os.environ.get("WG_BACKEND") == "ray" and "store" not in kwargs
                and kwargs.get("init_method") in (None, "env://")):
            world_size = int(kwargs.get("world_size") or os.environ.get("WORLD_SIZE", 1))
            rank = int(kwargs.get("rank") if kwargs.get("rank") is not None else os.environ.get("RANK", 0))
            kwargs.pop("init_method", None)
            kwargs.update(store=rendezvous_store(world_size), world_size=world_size, rank=rank)
        return init(*args, **kwargs)

    torch.distributed.init_process_group = mark_patched(init_process_group, "port_free_rendezvous")


# --- 2. mbridge's get_model moves every chunk to CUDA -------------------------------------------
def mbridge_get_model_cuda_needed() -> bool:
    """Whether mbridge's ``get_model`` still moves every model chunk to CUDA unconditionally."""
    from mbridge.core import util

    return "model_module.cuda(torch.cuda.current_device())" in inspect.getsource(util.get_model)


def mbridge_get_model_cuda_apply() -> None:
    """mbridge's ``get_model`` (verl's Megatron engine builds its model with it) keeps the chunks where they were
    built. Answers ``AssertionError: Torch not compiled with CUDA enabled`` from
    ``model_module.cuda(torch.cuda.current_device())`` in ``mbridge/core/util.py``; the ``Module.cuda`` no-op is
    scoped to the call.
    """
    from mbridge.core import bridge as bridge_module
    from mbridge.core import util

    get_model = util.get_model
    if is_patched(get_model, "mbridge_get_model_cuda"):
        return

    @functools.wraps(get_model)
    def cpu_get_model(*args: Any, **kwargs: Any) -> Any:
        cuda = torch.nn.Module.cuda
        torch.nn.Module.cuda = lambda self, *a, **k: self
        try:
            return get_model(*args, **kwargs)
        finally:
            torch.nn.Module.cuda = cuda

    util.get_model = mark_patched(cpu_get_model, "mbridge_get_model_cuda")
    bridge_module.get_model = cpu_get_model


# --- 3. the TE layer spec and TE parameter names of verl's vanilla mbridge path -----------------
def _cpu_bridge_needed() -> bool:
    from verl.workers.engine.megatron import transformer_impl

    return "from verl.models.mcore.mbridge import AutoBridge" in inspect.getsource(transformer_impl)


class _CPUAutoBridge:
    """``AutoBridge`` as verl's Megatron engine sees it on CPU: rlec's local-spec mbridge bridge.

    ``from_config`` builds the bridge with Megatron's local layer spec, fp32 and no fusions
    (:func:`rlec.megatron.bridge.make_bridge`), and its ``load_weights`` / ``export_weights`` see
    the model through :class:`rlec.megatron.bridge.TENamedView` (mbridge only knows TE names):
    :func:`rlec.verl_plugin.local_spec.local_spec_bridge` in fp32, the bridge a GPU node without TE uses in bf16.
    """

    @staticmethod
    def from_config(hf_config: Any, dtype: Any = None, **kwargs: Any) -> Any:
        from rlec.verl_plugin.local_spec import local_spec_bridge

        return local_spec_bridge(hf_config, torch.float32)


def _cpu_bridge_apply() -> None:
    import verl.models.mcore.mbridge as verl_mbridge

    verl_mbridge.AutoBridge = _CPUAutoBridge


# --- 4. fp32 parameters (CPU has no bf16 Megatron kernels worth using) ---------------------------
def _fp32_needed() -> bool:
    from verl.workers.config.engine import McoreEngineConfig

    return 'assert self.dtype in ["bfloat16", "float16"]' in inspect.getsource(McoreEngineConfig.__post_init__)


def _fp32_apply() -> None:
    from verl.workers.config.engine import McoreEngineConfig

    post_init = McoreEngineConfig.__post_init__
    if is_patched(post_init, "megatron_fp32"):
        return

    @functools.wraps(post_init)
    def __post_init__(self: Any) -> None:
        if self.dtype not in ("float32", "fp32"):
            return post_init(self)
        object.__setattr__(self, "dtype", "bfloat16")  # pass verl's check, then restore
        try:
            post_init(self)
        finally:
            object.__setattr__(self, "dtype", "float32")

    McoreEngineConfig.__post_init__ = mark_patched(__post_init__, "megatron_fp32")


# --- 5, 7, 8. verl's Megatron forward on padded (BSHD) batches: rlec.cpu.padded_forward, rlec.cpu.bshd_padding --
# --- 6. Megatron's RNG tracker is never seeded without an accelerator ----------------------------
def _rng_seed_needed() -> bool:
    from verl.workers.engine.megatron import utils

    return "if is_device_available and get_torch_device().device_count() > 0" in inspect.getsource(utils.set_random_seed)


def _rng_seed_apply() -> None:
    from verl.workers.engine.megatron import utils

    # set_random_seed seeds model_parallel_cuda_manual_seed only "when an accelerator is present";
    # rlec.cpu.megatron_core's rng_tracker shim keeps that tracker on torch's CPU generator
    utils.is_device_available = True


# --- 9. verl's fully parallel dist-checkpoint load over data-parallel ranks ---------------------
def _parallel_load_needed() -> bool:
    from verl.utils.megatron import dist_checkpointing

    # verl wraps every load in Megatron's fully parallel loader over the data-parallel group, which exchanges the
    # shards it read on CUDA devices and calls torch.cuda.synchronize (any data-parallel size > 1: NPROC=4 TP=2);
    # Megatron's class as verl's module holds it (only rlec.megatron imports Megatron), the original once patched
    wrapper = dist_checkpointing.FullyParallelLoadStrategyWrapper
    if is_patched(wrapper, "parallel_checkpoint_load"):
        wrapper = wrapper.__mro__[1]
    return ("FullyParallelLoadStrategyWrapper(" in inspect.getsource(dist_checkpointing.load_dist_checkpointing)
            and "torch.cuda.synchronize()" in inspect.getsource(wrapper.load))


def _parallel_load_apply() -> None:
    from verl.utils.megatron import dist_checkpointing

    wrapper = dist_checkpointing.FullyParallelLoadStrategyWrapper
    if is_patched(wrapper, "parallel_checkpoint_load"):
        return

    class EachRankLoadStrategyWrapper(wrapper):  # type: ignore[misc, valid-type]
        """Megatron's fully parallel loader as verl's checkpoint load sees it on CPU: every rank reads its own shards
        with the wrapped strategy. What the wrapper does at a data-parallel size of 1, and what its load promises to
        equal at any size ("equivalent to a state dict that would be loaded with the underlying strategy without this
        wrapper"); it only spreads the reads over the ranks, then exchanges them on CUDA."""

        def load(self, sharded_state_dict: Any, checkpoint_dir: Any) -> Any:
            return self.base_strategy.load(sharded_state_dict, checkpoint_dir)

    dist_checkpointing.FullyParallelLoadStrategyWrapper = mark_patched(EachRankLoadStrategyWrapper, "parallel_checkpoint_load")


# --- 10. verl's Megatron entropy compiles a multiply-sum with inductor in every launch ------------
# Not a shim: torch 2.13's ``torch._dynamo.config.disable = True`` set in code holds only for the thread that set it,
# and Ray runs actor methods on another thread, so a shim applied at import left inductor compiling (g++ at every
# launch). ``TORCH_COMPILE_DISABLE=1`` in the workers' environment (layout/cpu.yaml, Ray's runtime_env) is read once
# at torch's import and holds in every thread.
COMPILE_DISABLE_ENV = "TORCH_COMPILE_DISABLE"


def entropy_compiled() -> bool:
    """Whether verl's Megatron entropy (``_VocabParallelEntropy.forward``) still calls ``torch.compile``: the reason
    the CPU layout sets :data:`COMPILE_DISABLE_ENV` in its workers (False after an upgrade that drops it)."""
    from verl.utils.megatron import tensor_parallel

    return "@torch.compile" in inspect.getsource(tensor_parallel._VocabParallelEntropy.forward)


# --- 11. verl's V1 replay buffer polls for finished rollouts every 2 s ------------------------------
REPLAY_POLL_S = 0.2
"""The replay buffer's poll on CPU (seconds; verl's ``ReplayBuffer`` and its subclasses, ``ReplayBufferAsync``
included, when built without ``poll_interval``): a step's rollout ends within this of its last sample."""


def _replay_poll_needed() -> bool:
    from verl.trainer.ppo.v1 import replay_buffer, trainer_base

    default = inspect.signature(replay_buffer.ReplayBuffer.__init__).parameters["poll_interval"].default
    # a 2 s default that the trainer never sets (no config key)
    return default > REPLAY_POLL_S and "poll_interval" not in inspect.getsource(trainer_base.PPOTrainer._build_replay_buffer)


def _replay_poll_apply() -> None:
    from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer

    init = ReplayBuffer.__init__
    position = list(inspect.signature(init).parameters).index("poll_interval")  # self counted

    @functools.wraps(init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        if len(args) < position:  # not given positionally: REPLAY_POLL_S unless given by name
            kwargs.setdefault("poll_interval", REPLAY_POLL_S)
        init(self, *args, **kwargs)

    ReplayBuffer.__init__ = __init__


# --- 13. megatron's synchronous dist-checkpoint save starts a spawn Manager on every rank -------------
def _save_results_needed() -> bool:
    from verl.utils.checkpoint import megatron_checkpoint_manager

    from rlec.megatron.compat import results_queue_needed

    # megatron still creates the queue lazily, and verl's manager calls the save by the name it imported
    return results_queue_needed() and "save_dist_checkpointing(" in inspect.getsource(megatron_checkpoint_manager)


def _save_results_apply() -> None:
    from verl.utils.checkpoint import megatron_checkpoint_manager

    from rlec.megatron.compat import in_process_checkpoint_results, writers_die_with_parent

    save = megatron_checkpoint_manager.save_dist_checkpointing
    if is_patched(save, "checkpoint_results_in_process"):
        return

    @functools.wraps(save)
    def save_dist_checkpointing(*args: Any, **kwargs: Any) -> Any:
        if kwargs.get("async_save") or (len(args) > 2 and args[2]):  # an async save: megatron's own queue, as upstream
            return save(*args, **kwargs)
        with in_process_checkpoint_results(), writers_die_with_parent():  # what rlec.megatron.checkpoint's save does
            return save(*args, **kwargs)

    megatron_checkpoint_manager.save_dist_checkpointing = mark_patched(save_dist_checkpointing, "checkpoint_results_in_process")


# --- 14. verl's agent-loop workers finish their start-up inside step 1 ------------------------------
def _agent_loop_ready_needed() -> bool:
    from verl.experimental.agent_loop import agent_loop

    # the manager creates its worker actors and returns at once; nothing waits for their constructors until step 1's
    # first generate_sequences call
    source = inspect.getsource(agent_loop.AgentLoopManager._init_agent_loop_workers)
    return ".remote(" in source and not any(wait in source for wait in ("ray.get(", "ray.wait(", "__ray_ready__"))


def wait_until_ready(actors: list[Any]) -> None:
    """Block until every Ray actor in ``actors`` has finished its constructor (Ray's built-in ``__ray_ready__``);
    a constructor's exception is raised here."""
    import ray

    if actors:
        ray.get([actor.__ray_ready__.remote() for actor in actors])


def _agent_loop_ready_apply() -> None:
    from verl.experimental.agent_loop import agent_loop

    init = agent_loop.AgentLoopManager._init_agent_loop_workers
    if is_patched(init, "agent_loop_workers_ready"):
        return

    @functools.wraps(init)
    async def _init_agent_loop_workers(self: Any) -> None:
        await init(self)
        wait_until_ready(self.agent_loop_workers)  # at the launch (the manager's create), before step 1 starts

    agent_loop.AgentLoopManager._init_agent_loop_workers = mark_patched(_init_agent_loop_workers, "agent_loop_workers_ready")


# --- 12. megatron-core's own CPU shims, in every worker ---------------------------------------
def _megatron_needed() -> bool:
    return not torch.cuda.is_available()


def _megatron_apply() -> None:
    from rlec.cpu.megatron_core import apply_cpu_shims

    apply_cpu_shims()


VERL_SHIMS: tuple[Shim, ...] = (
    Shim("process_group_backend", "ValueError: Duplicate device type cpu in backend string: cpu:gloo,cpu:gloo "
         "(verl.utils.distributed builds cpu:gloo,<device>:<backend>)", _backend_needed, _backend_apply),
    Shim("port_free_rendezvous", "torch.distributed.DistNetworkError: ... EADDRINUSE (verl's worker group picks "
         "MASTER_PORT by binding port 0 and closing the socket; another process on the box took it before rank 0's "
         "TCPStore bound it: a launch beside a second test suite, 2026-12-07)", _rendezvous_needed, _rendezvous_apply),
    Shim("mbridge_get_model_cuda", "AssertionError: Torch not compiled with CUDA enabled (mbridge.core.util.get_model: "
         "model_module.cuda(torch.cuda.current_device()))", mbridge_get_model_cuda_needed, mbridge_get_model_cuda_apply),
    Shim("mbridge_cpu_spec", "NameError: TENorm / KeyError on TE parameter names (verl builds mbridge's TE layer spec "
         "and loads by TE names)", _cpu_bridge_needed, _cpu_bridge_apply),
    Shim("megatron_fp32", "AssertionError: dtype float32 not supported (McoreEngineConfig accepts bfloat16 / float16; "
         "precision=fp32 is the CPU path's dtype)", _fp32_needed, _fp32_apply),
    BSHD_PADDING_VECTORIZED,  # before bshd_attention_mask, which wraps the padding function it finds
    BSHD_ATTENTION_MASK,
    Shim("megatron_rng_seed", "Exception: cuda rng state model-parallel-rng is not added (verl's set_random_seed skips "
         "model_parallel_cuda_manual_seed without an accelerator)", _rng_seed_needed, _rng_seed_apply),
    RESPONSE_ONLY_LOGITS,
    BATCH_DEVICE_ONCE,
    ROUTER_REPLAY_BSHD,
    Shim("parallel_checkpoint_load", "AssertionError: Torch not compiled with CUDA enabled (resuming at a data-parallel "
         "size > 1: verl's load_dist_checkpointing wraps the load in Megatron's FullyParallelLoadStrategyWrapper, whose "
         "load exchanges the shards on CUDA and calls torch.cuda.synchronize())", _parallel_load_needed, _parallel_load_apply),
    Shim("replay_buffer_poll", "each step's rollout rounded up to verl's next 2 s poll for finished samples (V1 "
         "ReplayBuffer poll_interval, not a config key): make run's 10 rollouts all took 6.0 s, 4.7-6.2 s with a 0.2 s "
         "poll", _replay_poll_needed, _replay_poll_apply),
    Shim("checkpoint_results_in_process", "a spawn multiprocessing Manager (a fresh interpreter) started by every "
         "rank's first synchronous save (megatron's FileSystemWriterAsync hands the write results back through it), "
         "orphaned for good when Ray's reaper kills the worker after a SIGKILLed launch: it carries RLEC_RUN_FOLDER, "
         "so the rerun waited 120 s and was refused (fresh clone of 8c702fc, 2026-12-06)",
         _save_results_needed, _save_results_apply),
    Shim("agent_loop_workers_ready", "step 1 took 13-22 s more than the next (issue 54): verl's AgentLoopManager "
         "creates its worker actors without waiting for their constructors (a Ray worker process importing verl's "
         "agent loop, the tokenizer), so step 1's rollout waited for them; waited for at the launch instead",
         _agent_loop_ready_needed, _agent_loop_ready_apply),
    AGENT_LOOP_CHUNKED_PUTS,
    AGENT_LOOP_DIRECT_BUILD,
    Shim("megatron_core_cpu", "megatron-core's CUDA assumptions (rlec.cpu.megatron_core.SHIMS)", _megatron_needed, _megatron_apply),
)


def probe_verl_shims() -> dict[str, bool]:
    """For each verl-side shim, whether the unpatched library still shows what it answers (no patching)."""
    return {shim.name: bool(shim.needed()) for shim in VERL_SHIMS if shim.name != "megatron_core_cpu"}


TRANSFORMER_IMPL = "verl.workers.engine.megatron.transformer_impl"

# when each shim applies: right after the process imports this module (its target, or the last imported of the
# modules it reads), so a process that never imports verl's Megatron engine (the load balancer, the reward loop,
# rlec_hf's rollout server) never imports Megatron for a shim: about 3 CPU-s less in each, in every launch
SHIM_TRIGGERS: dict[str, str] = {
    "process_group_backend": "verl.utils.distributed",
    "port_free_rendezvous": "verl.utils.distributed",
    "mbridge_get_model_cuda": "mbridge.core.bridge",
    "mbridge_cpu_spec": TRANSFORMER_IMPL,
    "megatron_fp32": "verl.workers.config.engine",
    "bshd_padding_vectorized": "verl.models.mcore.model_forward",
    "bshd_attention_mask": "verl.models.mcore.model_forward",
    "megatron_rng_seed": "verl.workers.engine.megatron.utils",
    "response_only_logits": TRANSFORMER_IMPL,
    "router_replay_bshd": TRANSFORMER_IMPL,
    "batch_device_once": TRANSFORMER_IMPL,
    "parallel_checkpoint_load": "verl.utils.megatron.dist_checkpointing",
    "replay_buffer_poll": "verl.trainer.ppo.v1",  # the package: its probe reads trainer_base too
    "checkpoint_results_in_process": "verl.utils.checkpoint.megatron_checkpoint_manager",
    "agent_loop_workers_ready": "verl.experimental.agent_loop.agent_loop",
    "agent_loop_chunked_puts": "verl.trainer.ppo.v1.agent_loop_tq",
    "agent_loop_direct_build": "verl.trainer.ppo.v1.agent_loop_tq",
    "megatron_core_cpu": "megatron.core",
}


def enable_cpu(force: bool = False, now: bool = False) -> list[str]:
    """Register the CPU platform; register the Megatron engines and apply each of :data:`VERL_SHIMS` once the
    process imports its module (:data:`SHIM_TRIGGERS`, a ``wrapt`` post-import hook; at once where it is loaded).

    Args:
        force: apply even without ``VERL_PLATFORM=cpu`` (tests); never on a CUDA machine.
        now: import every trigger module here, so every shim is applied on return (tests that inspect them).

    Returns:
        The shims of :data:`VERL_SHIMS` applied in this process so far, in the order applied (empty when not
        requested or CUDA is present); :data:`rlec.megatron.compat.APPLIED` lists them with every other shim.
    """
    if torch.cuda.is_available() or not (force or cpu_requested()):
        return []
    import wrapt

    register_platform()
    wrapt.register_post_import_hook(lambda _module: register_engines(), TRANSFORMER_IMPL)
    for shim in VERL_SHIMS:
        wrapt.register_post_import_hook(lambda _module, one=shim: apply_shims((one,)), SHIM_TRIGGERS[shim.name])
    if now:
        for module in dict.fromkeys((TRANSFORMER_IMPL, *SHIM_TRIGGERS.values())):
            importlib.import_module(module)
    names = {shim.name for shim in VERL_SHIMS}
    return [name for name in APPLIED if name in names]
