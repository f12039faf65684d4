"""The one config schema: verl's trainer on CPU composes the cluster's settings; resume compares settings."""

from __future__ import annotations

import pytest

from rlec.config import (CLUSTER_CONFIG, CPU_LAYOUT, CPU_PRECISION, compose, flatten, pinned_schedule_end, resume_differences,
                         select)
from rlec.run_config import RunConfig

# every key layout/cpu.yaml + precision/fp32.yaml may change: the toy scale (batch, lengths, group size, model, lr,
# checkpoint cadence), how the run is laid out (parallel sizes, the CPU platform, the rollout engine, Ray's logical
# resources, TransferQueue's storage) and rlec's CPU and check sections; verl interpolates some of them into its
# other sections (rollout_n, response_length, token budgets, critic / distillation / ref copies)
CPU_LAYOUT_KEYS = (
    "data.train_batch_size", "data.max_prompt_length", "data.max_response_length", "data.dataloader_num_workers",
    "data.filter_overlong_prompts_workers",
    "data.val_max_samples", "actor_rollout_ref.model.path", "actor_rollout_ref.model.use_remove_padding",
    "actor_rollout_ref.actor.ppo_mini_batch_size", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu",
    "actor_rollout_ref.actor.use_dynamic_bsz", "actor_rollout_ref.actor.optim.lr", "actor_rollout_ref.actor.megatron.",
    "actor_rollout_ref.actor.rollout_n", "actor_rollout_ref.ref.", "actor_rollout_ref.rollout.n",
    "actor_rollout_ref.rollout.name", "actor_rollout_ref.rollout.agent.", "actor_rollout_ref.rollout.custom.",
    "actor_rollout_ref.rollout.dtype", "actor_rollout_ref.rollout.free_cache_engine",
    "actor_rollout_ref.rollout.gpu_memory_utilization", "actor_rollout_ref.rollout.log_prob_",
    "actor_rollout_ref.rollout.max_num_batched_tokens", "actor_rollout_ref.rollout.n_gpus_per_node",
    "actor_rollout_ref.rollout.prometheus.", "actor_rollout_ref.rollout.prompt_length",
    "actor_rollout_ref.rollout.response_length", "actor_rollout_ref.rollout.tensor_model_parallel_size",
    "actor_rollout_ref.rollout.data_parallel_size", "actor_rollout_ref.rollout.expert_parallel_size",
    "actor_rollout_ref.rollout.pipeline_model_parallel_size", "actor_rollout_ref.rollout.trace.",
    "actor_rollout_ref.rollout.checkpoint_engine.", "actor_rollout_ref.rollout.val_kwargs.n",
    "critic.", "distillation.", "ray_kwargs.", "reward.num_workers", "transfer_queue.",
    "trainer.nnodes", "trainer.n_gpus_per_node", "trainer.device", "trainer.experiment_name", "trainer.default_local_dir",
    "trainer.total_training_steps", "trainer.save_freq", "trainer.test_freq", "trainer.val_before_train",
    "trainer.log_val_generations", "trainer.max_actor_ckpt_to_keep", "trainer.balance_batch", "trainer.logger",
    "rlec.cpu.", "rlec.check.model_shape",
)


@pytest.fixture(scope="module")
def both() -> tuple[dict, dict]:
    return flatten(compose([], CLUSTER_CONFIG)), flatten(compose([f"layout={CPU_LAYOUT}", f"precision={CPU_PRECISION}"]))


def test_the_cpu_layout_changes_only_scale_and_layout_never_what_the_run_optimises(both) -> None:
    """``make run`` trains what the cluster trains: every key the CPU layout changes is in :data:`CPU_LAYOUT_KEYS`
    (so a layout that turned on a KL loss, more PPO epochs, an entropy bonus or other sampling would fail here)."""
    cluster, cpu = both
    differ = sorted(k for k in set(cluster) | set(cpu) if cluster.get(k, "<absent>") != cpu.get(k, "<absent>"))
    assert differ  # the layout does change scale and parallel sizes
    outside = [k for k in differ if not k.startswith(CPU_LAYOUT_KEYS)]
    assert not outside, f"layout/cpu.yaml changes settings that must mean the same on both paths: {outside}"
    assert not [k for k in differ if k.startswith("algorithm.")]


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
    # an explicit end step that moves where b ends re-plans the schedule: refused (it was only noted before issue 55,
    # which let a resume change the objective); written out at the run's own length it is only noted
    refused, noted = resume_differences(SAVED, _with(rlec__schedule__end_step=6))
    assert refused == ["rlec.schedule.end_step: None -> 6 (moves the step where b reaches its end value)"] and not noted
    refused, noted = resume_differences(SAVED, _with(rlec__schedule__end_step=4))
    assert not refused and noted == ["rlec.schedule.end_step: None -> 4 (b still reaches its end value at the same step)"]
    # more epochs let a longer run go on over few rows (the step count set on both sides); without one they set it
    saved = _with(trainer__total_epochs=1)
    refused, noted = resume_differences(saved, _with(trainer__total_epochs=2, trainer__total_training_steps=8))
    assert not refused and noted == ["trainer.total_epochs: 1 -> 2 (the step count is set: the epochs only bound verl's "
                                     "loop)", "trainer.total_training_steps: 4 -> 8"]
    steps_unset = _with(trainer__total_epochs=1, trainer__total_training_steps=None)
    refused, _ = resume_differences(steps_unset, _with(trainer__total_epochs=2, trainer__total_training_steps=None))
    assert refused == ["trainer.total_epochs: 1 -> 2"]
    # a key only one side has is a change too (refused unless allowed), named <absent> on the side that lacks it
    refused, noted = resume_differences(SAVED, {**_with(), "extra": {"k": 1}, "ray_kwargs": {"num_cpus": 8}})
    assert refused == ["extra.k: '<absent>' -> 1"] and noted == ["ray_kwargs.num_cpus: '<absent>' -> 8"]


def test_a_longer_resumed_run_keeps_the_original_b_schedule() -> None:
    from rlec.reward.schedule import schedule_from_config

    longer = _with(trainer__total_training_steps=6)
    assert pinned_schedule_end(SAVED, longer) == 4
    pinned = _with(trainer__total_training_steps=6, rlec__schedule__end_step=4)
    assert resume_differences(SAVED, pinned)[0] == []  # the pin itself is no change of the schedule
    original = schedule_from_config(RunConfig(SAVED))
    assert [schedule_from_config(RunConfig(pinned))(s) for s in range(1, 7)] == [original(s) for s in range(1, 7)] == [0, 1 / 3, 2 / 3, 1, 1, 1]
    assert pinned_schedule_end(SAVED, SAVED) is None and pinned_schedule_end(SAVED, _with(rlec__schedule__end_step=5)) is None
    # a run started with an explicit end step keeps it when the resume leaves it unset
    explicit = _with(rlec__schedule__end_step=3)
    assert pinned_schedule_end(explicit, _with(trainer__total_training_steps=6)) == 3
    assert resume_differences(explicit, _with(trainer__total_training_steps=6))[0] == []


def test_resume_refuses_every_algorithms_settings_registered_or_not(monkeypatch) -> None:
    """No algorithm declares the keys a resume may not change: every key outside rlec.config.RESUME_ALLOWED is refused,
    so E3's, Pass@k's (its home ``rlec.passk``), and a section no registered algorithm owns are all refused (before
    issue 55 an unregistered section was only noted: a resume could change it)."""
    from rlec.algorithms import registry
    from rlec.algorithms.base import Algorithm

    k_changed = resume_differences({**SAVED, "rlec": {"passk": {"k": 2, "switch": {"enable": False}}}},
                                   {**SAVED, "rlec": {"passk": {"k": 4, "switch": {"enable": False}}}})
    assert k_changed == (["rlec.passk.k: 2 -> 4"], [])
    saved = {**SAVED, "rlec": {"schedule": {"end_step": None}, "e3": {"budget": {"n_max": 16}}, "toy": {"c": 1.0}}}
    changed = {**saved, "rlec": {**saved["rlec"], "e3": {"budget": {"n_max": 24}}, "toy": {"c": 2.0}}}
    expected = (["rlec.e3.budget.n_max: 16 -> 24", "rlec.toy.c: 1.0 -> 2.0"], [])
    assert resume_differences(saved, changed) == expected

    class Toy(Algorithm):
        name, section = "toy", "rlec.toy"

    monkeypatch.setattr(registry, "ALGORITHMS", (*registry.ALGORITHMS, Toy))
    assert resume_differences(saved, changed) == expected  # registering it changes nothing
