"""One device move per batch instead of one per micro-batch in verl's Megatron engine: the CPU wing's ``batch_device_once``.

verl 0.9.1's ``MegatronEngineWithLMHead.forward_step`` starts every micro-batch with ``batch.to(get_device_id())``.
On the CPU platform that is ``"cpu"`` and every tensor is already there, but the micro-batches verl splits off a
batch (``prepare_micro_batches`` -> ``tu.chunk_tensordict``) carry no device (the batch arrives without one), so
tensordict's ``to`` cannot return early: it rebuilds the micro-batch key by key, non-tensor entries included. The
e3 premise gate's profile put it at ~0.15 s a step in ``old_log_prob`` (32 micro-batches) and ~0.12 s in
``update_actor`` (``docs/speed.md``, lever 3).

Here ``MegatronEngine.forward_backward_batch`` moves the whole batch once (``data.to("cpu")``: a new tensordict
holding the same tensor objects, verl's own operation) when the platform's device is ``"cpu"`` and the batch carries
no device yet. ``chunk_tensordict`` passes the batch's device to its micro-batches, so the per-micro-batch ``to``
returns each micro-batch unchanged (tensordict's ``device == self.device`` early return, the path verl takes on any
batch already on its device). The tensors the forward sees are the same objects either way.

The one thing that differs: verl's non-tensor notes written into the batch inside ``forward_backward_batch``
(``sp_size``, ``batch_num_tokens``, ``dp_size``, ``num_micro_batch``) land in the moved copy, not in the caller's
tensordict. verl 0.9.1's callers (``BaseEngine.train_batch`` / ``infer_batch``, ``TrainingWorker.train_batch`` /
``infer_batch``) read none of them afterwards; ``tests/verl_plugin/test_batch_device.py`` pins
``forward_backward_batch``'s source, so a release that changes it is looked at again.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any

from rlec.megatron.compat import Shim, is_patched, mark_patched

__all__ = ["BATCH_DEVICE_ONCE", "moved_once"]


def moved_once(data: Any, device: Any) -> Any:
    """``data`` moved to ``device`` when that is the CPU and ``data`` (a tensordict) carries no device; else ``data``.

    Args:
        data: the batch verl's ``forward_backward_batch`` receives (a ``TensorDict``).
        device: the platform's device (``get_device_id()``: ``"cpu"`` on the CPU platform).

    Returns:
        ``data.to("cpu")`` (same tensors, device ``cpu``) or ``data`` itself.
    """
    if device != "cpu" or getattr(data, "device", "absent") is not None or not hasattr(data, "to"):
        return data
    return data.to(device)


def _device_once_needed() -> bool:
    from tensordict import TensorDictBase
    from verl.utils import tensordict_utils as tu
    from verl.workers.engine.megatron import transformer_impl as ti

    step = inspect.getsource(inspect.unwrap(ti.MegatronEngineWithLMHead.forward_step))
    batch = inspect.getsource(inspect.unwrap(ti.MegatronEngine.forward_backward_batch))
    return ("batch = batch.to(get_device_id())" in step  # the per-micro-batch move
            and "prepare_micro_batches(" in batch
            and "device=td.device" in inspect.getsource(tu.chunk_tensordict)  # micro-batches inherit the device
            and "device == self.device" in inspect.getsource(TensorDictBase.to))  # ... and then `to` returns early


def _device_once_apply() -> None:
    from verl.workers.engine.megatron import transformer_impl as ti

    forward_backward_batch = ti.MegatronEngine.forward_backward_batch
    if is_patched(forward_backward_batch, "batch_device_once"):
        return

    @functools.wraps(forward_backward_batch)
    def device_once(self: Any, data: Any, *args: Any, **kwargs: Any) -> Any:
        return forward_backward_batch(self, moved_once(data, ti.get_device_id()), *args, **kwargs)

    ti.MegatronEngine.forward_backward_batch = mark_patched(device_once, "batch_device_once")


BATCH_DEVICE_ONCE = Shim(
    "batch_device_once", "~0.15 s a step in old_log_prob, ~0.12 s in update_actor (docs/speed.md, lever 3): verl's "
    "Megatron forward_step moves every micro-batch to the device (TensorDict.to, key by key), and on CPU the "
    "micro-batches carry no device, so the no-op move rebuilds each; the batch is moved once instead",
    _device_once_needed, _device_once_apply)
