"""Drift guard for rlec.config_writes (issue 59 item 1): each write rlec makes into verl's config exists because verl
0.9.1 reads that value from the config itself. Each test probes the verl behaviour that forces one write; when a
verl release stops doing it, the test fails and the write (and its function in rlec.config_writes) can go."""

from __future__ import annotations

import importlib
import inspect

import pytest

pytest.importorskip("verl")

TRAINER = "verl.trainer.ppo.v1.trainer_base"


def source(module: str, attr: str | None = None) -> str:
    obj = importlib.import_module(module)
    for part in (attr.split(".") if attr else []):
        obj = getattr(obj, part)
    return inspect.getsource(obj)


def test_set_base_trainer_mode_verl_branches_on_the_mode_it_reads_from_the_config():
    init = source(TRAINER, "PPOTrainer.__init__")
    assert "self.trainer_mode = self.config.trainer.v1.trainer_mode" in init
    assert 'self.config.trainer.v1.get(self.trainer_mode, {}).get("parameter_sync_step", 1)' in init
    assert 'ReplayBuffer if self.trainer_mode == "sync" else ReplayBufferAsync' in source(TRAINER, "PPOTrainer._build_replay_buffer")
    # verl picks the class by the name first: rlec's names (rlec_sync, ...) reach it, so the base mode is written after
    run = source("verl.trainer.main_ppo", "TaskRunnerV1.run")
    assert run.index("get_trainer_cls(config.trainer.v1.trainer_mode)") < run.index("trainer_cls(config=config)")


def test_write_step_overrides_the_estimator_sees_only_config_algorithm():
    assert "config=self.config.algorithm," in source(TRAINER, "PPOTrainer._compute_advantage")


@pytest.mark.parametrize("method", ["_compute_old_log_prob", "_compute_ref_log_prob", "_update_actor"])
def test_write_rollout_temperature_the_actor_reads_it_from_the_config_at_call_time(method):
    assert '"temperature": self.config.actor_rollout_ref.rollout.temperature' in source(TRAINER, f"PPOTrainer.{method}")


def test_pin_schedule_end_verls_reward_workers_build_rlecs_reward_manager_from_the_trainer_config():
    worker = source("verl.experimental.reward_loop.reward_loop")
    assert "self.reward_manager = load_reward_manager(\n            self.config," in worker
    assert "reward_manager_cls(\n        config=config," in source("verl.trainer.ppo.reward", "load_reward_manager")
