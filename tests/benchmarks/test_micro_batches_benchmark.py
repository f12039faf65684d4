"""benchmarks/micro_batches.py on a few rows, without a process group: both columns of both comparisons, per phase,
with their equality checks (verl's padding against the vectorised one; the micro-batches split from a batch moved
once against verl's)."""

from __future__ import annotations

import sys

import pytest


@pytest.fixture(scope="module")
def bench(repo_root):
    sys.path.insert(0, str(repo_root / "benchmarks"))
    import micro_batches

    return micro_batches


@pytest.fixture
def one_process_megatron(monkeypatch):
    """Megatron's TP / CP sizes of 1 as verl's functions read them, without init_parallel's process group."""
    from megatron.core import parallel_state

    from rlec.megatron import parallel

    monkeypatch.setattr(parallel, "init_parallel", lambda layout: None)
    monkeypatch.setattr(parallel_state, "get_tensor_model_parallel_world_size", lambda: 1)
    monkeypatch.setattr(parallel_state, "get_context_parallel_world_size", lambda: 1)
    monkeypatch.setattr(parallel_state, "get_context_parallel_rank", lambda: 0)
    monkeypatch.setattr(parallel_state, "get_context_parallel_group", lambda: None)


def test_both_phases_timed_both_ways_on_the_micro_batches_asked_for(bench, one_process_megatron):
    figures = bench.compare(sequences=8, log_prob_micro_batch=2, update_micro_batch=4, prompt=(3, 5), response=(1, 2),
                            steps=1)
    assert figures["old_log_prob"]["micro_batches"] == 4 and figures["update_actor"]["micro_batches"] == 2
    for phase in ("old_log_prob", "update_actor"):
        assert {"verl_cpu", "verl_wall", "rlec_cpu", "rlec_wall"} <= set(figures[phase])
        assert all(v >= 0 for v in figures[phase].values())


def test_micro_batches_hold_the_lengths_drawn(bench):
    batches = bench._micro_batches(6, 4, (3, 3), (2, 2), seed=0)
    assert [ids.shape[0] for ids, _, _ in batches] == [4, 2]
    ids, labels, temperature = batches[0]
    assert ids.offsets().diff().tolist() == [5] * 4 and labels is not ids
    assert temperature.values().eq(1).all() and temperature.offsets().equal(ids.offsets())


def test_device_moves_timed_both_ways_per_phase(bench):
    figures = bench.compare_moves(sequences=8, log_prob_micro_batch=2, update_micro_batch=2, update_mini_batches=2,
                                  prompt=(3, 5), response=(1, 2), fields=3, notes=5, steps=1)
    assert figures["old_log_prob"]["micro_batches"] == 4 and figures["update_actor"]["micro_batches"] == 4
    assert all(v >= 0 for phase in ("old_log_prob", "update_actor") for v in figures[phase].values())


def test_the_actor_batch_stand_in_has_the_fields_and_notes_asked_for(bench):
    batch = bench._actor_batch(4, 2, (3, 3), (1, 1), fields=3, notes=5, seed=0)
    assert batch.device is None and len(batch) == 4
    assert sum(1 for k in batch.keys() if k.startswith("field")) == 3 and batch["micro_batch_size_per_gpu"] == 2
    assert sum(1 for k in batch.keys() if k.startswith("note")) + 2 == 5
