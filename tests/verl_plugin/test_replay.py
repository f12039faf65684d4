"""Reproducible training batches on verl's V1 trainer (rlec.verl_plugin.replay, issue 31 item 4): prompt ids
from the step, selection and batch order independent of arrival order; and the drift guard of the private
verl methods it overrides."""

from __future__ import annotations

import inspect
import random

import pytest

pytest.importorskip("verl")

from verl.trainer.ppo.v1 import replay_buffer as verl_rb  # noqa: E402
from verl.trainer.ppo.v1.trainer_base import PPOTrainer  # noqa: E402

from rlec.verl_plugin.replay import (ORDERED, OrderedReplayBuffer, OrderedReplayBufferAsync, ReproducibleBatchMixin,  # noqa: E402
                                     key_order, prompt_uids)


def test_prompt_uids_are_step_ordered_text_without_verls_key_separator():
    a, b = prompt_uids(9, 0, 3), prompt_uids(10, 0, 2)
    assert a == sorted(a) and a[-1] < b[0]  # text order is step order (9 < 10 although "9" > "1")
    assert prompt_uids(3, 1, 1)[0] > prompt_uids(3, 0, 5)[-1]  # a later fetch of the same step sorts after
    assert all("_" not in uid for uid in a + b)  # verl splits its keys {uid}_{session}_{index} on "_"
    assert prompt_uids(9, 0, 3) == a  # the same in every run
    for bad in ((-1, 0, 1), (1, -1, 1), (1, 0, 10**6 + 1)):
        with pytest.raises(ValueError, match="prompt_uids"):
            prompt_uids(*bad)


def test_key_order_is_numeric_in_session_and_index():
    keys = ["u_10_0", "u_2_1", "u_2_0", "t_0_0", "u_x"]
    assert sorted(keys, key=key_order) == ["t_0_0", "u_2_0", "u_2_1", "u_10_0", "u_x"]


def _buffer(cls):
    return cls(trainer_mode="sync", trainer_config={}, max_off_policy_threshold=None, max_off_policy_strategy="drop",
               sampler_kwargs={}, refill_fn=lambda n: None)


def _fill(buffer, order: list[str]) -> None:
    for key in order:
        buffer.partitions["train"][key] = {"status": "finish", "global_steps": 1}


def test_the_batch_does_not_depend_on_the_order_samples_arrived_in(monkeypatch):
    """verl's own buffer keeps arrival order (the bug: a resumed run's batch is another permutation);
    the ordered buffer gives one order for every arrival order."""
    monkeypatch.setattr(verl_rb.tq, "kv_clear", lambda **kw: None)  # TransferQueue's clear; nothing stored here
    keys = [f"{uid}_{s}_0" for uid in prompt_uids(1, 0, 3) for s in range(4)]
    orders = []
    for seed in range(3):
        arrival = keys[:]
        random.Random(seed).shuffle(arrival)
        for cls, out in ((verl_rb.ReplayBuffer, None), (OrderedReplayBuffer, orders)):
            buffer = _buffer(cls)
            _fill(buffer, arrival)
            uids = set(prompt_uids(1, 0, 3))
            selected, snapshot, _ = buffer._select_prompt_uids("train", uids, 2)
            meta = buffer._materialize_batch("train", selected, snapshot)
            if out is not None:
                out.append(list(meta.keys))
            elif seed == 0:
                assert list(meta.keys) == [k for k in arrival if k.split("_")[0] in selected]  # verl: arrival order
    assert orders[0] == orders[1] == orders[2]
    assert orders[0] == sorted(orders[0], key=key_order)
    assert {k.split("_")[0] for k in orders[0]} == set(prompt_uids(1, 0, 2))  # the two oldest ids


def test_selection_prefers_the_oldest_step_then_the_id(monkeypatch):
    buffer = _buffer(OrderedReplayBuffer)
    older, newer = prompt_uids(1, 0, 2), prompt_uids(2, 0, 2)
    buffer.prompt_global_steps["train"].update({newer[0]: 2, newer[1]: 2, older[1]: 1, older[0]: 1})
    selected, _, _ = buffer._select_prompt_uids("train", set(older + newer), 3)
    assert selected == [older[0], older[1], newer[0]]


def test_the_trainer_swaps_in_the_ordered_class_of_verls_own_buffer_only():
    class Base:
        def __init__(self, built):
            self.built = built

        def _build_replay_buffer(self):
            return self.built

    class Trainer(ReproducibleBatchMixin, Base):
        pass

    for verl_cls, ordered in ORDERED.items():
        built = _buffer(verl_cls)
        assert type(Trainer(built)._build_replay_buffer()) is ordered
        assert isinstance(built, verl_cls)  # verl's checks of its own type still hold

    class Custom(verl_rb.ReplayBuffer):
        pass

    assert type(Trainer(_buffer(Custom))._build_replay_buffer()) is Custom  # a user's sampler keeps its order


def test_rlec_trainers_use_it():
    from rlec.verl_plugin.trainers import RLECColocateAsyncTrainer, RLECSeparateAsyncTrainer, RLECSyncTrainer

    for cls in (RLECSyncTrainer, RLECColocateAsyncTrainer, RLECSeparateAsyncTrainer):
        assert issubclass(cls, ReproducibleBatchMixin)
    assert issubclass(OrderedReplayBufferAsync, verl_rb.ReplayBufferAsync)


def test_drift_the_private_verl_methods_it_overrides():
    params = lambda f: list(inspect.signature(f).parameters)  # noqa: E731
    assert params(verl_rb.ReplayBuffer._select_prompt_uids) == ["self", "partition_id", "sampleable_keys", "batch_size"]
    assert params(verl_rb.ReplayBuffer._materialize_batch) == ["self", "partition_id", "selected_prompt_uids", "partition_snapshot"]
    # the async buffer inherits both (else its own would bypass the ordering)
    assert "_select_prompt_uids" not in vars(verl_rb.ReplayBufferAsync)
    assert "_materialize_batch" not in vars(verl_rb.ReplayBufferAsync)
    assert params(PPOTrainer._fetch_one_gen_batch) == ["self"]
    assert params(PPOTrainer._build_replay_buffer) == ["self"]
    fetch = inspect.getsource(PPOTrainer._fetch_one_gen_batch)
    assert 'batch_dict["uid"]' in fetch and "uuid4" in fetch  # verl draws random ids here: the mixin replaces them
    assert "self._fetch_one_gen_batch()" in inspect.getsource(PPOTrainer._next_train_batch)
    assert "self._build_replay_buffer()" in inspect.getsource(PPOTrainer.__init__)
    # the sync sample materializes through _materialize_batch (ordered there)
    assert "self._materialize_batch(" in inspect.getsource(verl_rb.ReplayBuffer.sample)
