"""The one config schema: verl's trainer on CPU composes the cluster's settings; resume compares settings."""

from __future__ import annotations

import pytest

from rlec.config import (CLUSTER_CONFIG, CPU_LAYOUT, CPU_PRECISION, compose, flatten, pinned_schedule_end, resume_differences,
                         resume_refused, select)

# what the CPU layout may change of the keys a resume refuses: the toy scale (batch, lengths, group size, model, lr)
CPU_SCALE = ("data.train_batch_size", "data.max_prompt_length", "data.max_response_length", "actor_rollout_ref.model.path",
             "actor_rollout_ref.rollout.n", "actor_rollout_ref.actor.ppo_mini_batch_size", "actor_rollout_ref.actor.optim.lr",
             "rlec.cpu.scripted_fraction")


@pytest.fixture(scope="module")
def both() -> tuple[dict, dict]:
    return flatten(compose([], CLUSTER_CONFIG)), flatten(compose([f"layout={CPU_LAYOUT}", f"precision={CPU_PRECISION}"]))


def test_the_cpu_layout_changes_only_scale_never_what_the_run_optimises(both) -> None:
    """``make run`` trains what the cluster trains: of every key a resume refuses (the algorithm, schedule, grading,
    loss, sampling, optimiser), the CPU layout changes the toy scale only."""
    cluster, cpu = both
    differ = sorted(k for k in set(cluster) | set(cpu) if cluster.get(k, "<absent>") != cpu.get(k, "<absent>"))
    assert differ  # the layout does change scale and parallel sizes
    objective = [k for k in differ if k.startswith(resume_refused()) and not k.startswith(CPU_SCALE)]
    assert not objective, f"layout/cpu.yaml changes settings that must mean the same on both paths: {objective}"


@pytest.mark.parametrize("key", [
    "algorithm.adv_estimator", "algorithm.norm_adv_by_std_in_grpo", "rlec.schedule.start_value", "rlec.schedule.end_value",
    "rlec.schedule.start_step", "rlec.grading.timeout_s", "rlec.metrics.target_bucket_edges",
    "actor_rollout_ref.actor.clip_ratio_low", "actor_rollout_ref.actor.clip_ratio_high", "actor_rollout_ref.actor.loss_agg_mode",
    "actor_rollout_ref.actor.policy_loss.loss_mode", "actor_rollout_ref.actor.optim.weight_decay", "data.seed",
    "data.apply_chat_template_kwargs.enable_thinking", "reward.reward_manager.name",
    "algorithm.rollout_correction.rollout_is", "actor_rollout_ref.rollout.calculate_log_probs",
])
def test_algorithm_settings_are_the_clusters(both, key: str) -> None:
    cluster, cpu = both
    assert key in cluster and cluster[key] == cpu[key]


def test_select_reads_nested_dicts_and_configs() -> None:
    cfg = {"a": {"b": {"c": 3}, "n": None}}
    assert select(cfg, "a.b.c") == 3 and select(cfg, "a.x", 7) == 7 and select(cfg, "a.n", 1) == 1 and select(None, "a") is None
    assert flatten(cfg) == {"a.b.c": 3, "a.n": None}


SAVED = {"trainer": {"total_training_steps": 4, "save_freq": 2}, "rlec": {"schedule": {"end_step": None}},
         "actor_rollout_ref": {"rollout": {"n": 4}, "actor": {"megatron": {"tensor_model_parallel_size": 1}}}, "data": {"seed": 1}}


def _with(**changes) -> dict:
    import copy

    cfg = copy.deepcopy(SAVED)
    for dotted, value in changes.items():
        node = cfg
        *parents, leaf = dotted.split("__")
        for part in parents:
            node = node[part]
        node[leaf] = value
    return cfg


def test_resume_refuses_settings_that_change_the_objective_and_notes_the_rest() -> None:
    refused, noted = resume_differences(SAVED, _with(data__seed=7, trainer__save_freq=1))
    assert refused == ["data.seed: 1 -> 7"] and noted == ["trainer.save_freq: 2 -> 1"]
    refused, noted = resume_differences(SAVED, _with(actor_rollout_ref__rollout__n=8))
    assert refused == ["actor_rollout_ref.rollout.n: 4 -> 8"]
    refused, noted = resume_differences(SAVED, _with(actor_rollout_ref__actor__megatron__tensor_model_parallel_size=2))
    assert not refused and noted  # a new layout reshards the dist checkpoint: allowed
    refused, noted = resume_differences(SAVED, _with(rlec__schedule__end_step=6))
    assert not refused and "re-planned" in noted[0]


def test_a_longer_resumed_run_keeps_the_original_b_schedule() -> None:
    from rlec.reward.schedule import schedule_from_config

    longer = _with(trainer__total_training_steps=6)
    assert pinned_schedule_end(SAVED, longer) == 4
    pinned = _with(trainer__total_training_steps=6, rlec__schedule__end_step=4)
    original = schedule_from_config(SAVED)
    assert [schedule_from_config(pinned)(s) for s in range(1, 7)] == [original(s) for s in range(1, 7)] == [0, 1 / 3, 2 / 3, 1, 1, 1]
    assert pinned_schedule_end(SAVED, SAVED) is None and pinned_schedule_end(SAVED, _with(rlec__schedule__end_step=5)) is None


def test_resume_refuses_every_registered_algorithms_settings_read_from_the_registry(monkeypatch) -> None:
    """The refused prefixes come from the registry (each algorithm's ``resume_refused``): E3's, Pass@k's (its home
    ``rlec.passk`` and verl's copy ``algorithm.passk``), RLVE's (``rlec.rlve`` and the copy ``data.rlve``), and a newly
    registered algorithm's."""
    from rlec.algorithms import registry
    from rlec.algorithms.base import Algorithm
    from rlec.config import resume_refused

    prefixes = resume_refused()
    assert {"rlec.e3.", "rlec.passk.", "algorithm.passk.", "rlec.rlve.", "data.rlve."} <= set(prefixes)
    k_changed = resume_differences({**SAVED, "rlec": {"passk": {"k": 2, "switch": {"enable": False}}}},
                                   {**SAVED, "rlec": {"passk": {"k": 4, "switch": {"enable": False}}}})
    assert k_changed == (["rlec.passk.k: 2 -> 4"], [])
    saved = {**SAVED, "rlec": {"schedule": {"end_step": None}, "e3": {"budget": {"n_max": 16}}, "toy": {"c": 1.0}}}
    changed = {**saved, "rlec": {**saved["rlec"], "e3": {"budget": {"n_max": 24}}, "toy": {"c": 2.0}}}
    refused, noted = resume_differences(saved, changed)
    assert refused == ["rlec.e3.budget.n_max: 16 -> 24"] and noted == ["rlec.toy.c: 1.0 -> 2.0"]

    class Toy(Algorithm):
        name, section = "toy", "rlec.toy"

        @classmethod
        def enabled(cls, cfg):
            return False

        @classmethod
        def from_config(cls, cfg, context):
            return cls()

    monkeypatch.setattr(registry, "ALGORITHMS", (*registry.ALGORITHMS, Toy))
    refused, noted = resume_differences(saved, changed)
    assert refused == ["rlec.e3.budget.n_max: 16 -> 24", "rlec.toy.c: 1.0 -> 2.0"] and noted == []
