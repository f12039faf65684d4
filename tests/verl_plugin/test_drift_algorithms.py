"""Drift guard for rlec's algorithms in verl: every verl 0.9.1 method the generic AlgorithmsMixin (and the
metrics mixin whose per-step record it shares) overrides or calls,
its signature, and the behaviour they rely on (the pattern of test_drift.py). Each assertion names
what rlec uses it for."""

from __future__ import annotations

import importlib
import re
import inspect

import pytest

from rlec.algorithms.registry import ALGORITHMS

pytest.importorskip("verl")


def params(func):
    return list(inspect.signature(func).parameters)


def source(module, attr=None):
    obj = importlib.import_module(module)
    for part in (attr.split(".") if attr else []):
        obj = getattr(obj, part)
    return inspect.getsource(obj)


TRAINER = "verl.trainer.ppo.v1.trainer_base"


def test_signatures_of_overridden_trainer_methods():
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    assert params(PPOTrainer.step) == ["self", "metrics", "timing_raw"]  # overrides before, observe after the step
    assert params(PPOTrainer._next_train_batch) == ["self", "num_prompts"]  # plan_rollout on each batch of prompts
    assert params(PPOTrainer._save_checkpoint) == ["self"]  # state beside verl's checkpoint
    assert params(PPOTrainer._load_checkpoint) == ["self"]
    assert params(PPOTrainer.on_init_end) == ["self"]  # the algorithms are built there (datasets exist)


def test_every_verl_method_the_algorithms_mixin_overrides_is_pinned_here():
    """A new override of a verl method must be added to the pinned set (and its hook point tested above)."""
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    from rlec.verl_plugin.trainers import AlgorithmsMixin, RLECMetricsMixin

    pinned = {"__init__", "step", "_next_train_batch", "_save_checkpoint", "_load_checkpoint", "on_init_end"}
    overridden = {name for name in vars(AlgorithmsMixin) if callable(getattr(PPOTrainer, name, None))}
    assert overridden == pinned
    assert {name for name in vars(RLECMetricsMixin) if callable(getattr(PPOTrainer, name, None))} == {
        "__init__", "_compute_metrics", "_val_metrics_update"}  # signatures pinned in test_drift.py


def test_signatures_of_registries_and_the_agent_loop():
    from verl.experimental.agent_loop.agent_loop import register
    from verl.experimental.agent_loop.single_turn_agent_loop import SingleTurnAgentLoop
    from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage, register_adv_est

    assert params(SingleTurnAgentLoop.run) == ["self", "sampling_params", "priority", "kwargs"]  # E3AgentLoop.run
    assert params(register) == ["agent_name"] and params(register_adv_est) == ["name_or_enum"]
    assert params(compute_grpo_outcome_advantage)[:5] == [  # the switch's pass@1 regime
        "token_level_rewards", "response_mask", "index", "epsilon", "norm_adv_by_std_in_grpo"]


def test_step_order_the_mixins_rely_on():
    fit = source(TRAINER, "PPOTrainer.fit")
    # the step (with its batch plan, actor/entropy and graded outcomes) comes before the checkpoint of that step
    assert fit.index("batch = self.step(metrics, self.timing_raw)") < fit.index("self._save_checkpoint()")
    # the step's record, read once at the end of step(), is reused by the metrics of the same batch
    assert fit.index("self._save_checkpoint()") < fit.index("self._compute_metrics(batch, metrics")
    assert fit.index("self._compute_metrics(batch, metrics") < fit.index("tq.kv_clear(keys=batch.keys")
    step = source(TRAINER, "PPOTrainer.step")
    assert "prepare_metrics = self.prepare_step()" in step  # prompts are fetched inside step()
    batches = source(TRAINER, "PPOTrainer._add_batch_to_generate") + source(TRAINER, "PPOTrainer._add_prompts_to_generate")
    assert batches.count("self._next_train_batch(") == 2  # every training prompt goes through _next_train_batch
    assert 'tu.assign_non_tensor_data(batch, "global_steps", self.global_steps)' in source(TRAINER, "PPOTrainer._next_train_batch")


def test_actor_side_reads_the_temperature_from_the_trainer_config_at_call_time():
    trainer = source(TRAINER)
    read = '"temperature": self.config.actor_rollout_ref.rollout.temperature'
    for method in ("_compute_old_log_prob", "_compute_ref_log_prob", "_update_actor"):
        assert read in source(TRAINER, f"PPOTrainer.{method}"), method
    assert 'batch.extra_info["temperature"] = self.config.actor_rollout_ref.rollout.temperature' in trainer
    assert '"actor/entropy": entropy_agg.detach().item()' in source(TRAINER, "PPOTrainer._compute_old_log_prob")
    # Megatron divides the logits by the temperature it is handed
    megatron = source("verl.workers.engine.megatron.transformer_impl")
    assert 'temperature = batch["temperature"]' in megatron and "logits.div_(temperature" in megatron


def test_rollout_side_per_prompt_n_and_fields_reach_the_agent_loop():
    worker = source("verl.trainer.ppo.v1.agent_loop_tq")
    assert "temperature=config.temperature" in worker  # each worker samples with its own config copy (hence E3AgentLoop)
    assert 'n = prompt.pop("__rollout_n__"' in worker  # per-prompt rollout count
    assert "prompt[k] = v[i].data" in worker and "prompt[k] = v.data" in worker  # NonTensorStack / NonTensorData fields
    assert "**prompt" in worker  # every prompt field becomes an agent-loop keyword argument
    agent_loop = source("verl.experimental.agent_loop.agent_loop")
    assert "output: AgentLoopOutput = await agent_loop.run(sampling_params, **kwargs)" in agent_loop
    assert "field.update(kwargs)" in worker  # prompt fields are stored in TransferQueue (rlec_e3_prompt read back)


def test_sync_replay_buffer_counts_prompts_not_responses():
    # unequal groups are fine: the sync sampler selects whole prompt groups by uid
    buffer = source("verl.trainer.ppo.v1.replay_buffer", "ReplayBuffer._select_prompt_uids")
    assert "return ordered_keys[:batch_size]" in buffer


def test_estimator_call_path():
    utils = source("verl.trainer.ppo.v1.utils", "compute_advantage_for_multi_trajectories")
    assert "if adv_estimator != core_algos.AdvantageEstimator.GRPO:" in utils  # custom estimators get the whole batch
    ray_trainer = source("verl.trainer.ppo.ray_trainer", "compute_advantage")
    assert '"config": config,' in ray_trainer and 'adv_kwargs["index"] = data.non_tensor_batch["uid"]' in ray_trainer
    assert "config=self.config.algorithm," in source(TRAINER, "PPOTrainer._compute_advantage")  # the live config


def test_checkpoint_folders_and_latest_marker():
    save = source(TRAINER, "PPOTrainer._save_checkpoint")
    assert 'os.path.join(\n            self.config.trainer.default_local_dir, f"global_step_{self.global_steps}"\n        )' in save
    assert save.index('torch.save(self.train_dataloader.state_dict()') < save.index("latest_checkpointed_iteration.txt")
    load = source(TRAINER, "PPOTrainer._load_checkpoint")
    assert 'self.global_steps = int(global_step_folder.split("global_step_")[-1])' in load
    assert "global_step_folder = self.config.trainer.resume_from_path" in load


def test_reward_length_is_the_response_tokens():
    # the reward worker's sample: prompt | response with an all-ones attention mask; the naive manager (and rlec's
    # length bias) counts the response tokens as attention_mask[-response_length:].sum()
    worker = source("verl.experimental.agent_loop.agent_loop", "AgentLoopWorker._compute_score")
    assert "attention_mask = torch.ones_like(input_ids, dtype=torch.int64)" in worker
    naive = source("verl.experimental.reward_loop.reward_manager.naive")
    assert 'valid_response_length = data_item.batch["attention_mask"][-response_length:].sum()' in naive


def test_algo_config_rejects_unknown_keys():
    # why config_check drops the algorithms' keys (algorithm.passk) before converting (rlec.rules.checks.verl_algorithm_section)
    from verl.trainer.config import AlgoConfig

    from rlec.algorithms.registry import verl_algorithm_keys

    assert "passk" in verl_algorithm_keys()
    assert not set(verl_algorithm_keys()) & {f for f in AlgoConfig.__dataclass_fields__}


@pytest.mark.parametrize("name", [cls.name for cls in ALGORITHMS])
def test_overlay_keys_exist_in_verl_config_except_rlec_own(name):
    """Every registered algorithm's overlay sets only verl's own keys, ``rlec.*`` and the keys it declares it adds
    (:attr:`rlec.algorithms.base.Algorithm.verl_keys`)."""
    from hydra import compose, initialize_config_module
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf

    from rlec.config import CONFIG_DIR
    from rlec.algorithms.registry import verl_keys

    GlobalHydra.instance().clear()
    with initialize_config_module("verl.trainer.config", version_base=None):
        verl_cfg = compose("ppo_trainer", overrides=["model_engine=megatron"])

    def leaves(node, prefix=""):  # a plain dict: an overlay's interpolations (RLVE's ${rlec.rlve}) stay unresolved
        for key, value in node.items():
            path = f"{prefix}.{key}" if prefix else str(key)
            yield from leaves(value, path) if isinstance(value, dict) else [path]

    own = ("rlec.",) + tuple(f"{k}." for k in verl_keys())  # a key or anything under it (data.rlve: ${rlec.rlve})
    overlay = OmegaConf.to_container(OmegaConf.load(CONFIG_DIR / "algorithm" / f"{name}.yaml"), resolve=False)
    missing = [p for p in leaves(overlay) if not f"{p}.".startswith(own) and OmegaConf.select(verl_cfg, p, default="<absent>") == "<absent>"]
    assert missing == []


def test_rollout_server_interface_the_cpu_rollout_implements():
    """rlec_hf (rlec/cpu/rollout_server.py) answers what verl 0.9.1 calls on a rollout server and adapter."""
    import inspect as _inspect

    from verl.checkpoint_engine.base import CheckpointEngineManager
    from verl.workers.rollout import base, replica
    from verl.workers.rollout.llm_server import LLMServerClient

    from rlec.cpu.rollout_server import HFRolloutServer, HFServerAdapter

    assert isinstance(base._ROLLOUT_REGISTRY, dict) and ("vllm", "async") in base._ROLLOUT_REGISTRY
    assert hasattr(replica.RolloutReplicaRegistry, "register")
    abstract = {n for n, m in vars(base.BaseRollout).items() if getattr(m, "__isabstractmethod__", False)}
    assert abstract == {"resume", "update_weights", "release"} and not HFServerAdapter.__abstractmethods__
    assert {n for n, m in vars(replica.RolloutReplica).items() if getattr(m, "__isabstractmethod__", False)} == {"launch_servers"}
    # the server methods verl calls (replica control surface, checkpoint manager, client)
    called = set(re.findall(r"server\.(\w+)\.remote", _inspect.getsource(replica.RolloutReplica)))
    called |= set(re.findall(r"server\.(\w+)\.remote", _inspect.getsource(LLMServerClient.generate)))
    assert called and all(callable(getattr(HFRolloutServer, name, None)) for name in called), called
    assert "update_weights(global_steps=global_steps, mode=self.backend)" in _inspect.getsource(CheckpointEngineManager.update_weights)


def test_the_mismatch_alarm_sees_the_rollout_correction_metrics_before_the_update():
    """rlec.verl_plugin.mismatch overrides the private ``PPOTrainer._update_actor(batch, metrics)`` and reads the
    ``rollout_corr/*`` metrics that ``_compute_advantage`` put into the same dict earlier in ``_step_once``."""
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    assert list(inspect.signature(PPOTrainer._update_actor).parameters) == ["self", "batch", "metrics"]
    step = source(TRAINER, "PPOTrainer._step_once")
    assert step.index("self._compute_advantage(batch, metrics=metrics)") < step.index("self._update_actor(batch, metrics=metrics)")
    advantage = source(TRAINER, "PPOTrainer._compute_advantage")
    assert "compute_rollout_correction_and_add_to_batch(data, rollout_corr_config)" in advantage
    assert "metrics.update(is_metrics)" in advantage
    assert 'rollout_corr_config.get("bypass_mode", False)' in advantage  # bypass: no metric, DRY_RUN warns
