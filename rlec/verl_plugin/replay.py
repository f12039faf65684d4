"""Reproducible training batches on verl's V1 trainer: prompt ids from the step, samples in key order.

verl 0.9.1 gives every training prompt a ``uuid4`` id (``_fetch_one_gen_batch``) and builds the
step's batch in the order its samples reached TransferQueue (``ReplayBuffer._materialize_batch``
walks the partition's insertion order; ``_select_prompt_uids`` breaks ties in set order). Both
change from run to run, so a resumed run, or the same run twice, feeds the update the same samples
in another order, and the mini-batch split, the loss sums and so the weights differ in the last bits.

- :class:`ReproducibleBatchMixin` (on rlec's trainers): each prompt's ``uid`` is
  ``<global step>-<fetch>-<row>`` (zero-padded: text order = step order; no ``_``, which verl's keys
  ``{uid}_{session}_{index}`` use as the separator), the same in every run of the same step;
- :class:`OrderedReplayBuffer` / :class:`OrderedReplayBufferAsync`: verl's built-in replay buffers
  with prompts chosen oldest step first, then by id, and the batch's samples sorted by (prompt id,
  session, index). The mixin's ``_build_replay_buffer`` lets verl build its own buffer (with every
  keyword it passes only to the built-ins: DAPO's ``filter_groups``, failed-group refill) and then
  gives it the ordered class of the same kind, which adds no state. verl's
  ``trainer.v1.sampler.custom_sampler`` is not used for this: verl drops those keywords for a custom
  sampler. A user's own custom sampler is left as it is.

The private verl methods this relies on are pinned by ``tests/verl_plugin/test_replay.py``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer, ReplayBufferAsync

__all__ = ["OrderedReplayBuffer", "OrderedReplayBufferAsync", "ReproducibleBatchMixin", "key_order", "prompt_uids"]


def prompt_uids(global_steps: int, fetch: int, count: int) -> list[str]:
    """The ids of the ``count`` prompts of a step's ``fetch``-th dataloader fetch (0-based), in text order.

    Raises:
        ValueError: a negative step or fetch, or a count that does not fit the 6-digit row field.
    """
    if global_steps < 0 or fetch < 0 or not 0 <= count <= 10**6:
        raise ValueError(f"prompt_uids: expected global_steps >= 0, fetch >= 0 and 0 <= count <= 1e6, "
                         f"got {global_steps}, {fetch}, {count}")
    return [f"{global_steps:09d}-{fetch:04d}-{row:06d}" for row in range(count)]


def key_order(key: str) -> tuple[str, int, int]:
    """Sort key of a TransferQueue key ``{uid}_{session}_{index}`` (numeric session and index; other
    shapes sort by their text after the well-formed ones of the same uid)."""
    uid, _, rest = key.partition("_")
    session, _, index = rest.partition("_")
    if session.isdigit() and index.isdigit():
        return uid, int(session), int(index)
    return uid, 10**12, 0


class ReproducibleBatchMixin:
    """Prompt ids from the step (:func:`prompt_uids`) instead of verl's ``uuid4`` (module docstring)."""

    _rlec_fetch: tuple[int, int] = (-1, 0)  # (global step, fetches so far in it)

    def _fetch_one_gen_batch(self):
        batch = super()._fetch_one_gen_batch()
        step = int(getattr(self, "global_steps", 0) or 0)
        last_step, fetches = self._rlec_fetch
        fetch = fetches if last_step == step else 0
        self._rlec_fetch = (step, fetch + 1)
        uids = np.array(prompt_uids(step, fetch, len(batch["uid"])), dtype=object)
        from verl.utils import tensordict_utils as tu

        tu.assign_non_tensor_stack(batch, "uid", list(uids))
        return batch

    def _build_replay_buffer(self):
        buffer = super()._build_replay_buffer()
        ordered = ORDERED.get(type(buffer))  # verl's built-ins only: a user's custom sampler keeps its own order
        if ordered is not None:
            buffer.__class__ = ordered
        return buffer


class _OrderedSampling:
    """The two ordering overrides shared by the sync and async replay buffers."""

    def _select_prompt_uids(self, partition_id: str, sampleable_keys: set[str], batch_size: int) -> Any:
        steps = dict(self.prompt_global_steps[partition_id])
        partition = dict(self.partitions[partition_id])
        ordered = sorted(sampleable_keys, key=lambda key: (steps.get(key, 0), key))
        return ordered[:batch_size], partition, steps

    def _materialize_batch(self, partition_id: str, selected_prompt_uids: list[str], partition_snapshot: dict[str, dict]) -> Any:
        ordered = dict(sorted(partition_snapshot.items(), key=lambda item: key_order(item[0])))
        return super()._materialize_batch(partition_id, selected_prompt_uids, ordered)


class OrderedReplayBuffer(_OrderedSampling, ReplayBuffer):
    """verl's sync replay buffer with reproducible selection and batch order."""


class OrderedReplayBufferAsync(_OrderedSampling, ReplayBufferAsync):
    """verl's async replay buffer with the same ordering."""


ORDERED = {ReplayBuffer: OrderedReplayBuffer, ReplayBufferAsync: OrderedReplayBufferAsync}
