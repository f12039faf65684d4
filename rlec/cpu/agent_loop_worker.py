"""verl's TransferQueue agent-loop worker on CPU with less per-sample framework work: the CPU wing's
``agent_loop_chunked_puts`` and ``agent_loop_direct_build`` shims (``docs/speed.md``, levers 1 and 4).

verl 0.9.1's ``AgentLoopWorkerTQ`` runs one agent loop per sample. Each sample builds its agent loop with
``hydra.utils.instantiate`` (an OmegaConf create / merge, ~0.35 s a step of the e3 premise gate's 2.3 s on the worker's
thread), then, in ``_agent_loop_postprocess``, makes one Ray call to a reward worker (``_compute_score`` ->
``RewardLoopWorker.compute_score``, ~0.36 s a step) and one TransferQueue put (``async_kv_batch_put``, ~0.73 s).

- :class:`ChunkedPutsMixin` (``agent_loop_chunked_puts``): the samples of one ``generate_sequences`` call (the chunk
  verl's manager hands the worker) make **one** reward call per reward worker (``RewardLoopWorker.compute_score_batch``,
  which scores each row with the same ``compute_score`` call verl makes per sample) and **one** put. verl's own
  ``_agent_loop_postprocess`` runs for every sample, unchanged except that its two module names ``tq`` and
  ``list_of_dict_to_tensordict`` are rlec's (:func:`rebound`): inside a chunk its put hands the rows to the chunk
  instead of writing them, and the reward worker's handle (:class:`DeferringHandle`) hands its request to the chunk.
  When every sample of the chunk is waiting on the chunk (or has ended), the chunk scores the waiting requests (one
  call per reward worker, in the order the samples asked, the worker each sample drew with verl's
  ``random.choice``), then, once they are all waiting again, writes the waiting rows in one put, in the order the
  samples asked: the keys, tags and rows verl's per-sample puts write, created in the same order. A group's
  ``finished`` status is put by verl's ``_run_prompt`` after its sessions settle, so after the chunk's put, as before.
- :class:`DirectBuildMixin` (``agent_loop_direct_build``): verl's own ``_run_agent_loop`` with ``hydra`` bound to a
  stand-in whose ``utils.instantiate`` calls the registered class with the same keyword arguments when the registry
  entry is only ``{"_target_": ...}`` (what verl's and rlec's ``register`` write); any other entry (a YAML agent-loop
  config) goes to hydra. hydra hands the constructor the same objects (identity), so the agent loop is the same.

What differs from verl: the chunk's samples reach TransferQueue together, when the last one is scored, rather than one
by one; a group becomes sampleable only after its ``finished`` status, which verl already puts after all its samples,
and rlec's CPU trainer (``rlec_sync``) waits for the whole step's groups, so a step sees the same batch. A reward
call that raises fails every sample of its reward worker's request in the chunk (verl: that sample alone), and a
put that raises fails the samples of that put. Both shims are CPU-only: on a GPU, async trainers read groups as
they finish and a chunk is hundreds of samples, so holding them back would change when groups are seen.
``tests/verl_plugin/test_agent_loop_worker.py`` checks the same TransferQueue writes and scores as verl's
per-sample path and pins the verl sources this relies on.
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import sys
import types
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Callable

from rlec.megatron.compat import Shim, is_patched, mark_patched, source_has

__all__ = ["AGENT_LOOP_CHUNKED_PUTS", "AGENT_LOOP_DIRECT_BUILD", "AgentLoopChunk", "ChunkedPutsMixin",
           "DataProtoRows", "DeferringHandle", "DirectBuildMixin", "agent_loop_worker_class", "rebound",
           "verl_worker_class"]

VERL_TQ_MODULE = "verl.trainer.ppo.v1.agent_loop_tq"
VERL_AGENT_LOOP_MODULE = "verl.experimental.agent_loop.agent_loop"

# the chunk of the generate_sequences call this task runs for (tasks copy it from the call that created them), and
# the prompt group of this session (set in _run_prompt, copied into its sessions)
_CHUNK: ContextVar["AgentLoopChunk | None"] = ContextVar("rlec_agent_loop_chunk", default=None)
_PROMPT: ContextVar["_PromptSlot | None"] = ContextVar("rlec_agent_loop_prompt", default=None)


def verl_worker_class() -> type:
    """verl's ``AgentLoopWorkerTQ`` class itself (the module holds its Ray actor class)."""
    actor = importlib.import_module(VERL_TQ_MODULE).AgentLoopWorkerTQ
    return actor.__ray_metadata__.modified_class.__ray_actor_class__


def rebound(func: Callable[..., Any], **names: Any) -> Callable[..., Any]:
    """``func`` (a function) with the module-global ``names`` replaced: the same code object, defaults and closure,
    run with a copy of its module's globals in which ``names`` are bound to the given objects."""
    scope = dict(func.__globals__)
    scope.update(names)
    new = types.FunctionType(func.__code__, scope, func.__name__, func.__defaults__, func.__closure__)
    new.__kwdefaults__ = func.__kwdefaults__
    return functools.update_wrapper(new, func)


# --- lever 4: the agent loop built without hydra ----------------------------------------------------
@functools.lru_cache(maxsize=None)
def _agent_loop_class(target: str) -> type:
    from hydra.utils import get_class

    return get_class(target)


def instantiate_directly(config: Any, **kwargs: Any) -> Any:
    """What ``hydra.utils.instantiate(config=config, **kwargs)`` returns for verl's agent-loop registry entries:
    the class named by ``_target_`` called with ``kwargs`` when the entry is exactly ``{"_target_": path}``; any other
    entry (keys beside ``_target_``, a DictConfig from an agent-loop YAML) is hydra's."""
    if isinstance(config, dict) and list(config) == ["_target_"] and isinstance(config["_target_"], str):
        return _agent_loop_class(config["_target_"])(**kwargs)
    import hydra

    return hydra.utils.instantiate(config=config, **kwargs)


_DIRECT_HYDRA = types.SimpleNamespace(utils=types.SimpleNamespace(instantiate=instantiate_directly))


class DirectBuildMixin:
    """For verl's ``AgentLoopWorker``: ``_run_agent_loop`` is verl's, with ``hydra`` bound to a stand-in that builds
    the agent loop directly (:func:`instantiate_directly`)."""

    async def _run_agent_loop(self, *args: Any, **kwargs: Any) -> Any:
        parent = super()._run_agent_loop.__func__  # type: ignore[misc]
        run = _rebound_once(parent, hydra=_DIRECT_HYDRA)
        return await run(self, *args, **kwargs)


_REBOUND: dict[tuple[Any, ...], Callable[..., Any]] = {}


def _rebound_once(func: Callable[..., Any], **names: Any) -> Callable[..., Any]:
    """:func:`rebound`, made once per function and set of names (each caller always binds the same objects)."""
    key = (func, *sorted(names))
    if key not in _REBOUND:
        _REBOUND[key] = rebound(func, **names)
    return _REBOUND[key]


# --- lever 1: one reward call per reward worker and one put per chunk -------------------------------
class DataProtoRows(list):
    """The per-sample ``DataProto`` s of a chunk, as ``RewardLoopWorker.compute_score_batch`` reads its batch:
    ``len`` and ``data[i : i + 1]``, which here is the ``i``-th sample's own ``DataProto`` (rows of different lengths
    cannot share one)."""

    def __getitem__(self, item: Any) -> Any:
        if isinstance(item, slice):
            start, stop, step = item.indices(len(self))
            if stop - start == 1 and step == 1:
                return list.__getitem__(self, start)
            raise IndexError(f"DataProtoRows holds one DataProto per sample: slice {item} asks for {stop - start}")
        return list.__getitem__(self, item)


class _Rows(list):
    """The row dicts verl's postprocess would have made one TensorDict of, held until the chunk's put."""


@dataclass
class _PromptSlot:
    n: int
    started: int = 0


@dataclass
class AgentLoopChunk:
    """The sessions of one ``generate_sequences`` call, and the reward requests and puts they wait on.

    Sessions expected: the sum of each prompt group's ``n``, known once every prompt task verl created has started.
    The chunk dispatches when every expected session waits on it or has ended: first the waiting reward requests
    (one ``compute_score_batch`` call per reward worker), else the waiting puts (one ``async_kv_batch_put`` per run of
    rows with the same partition and fields); one dispatch at a time.
    """

    prompts_created: int | None = None
    prompts_entered: int = 0
    expected: int = 0
    ended: int = 0
    waiting: int = 0
    scores: list[tuple[Any, Any, asyncio.Future]] = field(default_factory=list)
    puts: list[tuple[dict[str, Any], asyncio.Future]] = field(default_factory=list)
    _task: asyncio.Task | None = None

    # --- accounting -------------------------------------------------------------------------------
    def created(self, prompts: int) -> None:
        """verl's ``generate_sequences`` created ``prompts`` prompt tasks (none has started yet)."""
        self.prompts_created = prompts
        self.poke()

    def enter(self, slot: _PromptSlot) -> None:
        """A prompt task started (verl's ``_run_prompt``): its ``slot.n`` sessions are expected."""
        self.prompts_entered += 1
        self.expected += slot.n

    def prompt_done(self, slot: _PromptSlot) -> None:
        """A prompt task ended: sessions it never started are no longer expected."""
        self.expected -= slot.n - slot.started
        self.poke()

    def session_ended(self) -> None:
        """A session (verl's ``_run_agent_loop``) returned or raised: it no longer holds the dispatch back."""
        self.ended += 1
        self.poke()

    def _wait(self) -> asyncio.Future:
        self.waiting += 1
        return asyncio.get_running_loop().create_future()

    def defer_score(self, handle: Any, data: Any) -> asyncio.Future:
        """The reward request ``handle.compute_score.remote(data)`` of a session, answered at the next dispatch."""
        future = self._wait()
        self.scores.append((handle, data, future))
        self.poke()
        return future

    def defer_put(self, request: dict[str, Any]) -> asyncio.Future:
        """A session's ``async_kv_batch_put(**request)`` (``fields`` a :class:`_Rows`), written at the next dispatch."""
        future = self._wait()
        self.puts.append((request, future))
        self.poke()
        return future

    def _answer(self, future: asyncio.Future, result: Any = None, error: BaseException | None = None) -> None:
        self.waiting -= 1  # at once: the session no longer waits on the chunk, even before it resumes
        if not future.done():
            future.set_exception(error) if error is not None else future.set_result(result)

    # --- dispatch ---------------------------------------------------------------------------------
    def poke(self) -> None:
        """Dispatch if every expected session waits on the chunk or has ended, and nothing is in flight."""
        ready = (self.prompts_created is not None and self.prompts_entered >= self.prompts_created
                 and self.waiting + self.ended >= self.expected and self._task is None)
        if ready and (self.scores or self.puts):
            self._task = asyncio.get_running_loop().create_task(self._dispatch())

    async def _dispatch(self) -> None:
        try:
            if self.scores:
                batch, self.scores = self.scores, []
                await self._score(batch)
            else:
                batch, self.puts = self.puts, []
                await self._put(batch)
        finally:
            self._task = None
            self.poke()

    async def _score(self, batch: list[tuple[Any, Any, asyncio.Future]]) -> None:
        by_handle: dict[int, list[tuple[Any, Any, asyncio.Future]]] = {}
        for request in batch:  # the samples' order, per reward worker
            by_handle.setdefault(id(request[0]), []).append(request)
        answers: dict[int, tuple[Any, BaseException | None]] = {}

        async def one_call(requests: list[tuple[Any, Any, asyncio.Future]]) -> None:
            handle = requests[0][0]
            try:
                results = await handle.compute_score_batch.remote(DataProtoRows(data for _, data, _ in requests))
            except Exception as error:  # noqa: BLE001 - handed to every sample of the call, as verl's await would raise
                answers.update((id(future), (None, error)) for _, _, future in requests)
                return
            answers.update((id(future), (result, None)) for (_, _, future), result in zip(requests, results, strict=True))

        await asyncio.gather(*(one_call(requests) for requests in by_handle.values()))
        for _, _, future in batch:  # answered in the samples' order: they resume, and reach their puts, in it
            self._answer(future, *answers[id(future)])

    async def _put(self, batch: list[tuple[dict[str, Any], asyncio.Future]]) -> None:
        verl = _verl_tq_module()
        tq, to_tensordict = verl.tq, verl.list_of_dict_to_tensordict
        runs: list[list[tuple[dict[str, Any], asyncio.Future]]] = []
        last = None
        for request, future in batch:  # runs of rows one TensorDict can hold: one partition, the same fields
            signature = (request["partition_id"], tuple(request["fields"][0]), request["tags"] is None)
            if runs and signature == last:
                runs[-1].append((request, future))
            else:
                runs.append([(request, future)])
            last = signature
        for run in runs:  # one after another: keys are created in the samples' order
            keys = [key for request, _ in run for key in request["keys"]]
            rows = [row for request, _ in run for row in request["fields"]]
            tags = None if run[0][0]["tags"] is None else [tag for request, _ in run for tag in request["tags"]]
            try:
                meta = await tq.async_kv_batch_put(keys=keys, partition_id=run[0][0]["partition_id"],
                                                   fields=to_tensordict(rows), tags=tags)
            except Exception as error:  # noqa: BLE001 - handed to the samples of this put, as verl's await would raise
                for _, future in run:
                    self._answer(future, error=error)
                continue
            for _, future in run:
                self._answer(future, meta)


def _verl_tq_module() -> Any:
    return sys.modules[VERL_TQ_MODULE]


def _in_session() -> AgentLoopChunk | None:
    """The chunk of the current task when it is a session of one (else None: verl's own path)."""
    chunk = _CHUNK.get()
    return chunk if chunk is not None and _PROMPT.get() is not None else None


class DeferringHandle:
    """A reward worker's Ray handle whose ``compute_score.remote(data)`` waits for the chunk's call inside a chunk's
    session (:meth:`AgentLoopChunk.defer_score`); verl's own call anywhere else. Every other attribute is the handle's."""

    def __init__(self, handle: Any) -> None:
        self.handle = handle

    @property
    def compute_score(self) -> Any:
        """The handle's ``compute_score`` as verl calls it: ``.remote(data)``, deferred to the chunk in a session."""
        return types.SimpleNamespace(remote=self._compute_score_remote)

    def _compute_score_remote(self, data: Any) -> Any:
        chunk = _in_session()
        if chunk is None:
            return self.handle.compute_score.remote(data)
        return chunk.defer_score(self.handle, data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.handle, name)


def _rows_or_tensordict(list_of_dicts: list[dict[str, Any]]) -> Any:
    """verl's ``list_of_dict_to_tensordict`` as its TQ postprocess sees it: inside a chunk's session the rows
    themselves (the chunk builds one TensorDict of all its rows with verl's function)."""
    if _in_session() is not None:
        return _Rows(list_of_dicts)
    return _verl_tq_module().list_of_dict_to_tensordict(list_of_dicts)


class _DeferringTQ:
    """``transfer_queue`` as verl's TQ postprocess sees it: ``async_kv_batch_put`` of a chunk's session waits for the
    chunk's put; everything else is verl's module's ``tq``."""

    async def async_kv_batch_put(self, keys: list[str], partition_id: str, fields: Any = None,
                                 tags: list[dict[str, Any]] | None = None, data_parser: Any = None) -> Any:
        chunk = _in_session()
        if chunk is None or not isinstance(fields, _Rows) or data_parser is not None:
            if isinstance(fields, _Rows):
                fields = _verl_tq_module().list_of_dict_to_tensordict(list(fields))
            return await _verl_tq_module().tq.async_kv_batch_put(keys=keys, partition_id=partition_id, fields=fields,
                                                                 tags=tags, data_parser=data_parser)
        return await chunk.defer_put({"keys": list(keys), "partition_id": partition_id, "fields": fields,
                                      "tags": None if tags is None else list(tags)})

    def __getattr__(self, name: str) -> Any:
        return getattr(_verl_tq_module().tq, name)


_DEFERRING_TQ = _DeferringTQ()


class ChunkedPutsMixin:
    """For verl's ``AgentLoopWorkerTQ``: one reward call per reward worker and one TransferQueue put per
    ``generate_sequences`` call (:class:`AgentLoopChunk`), verl's own postprocess for every sample."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.reward_loop_worker_handles is not None:  # the same list length: verl's random.choice draws the same
            self.reward_loop_worker_handles = [DeferringHandle(h) for h in self.reward_loop_worker_handles]

    async def generate_sequences(self, batch: Any) -> None:
        """verl's ``generate_sequences``, its prompt tasks (and their sessions) sharing one :class:`AgentLoopChunk`."""
        chunk = AgentLoopChunk()
        token = _CHUNK.set(chunk)  # copied by the prompt tasks verl creates below
        before = set(self.background_tasks)
        try:
            return await super().generate_sequences(batch)
        finally:
            _CHUNK.reset(token)
            # verl creates its prompt tasks after its last await and returns: none has started yet
            chunk.created(len(self.background_tasks - before))

    async def _run_prompt(self, prompt: dict, sampling_params: dict, trajectory: dict, trace: bool = False) -> None:
        chunk = _CHUNK.get()
        if chunk is None:
            return await super()._run_prompt(prompt, sampling_params, trajectory, trace)
        config = self.config.actor_rollout_ref.rollout  # verl's n for this prompt, read as its _run_prompt reads it
        n = prompt.get("__rollout_n__", config.n if not trajectory["validate"] else config.val_kwargs.n)
        slot = _PromptSlot(int(n))
        token = _PROMPT.set(slot)  # copied by the sessions verl's _run_prompt creates
        chunk.enter(slot)
        try:
            return await super()._run_prompt(prompt, sampling_params, trajectory, trace)
        finally:
            _PROMPT.reset(token)
            chunk.prompt_done(slot)

    async def _run_agent_loop(self, *args: Any, **kwargs: Any) -> Any:
        chunk, slot = _CHUNK.get(), _PROMPT.get()
        if chunk is None or slot is None:
            return await super()._run_agent_loop(*args, **kwargs)
        slot.started += 1
        try:
            return await super()._run_agent_loop(*args, **kwargs)
        finally:
            chunk.session_ended()

    async def _agent_loop_postprocess(self, output: Any, validate: Any, **kwargs: Any) -> None:
        parent = super()._agent_loop_postprocess.__func__  # type: ignore[misc]
        postprocess = _rebound_once(parent, tq=_DEFERRING_TQ, list_of_dict_to_tensordict=_rows_or_tensordict)
        return await postprocess(self, output, validate, **kwargs)


# --- the shims ----------------------------------------------------------------------------------------
_MIXINS: list[type] = []  # the mixins of the shims applied in this process, in VERL_SHIMS order


def agent_loop_worker_class(mixins: list[type] | tuple[type, ...]) -> type:
    """verl's ``AgentLoopWorkerTQ`` with ``mixins`` in front, as the Ray actor class verl's manager creates."""
    import ray

    cls = type("CPUAgentLoopWorkerTQ", (*mixins, verl_worker_class()), {"__module__": __name__})
    return ray.remote(cls)


def _install_worker_class(mixin: type) -> None:
    from verl.trainer.ppo.v1.agent_loop_tq import AgentLoopManagerTQ

    if mixin not in _MIXINS:
        _MIXINS.append(mixin)
    init = AgentLoopManagerTQ.__init__
    if is_patched(init, "agent_loop_worker_class"):
        return

    @functools.wraps(init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        # ChunkedPutsMixin first (its _run_agent_loop counts the session around DirectBuildMixin's)
        order = [m for m in (ChunkedPutsMixin, DirectBuildMixin) if m in _MIXINS]
        self.agent_loop_workers_class = agent_loop_worker_class(order)

    AgentLoopManagerTQ.__init__ = mark_patched(__init__, "agent_loop_worker_class")


def _manager_builds_verls_class() -> bool:
    from verl.trainer.ppo.v1.agent_loop_tq import AgentLoopManagerTQ

    return source_has(AgentLoopManagerTQ.__init__, "self.agent_loop_workers_class = AgentLoopWorkerTQ")


def _chunked_puts_needed() -> bool:
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker
    from verl.experimental.reward_loop.reward_loop import RewardLoopWorker

    verl = verl_worker_class()
    postprocess = verl._agent_loop_postprocess
    return (_manager_builds_verls_class()
            # one put per sample, its TensorDict built by the module's list_of_dict_to_tensordict
            and source_has(postprocess, "await tq.async_kv_batch_put(")
            and source_has(postprocess, "list_of_dict_to_tensordict(fields)")
            and source_has(postprocess, "await self._compute_score(outputs, kwargs=kwargs)")
            # one reward call per sample, on a worker drawn from the handles
            and source_has(AgentLoopWorker._compute_score, "random.choice(self.reward_loop_worker_handles)")
            and source_has(AgentLoopWorker._compute_score, ".compute_score.remote(data)")
            # the reward worker's batch call scores each row as one compute_score call
            and source_has(RewardLoopWorker.compute_score_batch, "self.compute_score(data[i : i + 1])")
            # prompt tasks created after generate_sequences's last await, kept in background_tasks
            and source_has(verl.generate_sequences, "self.background_tasks.add(task)"))


def _chunked_puts_apply() -> None:
    _install_worker_class(ChunkedPutsMixin)


def _direct_build_needed() -> bool:
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker

    return _manager_builds_verls_class() and source_has(AgentLoopWorker._run_agent_loop, "hydra.utils.instantiate(")


def _direct_build_apply() -> None:
    _install_worker_class(DirectBuildMixin)


AGENT_LOOP_CHUNKED_PUTS = Shim(
    "agent_loop_chunked_puts", "~1.1 s a step of the agent-loop worker's 2.3 s (docs/speed.md, lever 1): verl's "
    "AgentLoopWorkerTQ makes one TransferQueue put and one reward Ray call per sample; one put and one reward call "
    "per reward worker per generate_sequences chunk here, the same rows, scores and keys in the same order",
    _chunked_puts_needed, _chunked_puts_apply)

AGENT_LOOP_DIRECT_BUILD = Shim(
    "agent_loop_direct_build", "~0.35 s a step (docs/speed.md, lever 4): verl builds every sample's agent loop with "
    "hydra.utils.instantiate (OmegaConf create / merge); the registered class is called with the same arguments here",
    _direct_build_needed, _direct_build_apply)
