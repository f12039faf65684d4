"""The CPU wing's agent-loop worker shims (rlec.cpu.agent_loop_worker): one reward call per reward worker and one
TransferQueue put per ``generate_sequences`` chunk (``agent_loop_chunked_puts``), the agent loop built without hydra
(``agent_loop_direct_build``).

The reference is verl 0.9.1's own ``AgentLoopWorkerTQ`` on the same prompts, the same agent-loop outputs (finishing
in the same shuffled order across groups), the same reward workers and the same ``random`` state
(``agent_loop_harness.py``); TransferQueue is a recorder that keeps each key's row as TransferQueue's storage slices it.
The real TransferQueue is compared in ``agent_loop_tq_job.py`` (a Ray job). The drift guard pins every verl source
the shims rely on.
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib.util
import inspect
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from tensordict import NonTensorStack

from rlec.cpu import agent_loop_worker as alw
from rlec.cpu import verl_shims as cpu
from rlec.megatron.compat import is_patched

_spec = importlib.util.spec_from_file_location("agent_loop_harness", Path(__file__).with_name("agent_loop_harness.py"))
harness = importlib.util.module_from_spec(_spec)
sys.modules["agent_loop_harness"] = harness  # hydra locates the registered ToyLoop by its module's name
_spec.loader.exec_module(harness)

BOTH = (alw.ChunkedPutsMixin, alw.DirectBuildMixin)

# sha256 of verl 0.9.1's sources the shims run or rely on (inspect.getsource): read them again when one changes
VERL_SOURCE_SHA256 = {
    "AgentLoopWorkerTQ.generate_sequences": "4d7178988eae6a715129f48ecfb9d62bc4833a4ee54e9ef96e94e8fdfebf6ab6",
    "AgentLoopWorkerTQ._run_prompt": "3d9bca6b0ea5fe25f5f99d3d86ba874a87f649fe362d379dc434409228cd6d32",
    "AgentLoopWorkerTQ._agent_loop_postprocess": "523edacbff73640dee470baf8c1f09fb3450e4095c05d5d2226f9ef706604b5b",
    "AgentLoopWorker._run_agent_loop": "32c3d607c5d4c9fa124c9d53a476689b63aeb2662f28c9cc1933fc6ec3e9e989",
    "AgentLoopWorker._compute_score": "cf4b57719ad3c1b236e49fb99dddc4f6cf05bc0fb125e1475ce5c2534af2b742",
    "RewardLoopWorker.compute_score_batch": "9852cc45bd3fc72deaa3a195fee09401fefeb1d809e9fdd21c25986adba238b9",
    "AgentLoopManagerTQ.__init__": "9f1e99d66170d3326c6c1d0062ba37ad35dcff0585fdf38e7998acd38efe8de5",
    "register": "d4713a91cdbbbe838a94a77d7089c113f63b95b0d635796db0b24c5fb25389bb",
}


def verl_sources() -> dict[str, str]:
    from verl.experimental.agent_loop import agent_loop
    from verl.experimental.reward_loop.reward_loop import RewardLoopWorker
    from verl.trainer.ppo.v1.agent_loop_tq import AgentLoopManagerTQ

    tq_worker = alw.verl_worker_class()
    objects = {
        "AgentLoopWorkerTQ.generate_sequences": tq_worker.generate_sequences,
        "AgentLoopWorkerTQ._run_prompt": tq_worker._run_prompt,
        "AgentLoopWorkerTQ._agent_loop_postprocess": tq_worker._agent_loop_postprocess,
        "AgentLoopWorker._run_agent_loop": agent_loop.AgentLoopWorker._run_agent_loop,
        "AgentLoopWorker._compute_score": agent_loop.AgentLoopWorker._compute_score,
        "RewardLoopWorker.compute_score_batch": RewardLoopWorker.compute_score_batch,
        "AgentLoopManagerTQ.__init__": AgentLoopManagerTQ.__init__,
        "register": agent_loop.register,
    }
    return {name: inspect.getsource(inspect.unwrap(obj)) for name, obj in objects.items()}


class RecordingTQ:
    """TransferQueue as the agent loop writes it: every status and put in order, and each key's row as the storage
    slices a put's TensorDict (a nested column unbound, a dense one indexed, a NonTensorStack listed)."""

    def __init__(self, fail_status_of: str | None = None) -> None:
        self.log: list[tuple] = []
        self.rows: dict[str, tuple[str, dict, dict]] = {}
        self.fail_status_of = fail_status_of

    async def async_kv_put(self, key: str, partition_id: str, fields: Any = None, tag: dict | None = None) -> None:
        if key == self.fail_status_of and tag["status"] == "running":
            raise ConnectionError("TransferQueue unreachable")
        self.log.append(("status", key, tag["status"]))

    async def async_kv_batch_put(self, keys: list[str], partition_id: str, fields: Any = None,
                                 tags: list[dict] | None = None, data_parser: Any = None) -> None:
        self.log.append(("put", tuple(keys)))
        for i, key in enumerate(keys):
            self.rows[key] = (partition_id, tags[i], {name: _row(fields.get(name), i) for name in fields.keys()})

    def keys_put(self) -> list[str]:
        return [key for event in self.log if event[0] == "put" for key in event[1]]

    def puts(self) -> int:
        return sum(event[0] == "put" for event in self.log)


def _row(column: Any, i: int) -> Any:
    if isinstance(column, torch.Tensor):
        return column.unbind()[i] if column.is_nested else column[i]
    if isinstance(column, NonTensorStack):
        return column.tolist()[i]
    return column.data


def assert_same_rows(a: dict, b: dict) -> None:
    assert list(a) == list(b)
    for key in a:
        (part_a, tag_a, row_a), (part_b, tag_b, row_b) = a[key], b[key]
        assert (part_a, tag_a) == (part_b, tag_b), key
        assert sorted(row_a) == sorted(row_b), key
        for name in row_a:
            x, y = row_a[name], row_b[name]
            if isinstance(x, torch.Tensor):
                assert isinstance(y, torch.Tensor) and x.dtype == y.dtype and torch.equal(x, y), (key, name)
            elif name == "metrics":  # the timings (compute_score waited for the chunk's call)
                assert sorted(x) == sorted(y), (key, name)
            else:
                assert x == y, (key, name)


def run(mixins: tuple[type, ...], monkeypatch, tq: RecordingTQ | None = None) -> dict[str, Any]:
    """One step through verl's worker with ``mixins``: what TransferQueue received and what the reward workers did."""
    from verl.trainer.ppo.v1 import agent_loop_tq

    tq = tq or RecordingTQ()
    monkeypatch.setattr(agent_loop_tq, "tq", tq)
    handles = [harness.FakeHandle(harness.FakeRewardWorker(name)) for name in ("r0", "r1")]
    worker = harness.make_worker(mixins, handles)
    asyncio.run(asyncio.wait_for(harness.run_step(worker, harness.prompt_batch()), timeout=60))
    return {"tq": tq, "handles": handles, "worker": worker}


def test_chunked_puts_write_verls_rows_keys_order_and_scores_in_one_put_and_one_call_per_reward_worker(monkeypatch):
    verl = run((), monkeypatch)
    ours = run(BOTH, monkeypatch)
    sessions = sum(n for _, n in harness.PROMPTS)
    # verl: a reward call and a put per sample
    assert sum(h.calls["compute_score"] for h in verl["handles"]) == sessions and verl["tq"].puts() == sessions
    # here: one put, one batch call per reward worker drawn, no per-sample call
    assert ours["tq"].puts() == 1
    assert [h.calls for h in ours["handles"]] == [{"compute_score": 0, "compute_score_batch": 1}] * 2
    # the same keys, created in the same order (the order the sessions finished, groups interleaved)
    expected = [f"{uid}_{s}_0" for uid, s in harness.session_order()]
    assert verl["tq"].keys_put() == expected and ours["tq"].keys_put() == expected
    # the same rows and tags: prompts, responses, masks, positions, rollout log-probs, rm_scores, reward info ...
    assert_same_rows(verl["tq"].rows, ours["tq"].rows)
    row = ours["tq"].rows[expected[0]][2]
    assert {"rm_scores", "rollout_log_probs", "input_ids", "position_ids", "extra_fields", "uid"} <= set(row)
    # every sample scored once, each by the reward worker verl's random.choice drew for it, in the same order
    for a, b in zip(verl["handles"], ours["handles"], strict=True):
        assert a.worker.scored == b.worker.scored and a.worker.scored
    # a group's status: running, then finished after its samples' rows
    for tq in (verl["tq"], ours["tq"]):
        for uid, n in harness.PROMPTS:
            statuses = [i for i, event in enumerate(tq.log) if event[0] == "status" and event[1] == uid]
            assert [tq.log[i][2] for i in statuses] == ["running", "finished"]
            last_put = max(i for i, event in enumerate(tq.log) if event[0] == "put" and any(k.startswith(f"{uid}_") for k in event[1]))
            assert statuses[0] < last_put < statuses[1]


def test_failed_sessions_and_a_failed_prompt_end_the_chunk_as_verls_do(monkeypatch):
    """A session that raises fails its group (the others still written); a prompt whose "running" status put raises
    never starts its sessions (verl's _run_prompt raises before its try): the chunk stops waiting for them (no hang)."""
    failing = {"u-b"}
    original = harness.ToyLoop.run

    async def run_or_fail(self, sampling_params, **kwargs):
        out = await original(self, sampling_params, **kwargs)
        if kwargs["uid"] in failing and int(kwargs["session_id"]) == 1:
            raise RuntimeError("agent loop failed")
        return out

    monkeypatch.setattr(harness.ToyLoop, "run", run_or_fail)
    monkeypatch.setattr(harness, "session_order", lambda seed=3, _order=harness.session_order: [
        key for key in _order(seed) if key[0] != "u-d"])  # u-d's session never starts: no turn for it
    verl = run((), monkeypatch, RecordingTQ(fail_status_of="u-d"))
    ours = run(BOTH, monkeypatch, RecordingTQ(fail_status_of="u-d"))
    assert ours["tq"].puts() == 1
    assert verl["tq"].keys_put() == ours["tq"].keys_put() and "u-b_0_0" in ours["tq"].keys_put()
    assert not any(k.startswith(("u-b_1_", "u-d_")) for k in ours["tq"].keys_put())
    assert_same_rows(verl["tq"].rows, ours["tq"].rows)
    statuses = [event for event in ours["tq"].log if event[0] == "status"]
    assert statuses == [event for event in verl["tq"].log if event[0] == "status"]
    assert ("status", "u-b", "failure") in statuses and not any(event[1] == "u-d" for event in statuses)


def test_direct_build_passes_the_agent_loop_the_objects_hydra_passes(monkeypatch):
    harness.BUILT.clear()
    run((), monkeypatch)  # verl's hydra.utils.instantiate
    via_hydra = list(harness.BUILT)
    harness.BUILT.clear()
    import hydra

    def no_hydra(*args, **kwargs):
        raise AssertionError("hydra.utils.instantiate called for a registered agent loop")

    monkeypatch.setattr(hydra.utils, "instantiate", no_hydra)
    built = run((alw.DirectBuildMixin,), monkeypatch)
    direct = list(harness.BUILT)
    assert len(direct) == len(via_hydra) == sum(n for _, n in harness.PROMPTS)
    worker = built["worker"]
    for a, b in zip(via_hydra, direct, strict=True):
        assert sorted(a) == sorted(b)
        for name in ("server_manager", "tokenizer", "processor", "hf_model_type", "dataset_cls"):
            assert b[name] is getattr(worker, {"server_manager": "llm_client"}.get(name, name))
            assert type(a[name]) is type(b[name])
        assert type(a["trainer_config"]) is type(b["trainer_config"]) and b["trainer_config"].config is worker.config
        assert b["data_config"].config is worker.config.data and b["tools"].tools is worker.tools
    # an entry with more than _target_ (a YAML agent-loop config) is hydra's
    with pytest.raises(AssertionError, match="hydra.utils.instantiate called"):
        alw.instantiate_directly({"_target_": "builtins.dict", "name": "x"})


def test_data_proto_rows_answer_compute_score_batch_one_sample_each():
    rows = alw.DataProtoRows(["a", "b", "c"])
    assert len(rows) == 3 and rows[1:2] == "b" and rows[2] == "c"
    with pytest.raises(IndexError):
        rows[0:2]


def test_the_shims_make_verls_manager_build_the_cpu_worker_class():
    from verl.trainer.ppo.v1 import agent_loop_tq

    cpu.enable_cpu(force=True, now=True)
    assert {"agent_loop_chunked_puts", "agent_loop_direct_build"} <= set(cpu.enable_cpu(force=True))
    assert is_patched(agent_loop_tq.AgentLoopManagerTQ.__init__, "agent_loop_worker_class")
    manager = agent_loop_tq.AgentLoopManagerTQ.__new__(agent_loop_tq.AgentLoopManagerTQ)
    from omegaconf import OmegaConf

    agent_loop_tq.AgentLoopManagerTQ.__init__(manager, OmegaConf.create({"actor_rollout_ref": {"rollout": {}, "model": {}}}),
                                              llm_client=None)
    cls = manager.agent_loop_workers_class.__ray_metadata__.modified_class.__ray_actor_class__
    assert cls.__mro__[1:4] == (alw.ChunkedPutsMixin, alw.DirectBuildMixin, alw.verl_worker_class())


def test_drift_verls_agent_loop_sources_are_the_ones_read():
    """The shims run verl's postprocess and _run_agent_loop with names rebound, count sessions around verl's
    _run_prompt and generate_sequences, and call RewardLoopWorker.compute_score_batch with one DataProto per row. A
    verl release that changes one of these fails here: read it again (the module docstring says what is relied on),
    rerun the tests above, then update the hash."""
    got = {name: hashlib.sha256(source.encode()).hexdigest() for name, source in verl_sources().items()}
    assert got == VERL_SOURCE_SHA256
    assert alw.AGENT_LOOP_CHUNKED_PUTS.needed() and alw.AGENT_LOOP_DIRECT_BUILD.needed()
    assert cpu.SHIM_TRIGGERS["agent_loop_chunked_puts"] == cpu.SHIM_TRIGGERS["agent_loop_direct_build"] == alw.VERL_TQ_MODULE


@pytest.mark.slow
def test_real_transfer_queue_holds_the_same_rows_after_the_chunked_put(run_job):
    """verl's per-sample puts and the chunk's one put, each into a real TransferQueue (Ray), read back with
    kv_batch_get: the same keys in the same order (kv_list) and the same values (agent_loop_tq_job.py)."""
    result = run_job(Path(__file__).with_name("agent_loop_tq_job.py"))
    assert result["puts"] == {"verl": 13, "chunked": 1}
    assert result["same_keys_in_order"] and result["same_tags"] and result["same_values"], result
