"""verl's TransferQueue agent-loop worker driven without Ray, a model or a rollout server, for
``test_agent_loop_worker.py`` and ``agent_loop_tq_job.py``.

verl's own ``AgentLoopWorkerTQ`` methods run (``generate_sequences``, ``_run_prompt``, ``_run_agent_loop``,
``_agent_loop_postprocess``, ``_compute_score``); what stands in:

- the agent loop: :class:`ToyLoop` (registered with verl's ``register``), whose sessions finish in a fixed shuffled
  order across the prompt groups (:class:`Turns`), with prompt / response lengths and log-probs drawn per session;
- the reward workers: :class:`FakeRewardWorker`, verl's own ``RewardLoopWorker.compute_score_batch`` over a
  deterministic ``compute_score``, behind :class:`FakeHandle` (arguments pickled as Ray would);
- TransferQueue: whatever object the caller puts as ``verl.trainer.ppo.v1.agent_loop_tq.tq`` (a recorder, or the real
  module started in a Ray job).
"""

from __future__ import annotations

import asyncio
import pickle
import random
from typing import Any

import torch
from omegaconf import OmegaConf
from tensordict import NonTensorData, NonTensorStack, TensorDict
from verl.experimental.agent_loop.agent_loop import AgentLoopMetrics, AgentLoopOutput, register
from verl.experimental.reward_loop.reward_loop import RewardLoopWorker

from rlec.cpu.agent_loop_worker import verl_worker_class

TOY_LOOP = "rlec_test_toy_loop"
PROMPTS = [("u-a", 3), ("u-b", 2), ("u-c", 4), ("u-d", 1), ("u-e", 3)]  # (uid, that prompt's rollout n)
BUILT: list[dict[str, Any]] = []  # the keyword arguments every ToyLoop was built with


class Turns:
    """Sessions finish their ``run`` one at a time in a fixed order: session ``rank`` waits for its turn, and hands the
    turn on once it has run on to its next wait (its reward request, or its put)."""

    def __init__(self, order: list[tuple[str, int]]) -> None:
        self.rank = {key: i for i, key in enumerate(order)}
        self.events = [asyncio.Event() for _ in order]
        self.events[0].set()

    async def wait(self, uid: str, session: int) -> None:
        rank = self.rank[(uid, session)]
        await self.events[rank].wait()
        if rank + 1 < len(self.events):
            asyncio.get_running_loop().call_soon(self.events[rank + 1].set)


TURNS: list[Turns] = []


@register(TOY_LOOP)
class ToyLoop:
    """An agent loop with a scripted output per (uid, session)."""

    def __init__(self, **kwargs: Any) -> None:
        BUILT.append(kwargs)

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        uid, session = kwargs["uid"], int(kwargs["session_id"])
        draw = random.Random(f"{uid}/{session}")
        await TURNS[-1].wait(uid, session)
        prompt = [draw.randrange(5, 90) for _ in range(3 + draw.randrange(5))]
        response = [draw.randrange(5, 90) for _ in range(1 + draw.randrange(6))]
        return AgentLoopOutput(prompt_ids=prompt, response_ids=response, response_mask=[1] * len(response),
                               response_logprobs=[-draw.random() for _ in response], num_turns=2,
                               metrics=AgentLoopMetrics(generate_sequences=0.0),
                               extra_fields={"min_global_steps": 6, "max_global_steps": 6})


class FakeRewardWorker:
    """verl's ``RewardLoopWorker.compute_score_batch`` over a deterministic score of one sample's ``DataProto``."""

    compute_score_batch = RewardLoopWorker.compute_score_batch

    def __init__(self, name: str) -> None:
        self.name = name
        self.scored: list[str] = []

    async def compute_score(self, data: Any) -> dict:
        uid, session = str(data.non_tensor_batch["uid"][-1]), int(data.non_tensor_batch["session_id"][-1])
        self.scored.append(f"{uid}_{session}")
        responses, prompts = data.batch["responses"][-1], data.batch["prompts"][-1]
        score = float(responses.sum() % 7) / 7 - 0.25 * float(data.batch["attention_mask"].sum() % 3)
        return {"reward_score": score, "reward_extra_info": {"acc": score > 0, "worker": self.name,
                                                              "prompt_len": int(prompts.numel()),
                                                              "response_len": int(responses.numel())}}


class FakeHandle:
    """A Ray actor handle of a :class:`FakeRewardWorker`: ``method.remote(*args)`` pickles the arguments and runs the
    method as a task; counts the calls."""

    def __init__(self, worker: FakeRewardWorker) -> None:
        self.worker = worker
        self.calls = {"compute_score": 0, "compute_score_batch": 0}

    def __getattr__(self, name: str) -> Any:
        if name not in ("compute_score", "compute_score_batch"):
            raise AttributeError(name)
        handle = self

        class _Method:
            @staticmethod
            def remote(*args: Any) -> asyncio.Task:
                handle.calls[name] += 1
                args = pickle.loads(pickle.dumps(args))
                return asyncio.ensure_future(getattr(handle.worker, name)(*args))

        return _Method()


def config() -> Any:
    return OmegaConf.create({
        "actor_rollout_ref": {"rollout": {"n": 2, "temperature": 1.0, "top_p": 1.0, "top_k": -1,
                                          "calculate_log_probs": True, "agent": {"default_agent_loop": TOY_LOOP},
                                          "val_kwargs": {"n": 1, "temperature": 0.0, "top_p": 1.0, "top_k": -1}}},
        "data": {"max_prompt_length": 16},
    })


def prompt_batch(step: int = 7) -> TensorDict:
    """The batch verl's trainer hands ``generate_sequences``: per-prompt fields, the step, E3-style per-prompt n."""
    uids = [uid for uid, _ in PROMPTS]
    return TensorDict({
        "uid": NonTensorStack(*uids),
        "index": torch.arange(len(uids)),
        "raw_prompt": NonTensorStack(*[[{"role": "user", "content": f"question {u}"}] for u in uids]),
        "data_source": NonTensorStack(*["toy"] * len(uids)),
        "extra_info": NonTensorStack(*[{"target_p": 0.1 * i} for i in range(len(uids))]),
        "__rollout_n__": torch.tensor([n for _, n in PROMPTS]),
        "global_steps": NonTensorData(step),
    }, batch_size=[len(uids)])


def session_order(seed: int = 3) -> list[tuple[str, int]]:
    """Every (uid, session) of :data:`PROMPTS`, shuffled: the order the sessions' runs finish in, groups interleaved."""
    order = [(uid, s) for uid, n in PROMPTS for s in range(n)]
    random.Random(seed).shuffle(order)
    return order


def make_worker(mixins: tuple[type, ...], handles: list[FakeHandle] | None) -> Any:
    """verl's ``AgentLoopWorkerTQ`` (with ``mixins`` in front) holding the attributes its methods read, built
    without its constructor's model, tokenizer and TransferQueue set-up."""

    class Bare(verl_worker_class()):  # type: ignore[misc, valid-type]
        def __init__(self, **attrs: Any) -> None:
            self.__dict__.update(attrs)

    cls = type("HarnessWorker", (*mixins, Bare), {})
    return cls(config=config(), llm_client=object(), teacher_client=None, reward_loop_worker_handles=handles,
               tokenizer=object(), processor=None, hf_model_type=None, dataset_cls=object, tools=[],
               mm_processor_kwargs={}, distillation_enabled=False, background_tasks=set())


async def run_step(worker: Any, batch: TensorDict, seed: int = 0) -> None:
    """One ``generate_sequences`` call, awaited until every prompt task verl spawned has ended."""
    TURNS.append(Turns(session_order()))
    random.seed(seed)  # verl draws each sample's reward worker with random.choice
    await worker.generate_sequences(batch)
    while worker.background_tasks:
        await asyncio.gather(*list(worker.background_tasks), return_exceptions=True)  # verl logs, never raises
