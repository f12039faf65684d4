"""A CPU rollout for verl 0.9.1: transformers generation behind verl's async rollout-server interface.

verl 0.9.1 registers only vLLM, SGLang and TensorRT-LLM rollouts (``_ROLLOUT_REGISTRY`` in
``verl/workers/rollout/base.py``, ``RolloutReplicaRegistry`` in ``verl/workers/rollout/replica.py``),
all GPU-only. This module registers ``actor_rollout_ref.rollout.name=rlec_hf`` in both, so verl's own
trainer, agent loop (``AgentLoopWorkerTQ`` -> ``LLMServerClient.generate``) and weight-sync path
(``CheckpointEngineManager.update_weights`` -> ``ActorRolloutRefWorker.update_weights`` -> the
rollout's ``update_weights``, backend ``naive``) run unchanged on CPU:

- :class:`HFRolloutReplica` (verl's ``RolloutReplica``) starts one :class:`HFRolloutServer` Ray actor
  per replica, holding the Hugging Face model of ``actor_rollout_ref.model.path`` in fp32;
- :class:`HFRolloutServer` answers ``generate(prompt_ids, sampling_params, request_id)`` with a
  ``TokenOutput`` like vLLM's server. Requests that arrive together are generated as one batch per
  distinct (temperature, top-p, top-k, max tokens) through rlec's one generation engine
  (:class:`rlec.generation.HFEngine`, exact sampling by an exponential race, one generator per request), so E3's per-prompt temperature
  and verl's per-prompt ``__rollout_n__`` (each sample is one request) work as with vLLM; a request's
  ``sampling_params["seed"]`` seeds its own generator (as vLLM's per-request seed), so the same
  request gets the same tokens whatever batch it is generated in and a resumed run samples
  what an uninterrupted one did;
- :class:`HFServerAdapter` (verl's ``BaseRollout``, built inside each trainer worker) receives the
  trainer's exported Hugging Face weights and loads them into the server's model
  (:func:`rlec.megatron.hf_sync.load_into_hf_model`: per-expert hub names -> transformers' fused experts).

As vLLM's server, it returns on request the sampled tokens' log-probs (``rollout.calculate_log_probs``,
for rollout correction) and the routed experts (``rollout.enable_rollout_routing_replay``, for routing
replay R3), both from one teacher-forced pass of the rollout's model
(:func:`rlec.cpu.rollout_scores.score_tokens`). ``rlec.cpu.rollout_weight_noise`` > 0 (read from
``rollout.custom``) induces a train-inference mismatch: the server samples and scores with a perturbed copy of
the synced weights and counts, per response, the token-layer expert sets it routed differently from the
exact weights (:mod:`rlec.cpu.induced_mismatch`).

What it does **not** cover that vLLM does on GPUs (``tests/verl_plugin/test_cpu_rollout.py`` pins each):

- per-request seeds only through rlec's agent loops (:class:`rlec.cpu.agent_loops.ScriptedAnswersMixin` puts
  :func:`request_seed` of the data seed, the global step, the prompt's index and the sample's
  session into each request): a request without ``seed`` is drawn from a batch seed (``rollout.seed``,
  the replica and a batch counter), so its draws depend on the batch it lands in;
- tensor / pipeline / expert parallel rollout (one process per replica), prefix caching, continuous
  batching (a batch runs to its longest response), chunked prefill, sleep mode (weights stay in memory),
  multi-modal inputs, partial rollout (abort is a no-op: a batch always finishes),
  FP8 rollout quantization and ``repetition_penalty`` != 1.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import logging
import os
import time
from typing import Any, Generator

import ray
import torch

from rlec.verl_plugin.cpu_interface import ROLLOUT_NAME, request_seed, server_name

# generate() kwarg: return these response tokens (scored like a sample) instead of sampling
FORCED_TOKENS = "rlec_forced_tokens"
# requests arriving within this window of each other are generated as one batch
BATCH_WINDOW_S = 0.05

logger = logging.getLogger(__name__)

__all__ = ["FORCED_TOKENS", "HFRolloutReplica", "HFRolloutServer", "HFServerAdapter", "ROLLOUT_NAME", "register_rollout",
           "request_seed", "server_name"]


def _noise_settings(config: Any) -> Any:
    """``rlec.cpu``'s induced-mismatch settings from the rollout config's ``custom`` section (``layout/cpu.yaml``
    interpolates them there), checked as the schema checks them; the defaults (off) when absent.

    Raises:
        SettingError: a value outside its range, naming the ``rlec.cpu`` key.
    """
    from rlec.settings import CpuSettings

    custom = getattr(config, "custom", None) or {}
    settings = CpuSettings(rollout_weight_noise=float(custom.get("rlec_weight_noise", 0.0) or 0.0),
                           rollout_noise_seed=int(custom.get("rlec_noise_seed", 0) or 0))
    settings.check()
    return settings


def max_new_tokens(prompt_len: int, sampling_params: dict[str, Any], response_length: int, prompt_length: int) -> int:
    """Response budget of one request, as verl's vLLM server computes it.

    ``max_tokens`` (or ``max_new_tokens``) from the request when given, else
    ``min(response_length, prompt_length + response_length - prompt_len)``; at least 1.
    """
    if "max_tokens" in sampling_params:
        budget = int(sampling_params.pop("max_tokens"))
    elif "max_new_tokens" in sampling_params:
        budget = int(sampling_params.pop("max_new_tokens"))
    else:
        budget = min(response_length, prompt_length + response_length - prompt_len)
    return max(1, budget)


class HFRolloutServer:
    """One rollout replica's generation server on CPU (a Ray actor; see the module docstring).

    Args:
        config: verl's ``RolloutConfig`` (``response_length``, ``prompt_length``, ``seed``, ...).
        model_config: verl's ``HFModelConfig`` (``local_path``: the Hugging Face folder).
        replica_rank: the replica's index.
    """

    def __init__(self, config: Any, model_config: Any, replica_rank: int = 0) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from rlec.generation import HFEngine

        self.config = config
        self.noise = _noise_settings(config)  # checked before the model loads
        self.replica_rank = int(replica_rank)
        from verl.utils.config import omega_conf_to_dataclass
        from verl.workers.config import HFModelConfig

        if not isinstance(model_config, HFModelConfig):  # the replica passes the DictConfig section
            model_config = omega_conf_to_dataclass(model_config, dataclass_type=HFModelConfig)
        path = model_config.local_path
        threads = int(os.environ.get("RLEC_ROLLOUT_THREADS", "0"))
        if threads > 0:
            torch.set_num_threads(threads)
        tokenizer = AutoTokenizer.from_pretrained(path)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
        self.engine = HFEngine(model, tokenizer)
        self.global_steps: int | None = None
        self.seed = int(getattr(config, "seed", 0) or 0)
        self._pending: list[tuple[dict[str, Any], asyncio.Future]] = []
        self._drain: asyncio.Task | None = None
        # every forward of this replica (the batched sampling and each response's scoring) on one thread, one after
        # another: with one thread per awaiting request (asyncio.to_thread) up to 32 scoring forwards ran at once, each
        # with its own OpenMP team, on 2 cores. Serial, each keeps its batch-1 shape (bit-identical scores). The wall
        # figures did not settle it: one A/B of 4 make-run steps gave gen 8.7-9.9 -> 5.5-6.5 s with the same outcomes,
        # but a later fresh-clone make run on a busier box gave gen 6.7-10.4 s, as before the change
        self._forwards = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="rlec-rollout")
        self._lock = asyncio.Lock()
        self.stats = {"requests": 0, "batches": 0, "generated_tokens": 0, "seconds": 0.0, "weight_updates": 0}
        # rlec.cpu.rollout_weight_noise (layout/cpu.yaml passes it in rollout.custom): the rollout serves a perturbed
        # copy of the synced weights and keeps the exact ones (``self.exact_model``) to measure router disagreement
        self.exact_model: torch.nn.Module | None = None
        if self.noise.rollout_weight_noise > 0:
            import copy

            self.exact_model = copy.deepcopy(model).eval()
            self._perturb()

    # ---- generation ---------------------------------------------------------------------------
    async def generate(self, prompt_ids: list[int], sampling_params: dict[str, Any], request_id: str, **kwargs: Any) -> Any:
        """Token in, token out: the response ids of one sampled continuation (verl's ``TokenOutput``).

        ``sampling_params["logprobs"]`` (verl sets it from ``rollout.calculate_log_probs``) adds the
        sampled tokens' log-probs, ``rollout.enable_rollout_routing_replay`` the routed experts
        (:mod:`rlec.cpu.rollout_scores`). ``rlec_forced_tokens`` (a kwarg) returns those tokens,
        scored, instead of sampling (the scripted answers of :class:`rlec.cpu.agent_loops.ScriptedAnswersMixin`).

        Raises:
            ValueError: a repetition penalty other than 1, or multi-modal data.
        """
        params = dict(sampling_params)
        want_log_probs = bool(params.pop("logprobs", False))
        forced = kwargs.pop(FORCED_TOKENS, None)
        if float(params.pop("repetition_penalty", 1.0)) != 1.0:
            raise ValueError(f"rollout {ROLLOUT_NAME} supports repetition_penalty=1.0 only")
        if any(kwargs.get(k) is not None for k in ("image_data", "video_data", "audio_data")):
            raise ValueError(f"rollout {ROLLOUT_NAME} is text-only")
        ids = [int(t) for t in prompt_ids]
        seed = params.pop("seed", None)  # per-request (rlec's agent loops); None: the batch's seed
        if forced is not None:  # a scripted answer (rlec.cpu.agent_loops.ScriptedAnswersMixin): scored, not sampled
            return await self._output(ids, [int(t) for t in forced], "stop", params, want_log_probs)
        budget = max_new_tokens(len(ids), params, int(self.config.response_length), int(self.config.prompt_length))
        key = (float(params.get("temperature", 1.0)), float(params.get("top_p", 1.0)), int(params.get("top_k", -1) or -1), budget)
        future = asyncio.get_running_loop().create_future()
        self._pending.append(({"ids": ids, "key": key, "seed": None if seed is None else int(seed)}, future))
        if self._drain is None or self._drain.done():
            self._drain = asyncio.create_task(self._drain_pending())
        tokens, reason = await future
        return await self._output(ids, tokens, reason, params, want_log_probs)

    async def _output(self, ids: list[int], tokens: list[int], reason: str, params: dict[str, Any], want_log_probs: bool) -> Any:
        """The ``TokenOutput`` of one response, with its log-probs and routed experts when asked for (as vLLM's server)."""
        from verl.workers.rollout.replica import TokenOutput

        from rlec.cpu.rollout_scores import score_tokens

        routes = bool(getattr(self.config, "enable_rollout_routing_replay", False))
        compare = self.exact_model is not None  # an induced mismatch: measure the router disagreement too
        log_probs = experts = None
        extra: dict[str, Any] = {"global_steps": self.global_steps}
        if want_log_probs or routes or compare:
            sampling = {"temperature": float(params.get("temperature", 1.0)), "top_p": float(params.get("top_p", 1.0)),
                        "top_k": int(params.get("top_k", -1) or -1)}
            scores = await self._forward(score_tokens, self.engine.model, ids, tokens, **sampling,
                                         log_probs=want_log_probs, routes=routes or compare)
            log_probs, experts = scores.log_probs, scores.routed_experts
            if compare:
                from rlec.cpu.induced_mismatch import DIFF_FIELD, TOTAL_FIELD, router_disagreement

                exact = await self._forward(score_tokens, self.exact_model, ids, tokens, **sampling, log_probs=False, routes=True)
                # the response tokens' rows: the positions whose log-probs the update weights (the prompt's are left out)
                diff, total = router_disagreement(experts[len(ids):], exact.routed_experts[len(ids):])
                extra.update({DIFF_FIELD: diff, TOTAL_FIELD: total})
                if not routes:
                    experts = None
        return TokenOutput(token_ids=tokens, log_probs=log_probs, routed_experts=experts,
                           stop_reason="completed" if reason in ("stop", "length") else reason,
                           extra_fields=extra)

    async def _forward(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """``fn(*args, **kwargs)`` on the replica's one forward thread (queued behind the forwards before it)."""
        return await asyncio.get_running_loop().run_in_executor(self._forwards, functools.partial(fn, *args, **kwargs))

    async def _drain_pending(self) -> None:
        """Wait until requests stop arriving for :data:`BATCH_WINDOW_S`, then generate them by sampling key."""
        seen = -1
        while seen != len(self._pending):
            seen = len(self._pending)
            await asyncio.sleep(BATCH_WINDOW_S)
        async with self._lock:
            batch, self._pending = self._pending, []
            groups: dict[tuple, list[tuple[dict[str, Any], asyncio.Future]]] = {}
            for item in batch:
                groups.setdefault(item[0]["key"], []).append(item)
            for key, items in groups.items():
                try:
                    results = await self._forward(self._sample, [req["ids"] for req, _ in items], key,
                                                  [req.get("seed") for req, _ in items])
                except Exception as exc:  # every waiting request sees the failure
                    for _, fut in items:
                        if not fut.done():
                            fut.set_exception(exc)
                    continue
                for (_, fut), result in zip(items, results, strict=True):
                    if not fut.done():
                        fut.set_result(result)
        if self._pending:  # arrived while generating
            self._drain = asyncio.create_task(self._drain_pending())

    def _sample(self, prompt_ids: list[list[int]], key: tuple, seeds: list[int | None] | None = None) -> list[tuple[list[int], str]]:
        temperature, top_p, top_k, budget = key
        self.stats["batches"] += 1  # the batch counter also seeds the batch (requests without a seed of their own)
        seed = (self.seed * 1_000_003 + self.replica_rank * 10_007 + self.stats["batches"]) % (2**31)
        row_seeds = None
        if seeds is not None and any(s is not None for s in seeds):
            row_seeds = [s if s is not None else request_seed(seed, "batch", i, 0) for i, s in enumerate(seeds)]
        start = time.perf_counter()
        out = self.engine.sample(prompt_ids, n=1, max_new_tokens=budget, temperature=max(temperature, 0.0), top_p=top_p,
                                 top_k=top_k, seed=seed, row_seeds=row_seeds)
        lengths = out.response_mask.sum(dim=1).tolist()
        self.stats["requests"] += len(prompt_ids)
        self.stats["generated_tokens"] += int(sum(lengths))
        self.stats["seconds"] += time.perf_counter() - start
        return [(out.responses[i, : int(n)].tolist(), out.finish_reasons[i]) for i, n in enumerate(lengths)]

    async def probe(self, prompt_ids: list[list[int]], seeds: list[int], temperature: float = 1.0) -> list[dict[str, list]]:
        """One sampled response per row and the entropy of every response token (:mod:`rlec.verl_plugin.probe`).

        The rollout's own engine and weights sample each row from its own seed at ``temperature`` over the whole
        vocabulary (no top-k / top-p), with the budget a training request of that prompt gets; then one teacher-forced
        pass of the same model gives the entropy of the full next-token distribution at each response token
        (:func:`rlec.cpu.rollout_scores.response_entropies`). Behind the same lock and forward thread as
        training requests; the batch counter (the seed of requests without their own) is left as it was.

        Args:
            prompt_ids: per row, the rendered prompt's token ids (a prompt repeated once per sample).
            seeds: one sampling seed per row.
            temperature: > 0.

        Returns:
            Per row ``{"tokens": response ids (stop token included), "entropies": nats per token}``.

        Raises:
            ValueError: seeds and rows of unequal count, no rows, or temperature <= 0.
        """
        from rlec.cpu.rollout_scores import response_entropies

        if len(seeds) != len(prompt_ids) or not prompt_ids or not temperature > 0:
            raise ValueError(f"probe: {len(prompt_ids)} rows, {len(seeds)} seeds, temperature {temperature}: expected one "
                             "seed per row, at least one row and a temperature > 0")
        budgets = [max_new_tokens(len(ids), {}, int(self.config.response_length), int(self.config.prompt_length))
                   for ids in prompt_ids]
        tokens: list[list[int]] = [[] for _ in prompt_ids]

        def sample(rows: list[int], budget: int) -> None:
            out = self.engine.sample([prompt_ids[i] for i in rows], n=1, max_new_tokens=budget, temperature=float(temperature),
                                     row_seeds=[int(seeds[i]) for i in rows])
            for k, i in enumerate(rows):
                tokens[i] = out.responses[k, : int(out.response_mask[k].sum())].tolist()

        async with self._lock:
            for budget in sorted(set(budgets)):
                await self._forward(sample, [i for i, b in enumerate(budgets) if b == budget], budget)
            entropies = await self._forward(response_entropies, self.engine.model, prompt_ids, tokens,
                                            temperature=float(temperature))
        return [{"tokens": t, "entropies": e} for t, e in zip(tokens, entropies)]

    # ---- weights ------------------------------------------------------------------------------
    def load_weights(self, weights: dict[str, torch.Tensor]) -> int:
        """Load hub-layout Hugging Face weights (what mbridge exports) into the model; returns the count."""
        from rlec.megatron.hf_sync import load_into_hf_model

        if self.exact_model is None:
            count = load_into_hf_model(self.engine.model, weights)
        else:  # the exact weights, then the rollout's perturbed copy of them
            count = load_into_hf_model(self.exact_model, weights)
            self.engine.model.load_state_dict(self.exact_model.state_dict())
        self.stats["weight_updates"] += 1
        if self.exact_model is not None:
            self._perturb()
        return count

    def _perturb(self) -> None:
        """``rlec.cpu.rollout_weight_noise``: fresh seeded noise on the rollout's copy (version = the sync count)."""
        from rlec.cpu.induced_mismatch import perturb_weights

        perturb_weights(self.engine.model, self.noise.rollout_weight_noise, self.noise.rollout_noise_seed,
                        self.stats["weight_updates"])

    def set_global_steps(self, global_steps: int) -> None:
        """The weights' version, returned in every ``TokenOutput.extra_fields["global_steps"]`` (as vLLM's server)."""
        self.global_steps = global_steps

    def get_stats(self) -> dict[str, Any]:
        """Requests, batches, generated tokens, generation seconds and weight updates so far."""
        return dict(self.stats)

    # ---- verl's server control surface: memory stays where it is on CPU ---------------------------
    async def wake_up(self, *args: Any, **kwargs: Any) -> None:
        return None

    async def sleep(self, *args: Any, **kwargs: Any) -> None:
        return None

    async def clear_kv_cache(self) -> None:
        return None

    async def release_kv_cache(self) -> None:
        return None

    async def resume_kv_cache(self) -> None:
        return None

    async def abort_all_requests(self, reject_request: bool = False) -> None:
        return None

    async def resume_generation(self) -> None:
        return None

    async def start_profile(self, **kwargs: Any) -> None:
        return None

    async def stop_profile(self) -> None:
        return None


def _replica_base() -> type:
    from verl.workers.rollout.replica import RolloutReplica

    return RolloutReplica


def _adapter_base() -> type:
    from verl.workers.rollout.base import BaseRollout

    return BaseRollout


class HFRolloutReplica(_replica_base()):  # type: ignore[misc]
    """verl ``RolloutReplica`` of :class:`HFRolloutServer`: one CPU actor, no GPU of its own."""

    def rollout_worker_use_gpu(self) -> bool:
        return False

    async def launch_servers(self) -> None:
        server_cls = ray.remote(HFRolloutServer)
        server = server_cls.options(name=server_name(self.replica_rank), num_cpus=0,
                                    max_concurrency=self.max_concurrency).remote(self.config, self.model_config, self.replica_rank)
        await server.get_stats.remote()  # the model is loaded once this answers
        self.servers = [server]
        self._server_handle = server
        self._server_address = f"{ROLLOUT_NAME}://replica-{self.replica_rank}"


class HFServerAdapter(_adapter_base()):  # type: ignore[misc]
    """The trainer worker's side of :class:`HFRolloutServer`: weight updates (verl ``BaseRollout``)."""

    def __init__(self, config: Any, model_config: Any, device_mesh: Any, replica_rank: int = -1) -> None:
        super().__init__(config, model_config, device_mesh)
        rank = int(os.environ.get("RANK", "0"))
        world = int(self.config.tensor_model_parallel_size) * int(self.config.data_parallel_size) * int(
            self.config.pipeline_model_parallel_size)
        self.replica_rank = rank // world if replica_rank == -1 else replica_rank
        self.rollout_rank = rank % world
        self.server_handle: Any = None

    def _server(self) -> Any:
        if self.server_handle is None:
            self.server_handle = ray.get_actor(server_name(self.replica_rank))
        return self.server_handle

    async def resume(self, tags: list[str]) -> None:
        return None

    async def release(self) -> None:
        return None

    async def update_weights(self, weights: Generator[tuple[str, torch.Tensor], None, None], wire_format: str = "named_tensors",
                             global_steps: int | None = None, **kwargs: Any) -> None:
        """Send the trainer's exported weights to this replica's server (its first rank does; all ranks drain the generator).

        Raises:
            ValueError: ``wire_format`` other than ``named_tensors`` (delta sync is vLLM-only) or LoRA adapters.
        """
        if wire_format != "named_tensors":
            raise ValueError(f"rollout {ROLLOUT_NAME} takes full named tensors, got wire_format={wire_format!r}")
        if kwargs.get("peft_config") is not None:
            raise ValueError(f"rollout {ROLLOUT_NAME} does not take LoRA adapters")
        tensors = {name: tensor.detach().to("cpu", copy=True) for name, tensor in weights}
        if self.rollout_rank != 0:
            return
        server = self._server()
        await server.load_weights.remote(tensors)
        if global_steps is not None:
            await server.set_global_steps.remote(global_steps)


def register_rollout() -> None:
    """Register ``rlec_hf`` in verl's rollout registries (idempotent)."""
    from verl.workers.rollout import base
    from verl.workers.rollout.replica import RolloutReplicaRegistry

    base._ROLLOUT_REGISTRY[(ROLLOUT_NAME, "async")] = f"{__name__}.HFServerAdapter"
    RolloutReplicaRegistry.register(ROLLOUT_NAME, lambda: HFRolloutReplica)
