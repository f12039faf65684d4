"""The CPU wing's ``batch_device_once`` shim (rlec.cpu.batch_device): the batch moved to the CPU once, so verl's
per-micro-batch ``TensorDict.to`` returns each micro-batch as it is; the tensors the forward sees are the same objects.

The micro-batches are split by verl's own ``prepare_micro_batches`` from a batch shaped like the CPU layout's (nested
rows, per-row tensors, non-tensor settings), no engine and no process group.
"""

from __future__ import annotations

import hashlib
import inspect

import pytest
import torch

from rlec.cpu import batch_device
from rlec.cpu import verl_shims as cpu
from rlec.megatron.compat import is_patched

# sha256 of verl 0.9.1's MegatronEngine.forward_backward_batch (the method whose batch the shim replaces by its move)
FORWARD_BACKWARD_BATCH_SHA256 = "6773ffa916738379250d232cbd707b4f9ecad5dd3df801a527838b09344421ef"


def a_batch(rows: int = 8):
    """A batch as verl's actor worker hands it to the engine: nested per-token fields, per-row tensors, notes."""
    from verl.utils import tensordict_utils as tu

    g = torch.Generator().manual_seed(0)
    lengths = torch.randint(3, 12, (rows,), generator=g).tolist()

    def nested(dtype=torch.long):
        return torch.nested.as_nested_tensor([torch.randint(0, 50, (n,), generator=g).to(dtype) for n in lengths],
                                             layout=torch.jagged)

    data = tu.get_tensordict({"input_ids": nested(), "loss_mask": nested(), "old_log_probs": nested(torch.float32),
                              "temperature": torch.ones(rows), "uid": torch.arange(rows)},
                             non_tensor_dict={"micro_batch_size_per_gpu": 2, "use_dynamic_bsz": False,
                                              "calculate_entropy": True, "global_token_num": lengths})
    assert data.device is None  # as it arrives from the trainer: the case the shim is for
    return data


def micro_batches(data):
    from verl.workers.engine.utils import prepare_micro_batches

    return prepare_micro_batches(data, dp_group=None, same_micro_num_in_dp=False)[0]


def test_verls_per_micro_batch_move_rebuilds_each_micro_batch_unless_the_batch_carries_the_device():
    data = a_batch()
    unmoved, moved = micro_batches(data), micro_batches(batch_device.moved_once(data, "cpu"))
    assert len(unmoved) == len(moved) == 4
    assert all(mb.to("cpu") is not mb for mb in unmoved)  # today: a new tensordict per micro-batch, key by key
    assert all(mb.device == torch.device("cpu") and mb.to("cpu") is mb for mb in moved)  # early return
    for a, b in zip(unmoved, moved, strict=True):  # the same tensors, the same notes
        assert sorted(a.keys()) == sorted(b.keys())
        for key in a.keys():
            x, y = a[key], b[key]
            if isinstance(x, torch.Tensor):
                assert x.dtype == y.dtype and x.is_nested == y.is_nested
                assert torch.equal(x.values(), y.values()) if x.is_nested else torch.equal(x, y)
            else:
                assert x == y


def test_moved_once_only_for_a_cpu_target_and_a_batch_without_a_device():
    data = a_batch(2)
    moved = batch_device.moved_once(data, "cpu")
    assert moved is not data and data.device is None and moved.device == torch.device("cpu")
    assert all(moved[k] is data[k] for k in ("input_ids", "temperature"))  # the same tensor objects
    assert batch_device.moved_once(moved, "cpu") is moved  # already there
    assert batch_device.moved_once(data, "cuda") is data and batch_device.moved_once(data, 0) is data  # a GPU platform
    assert batch_device.moved_once({"a": 1}, "cpu") == {"a": 1}  # not a tensordict


def test_the_shim_hands_verls_forward_backward_batch_the_moved_batch(monkeypatch):
    from verl.workers.engine.megatron import transformer_impl as ti

    seen = []

    def recording_forward_backward_batch(self, data, loss_function, forward_only=False):
        seen.append((data, loss_function, forward_only))
        return "output"

    monkeypatch.setattr(ti.MegatronEngine, "forward_backward_batch", recording_forward_backward_batch)
    monkeypatch.setattr(ti, "get_device_id", lambda: "cpu")
    batch_device.BATCH_DEVICE_ONCE.apply()
    assert is_patched(ti.MegatronEngine.forward_backward_batch, "batch_device_once")
    assert ti.MegatronEngineWithLMHead.forward_backward_batch is ti.MegatronEngine.forward_backward_batch
    batch_device.BATCH_DEVICE_ONCE.apply()  # a second application is a no-op
    data = a_batch(2)
    assert ti.MegatronEngine.forward_backward_batch(object(), data, "loss", forward_only=True) == "output"
    (got, loss, forward_only), = seen
    assert got.device == torch.device("cpu") and got["input_ids"] is data["input_ids"]
    assert (loss, forward_only) == ("loss", True) and data.device is None  # the caller's batch keeps no device
    monkeypatch.setattr(ti, "get_device_id", lambda: 0)  # an accelerator: verl's own path, untouched
    ti.MegatronEngine.forward_backward_batch(object(), data, "loss")
    assert seen[-1][0] is data


def test_drift_verls_forward_backward_batch_is_the_one_read():
    """The shim hands forward_backward_batch a moved copy of its batch; that is the same computation only while the
    method (verl 0.9.1's, read for this) and its callers do not rely on the batch's identity. A release that changes
    it fails here: read it again (and its callers in verl/workers/engine_workers.py), then update the hash."""
    from verl.workers.engine.megatron import transformer_impl as ti

    source = inspect.getsource(inspect.unwrap(ti.MegatronEngine.forward_backward_batch))
    assert hashlib.sha256(source.encode()).hexdigest() == FORWARD_BACKWARD_BATCH_SHA256
    assert batch_device.BATCH_DEVICE_ONCE.needed()
    assert cpu.SHIM_TRIGGERS["batch_device_once"] == cpu.TRANSFORMER_IMPL


@pytest.mark.parametrize("caller", ["train_batch", "infer_batch"])
def test_drift_verls_callers_read_nothing_the_method_writes_into_the_batch(caller):
    """forward_backward_batch writes sp_size, batch_num_tokens, dp_size, num_micro_batch into its batch: with the shim
    they land in the moved copy. verl 0.9.1's callers read none of them after the call."""
    from verl.workers import engine_workers
    from verl.workers.engine import base

    for source in (inspect.getsource(getattr(base.BaseEngine, caller)),
                   inspect.getsource(getattr(engine_workers.TrainingWorker, caller))):
        after = source.split("forward_backward_batch(" if "forward_backward_batch(" in source else f"engine.{caller}(")[1]
        assert not any(key in after for key in ("sp_size", "batch_num_tokens", "dp_size", "num_micro_batch"))
