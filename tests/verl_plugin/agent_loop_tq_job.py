"""verl's per-sample TransferQueue puts and the CPU wing's one put per chunk, each into a real TransferQueue, read
back (run by test_agent_loop_worker.py in a fresh process)::

    python tests/verl_plugin/agent_loop_tq_job.py

The same step of ``agent_loop_harness`` runs twice, through verl's ``AgentLoopWorkerTQ`` and through it with
``ChunkedPutsMixin`` and ``DirectBuildMixin``; after each, the partition's keys in TransferQueue's own order
(``kv_list``, the order verl's replay buffer builds its batch in) and every key's values (``kv_batch_get``) are read,
then cleared. Prints one JSON line.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any


def _harness() -> Any:
    spec = importlib.util.spec_from_file_location("agent_loop_harness", Path(__file__).with_name("agent_loop_harness.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules["agent_loop_harness"] = module
    spec.loader.exec_module(module)
    return module


class CountingTQ:
    """The real ``transfer_queue`` module, counting ``async_kv_batch_put`` calls."""

    def __init__(self, real: Any) -> None:
        self.real, self.puts = real, 0

    async def async_kv_batch_put(self, *args: Any, **kwargs: Any) -> Any:
        self.puts += 1
        return await self.real.async_kv_batch_put(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


def _values(data: Any, i: int) -> dict[str, Any]:
    import torch
    from tensordict import NonTensorStack

    row = {}
    for name in data.keys():
        column = data.get(name)
        if isinstance(column, torch.Tensor):
            row[name] = column.unbind()[i] if column.is_nested else column[i]
        elif isinstance(column, NonTensorStack):
            row[name] = column.tolist()[i]
        else:
            row[name] = column.data
    return row


def _same(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    import torch

    if sorted(a) != sorted(b):
        return [f"fields {sorted(a)} != {sorted(b)}"]
    bad = []
    for name in a:
        x, y = a[name], b[name]
        if isinstance(x, torch.Tensor):
            if not (isinstance(y, torch.Tensor) and x.dtype == y.dtype and x.shape == y.shape and torch.equal(x, y)):
                bad.append(name)
        elif name == "metrics":  # timings
            if sorted(x) != sorted(y):
                bad.append(name)
        elif x != y:
            bad.append(name)
    return bad


def main() -> dict:
    import ray
    import transfer_queue as tq
    from verl.trainer.ppo.v1 import agent_loop_tq

    from rlec.config import compose
    from rlec.cpu import agent_loop_worker as alw

    harness = _harness()
    cfg = compose(["layout=tiny_1gpu", "transfer_queue.backend.SimpleStorage.num_data_storage_units=1"])
    ray.init(num_cpus=3, include_dashboard=False, log_to_driver=False)
    tq.init(cfg.transfer_queue)
    read: dict[str, Any] = {}
    puts: dict[str, int] = {}
    try:
        for name, mixins in (("verl", ()), ("chunked", (alw.ChunkedPutsMixin, alw.DirectBuildMixin))):
            counting = CountingTQ(tq)
            agent_loop_tq.tq = counting
            handles = [harness.FakeHandle(harness.FakeRewardWorker(n)) for n in ("r0", "r1")]
            worker = harness.make_worker(mixins, handles)
            asyncio.run(asyncio.wait_for(harness.run_step(worker, harness.prompt_batch()), timeout=300))
            agent_loop_tq.tq = tq
            puts[name] = counting.puts
            listed = tq.kv_list(partition_id="train")["train"]
            keys = [key for key, tag in listed.items() if not tag.get("is_prompt", False) and "_" in key]
            data = tq.kv_batch_get(keys=keys, partition_id="train")
            read[name] = {"keys": keys, "tags": [listed[k] for k in keys],
                          "rows": {key: _values(data, i) for i, key in enumerate(keys)}}
            tq.kv_clear(keys=list(listed), partition_id="train")
        a, b = read["verl"], read["chunked"]
        differences = {key: _same(a["rows"][key], b["rows"][key]) for key in a["keys"] if key in b["rows"]}
        return {"puts": puts, "keys": a["keys"], "same_keys_in_order": a["keys"] == b["keys"] and len(a["keys"]) == 13,
                "same_tags": a["tags"] == b["tags"],
                "same_values": not any(differences.values()), "differences": differences,
                "fields": sorted(a["rows"][a["keys"][0]])}
    finally:
        tq.close()
        ray.shutdown()


if __name__ == "__main__":
    print("RESULT " + json.dumps(main(), default=str))
