"""The ``rlec`` reward manager in-process (verl's naive manager + rlec scoring), and the schedule length."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

pytest.importorskip("verl")

from rlec.reward.schedule import schedule_length  # noqa: E402
from rlec.verl_plugin import RLECRewardManager, global_step_of  # noqa: E402
from rlec.run_config import RunConfig  # noqa: E402

JOB = Path(__file__).with_name("reward_loop_job.py")


@pytest.fixture(scope="module")
def job():
    spec = importlib.util.spec_from_file_location("reward_loop_job", JOB)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def manager(compose_rlec, tiny_moe_dir, job):
    from verl.utils import hf_tokenizer

    cfg = compose_rlec(*job.OVERRIDES, f"actor_rollout_ref.model.path={tiny_moe_dir}")
    tokenizer = hf_tokenizer(str(tiny_moe_dir))
    return RLECRewardManager(config=cfg, tokenizer=tokenizer, compute_score=None), tokenizer


def test_registered_under_rlec():
    from verl.experimental.reward_loop.reward_manager import get_reward_manager_cls
    from verl.experimental.reward_loop.reward_manager.naive import NaiveRewardManager

    cls = get_reward_manager_cls("rlec")
    assert cls is RLECRewardManager and issubclass(cls, NaiveRewardManager)


def test_scores_and_b_follow_schedule_and_p_per_sample(manager, job):
    mgr, tokenizer = manager
    batch = job.build_batch(tokenizer)
    outs = [mgr.loop.run_until_complete(mgr.run_single(batch[i : i + 1])) for i in range(len(batch))]
    assert [o["reward_score"] for o in outs] == pytest.approx(job.EXPECTED)
    infos = [o["reward_extra_info"] for o in outs]
    assert [i["b"] for i in infos] == job.EXPECTED_B
    assert [i["target_p"] for i in infos] == [s[3]["target_p"] for s in job.SAMPLES]
    assert [i["global_step"] for i in infos] == [s[4] for s in job.SAMPLES]
    assert len({tuple(sorted(i)) for i in infos}) == 1  # same keys for every sample (verl stacks them)


def test_concurrent_samples_of_different_steps_keep_their_own_b(manager, job):
    mgr, tokenizer = manager
    batch = job.build_batch(tokenizer)

    async def both():
        return await asyncio.gather(*(mgr.run_single(batch[i : i + 1]) for i in (5, 4, 0)))

    outs = mgr.loop.run_until_complete(both())
    assert [o["reward_extra_info"]["b"] for o in outs] == [1.0, 0.0, 0.5]


def test_missing_global_step_is_a_clear_error(manager, job):
    mgr, tokenizer = manager
    item = job.build_batch(tokenizer)[0:1]
    item.non_tensor_batch.pop("global_steps")
    with pytest.raises(KeyError, match="V1 trainer"):
        mgr.loop.run_until_complete(mgr.run_single(item))
    with pytest.raises(KeyError, match="global_steps"):
        global_step_of(item)


def test_a_broken_sample_is_scored_not_raised(manager, job):
    # issue 12: one bad row (empty gold, unknown data_source, a row verl cannot even read) must not fail the step
    mgr, tokenizer = manager
    samples = [
        ("\\boxed{4}", "", "math_dapo", {"target_p": 0.5, "objective": "rlec"}, 11),
        ("\\boxed{4}", "4", "gsm8k", {"target_p": 0.5, "objective": "rlec"}, 11),
        ("\\boxed{4}", "4", "math_dapo", {"target_p": 0.5, "objective": "rlec"}, 11),
    ]
    batch = job.build_batch(tokenizer, samples)
    batch.non_tensor_batch["reward_model"][2] = {"style": "rule"}  # no ground_truth: verl's own code raises
    outs = [mgr.loop.run_until_complete(mgr.run_single(batch[i : i + 1])) for i in range(3)]
    infos = [o["reward_extra_info"] for o in outs]
    assert [o["reward_score"] for o in outs] == pytest.approx([-0.5] * 3)  # incorrect at p = 0.5, b = 1
    assert [i["grader_error"] for i in infos] == [1.0] * 3
    assert "gold answer" in infos[0]["grader_error_reason"] and "gsm8k" in infos[1]["grader_error_reason"]
    assert infos[2]["grader_error_reason"].startswith("internal: reward manager: KeyError")
    good = mgr.loop.run_until_complete(mgr.run_single(job.build_batch(tokenizer)[0:1]))["reward_extra_info"]
    assert len({tuple(sorted(i)) for i in infos + [good]}) == 1  # same keys as a good sample (verl stacks them)


def test_bucket_edges_must_cover_the_targets(compose_rlec, tiny_moe_dir, job):
    cfg = compose_rlec(*job.OVERRIDES, "rlec.metrics.target_bucket_edges=[0.1,0.5,1.0]")
    with pytest.raises(ValueError, match="must cover"):
        RLECRewardManager(config=cfg, tokenizer=None, compute_score=None)


def test_the_constructor_parses_rlecs_settings_once(compose_rlec, tiny_moe_dir, job, monkeypatch):
    # issue 35: the constructor parsed them 3 times (itself, schedule_from_config, schedule_length)
    from rlec.settings import RlecSettings

    parse, calls = RlecSettings.from_config, []

    def counted(cls, cfg):
        calls.append(cfg)
        return parse(cfg)

    monkeypatch.setattr(RlecSettings, "from_config", classmethod(counted))
    mgr = RLECRewardManager(config=compose_rlec(*job.OVERRIDES), tokenizer=None, compute_score=None)
    assert len(calls) == 1 and mgr.schedule.end_step == schedule_length(RunConfig(compose_rlec(*job.OVERRIDES)))


def test_custom_reward_function_is_refused(compose_rlec, tiny_moe_dir, job):
    cfg = compose_rlec(*job.OVERRIDES, "reward.custom_reward_function.path=some/file.py")
    with pytest.raises(ValueError, match="unset reward.custom_reward_function.path"):
        RLECRewardManager(config=cfg, tokenizer=None, compute_score=None)


@pytest.mark.parametrize(
    ("cfg", "steps"),
    [
        ({"rlec": {"schedule": {"end_step": 7}}, "trainer": {"total_training_steps": 9}}, 7),
        ({"rlec": {"schedule": {"end_step": None}}, "trainer": {"total_training_steps": 9}}, 9),
        # verl's trainer writes dataset steps x parameter_sync_step into the optimizer config
        ({"trainer": {"total_training_steps": None, "v1": {"trainer_mode": "separate_async",
                                                           "separate_async": {"parameter_sync_step": 4}}},
          "actor_rollout_ref": {"actor": {"optim": {"total_training_steps": 400}}}}, 100),
        # the same run as rlec's trainer reads it at construction, before it writes verl's base mode (rlec_run)
        ({"trainer": {"total_training_steps": None, "v1": {"trainer_mode": "rlec_separate_async",
                                                           "separate_async": {"parameter_sync_step": 4}}},
          "actor_rollout_ref": {"actor": {"optim": {"total_training_steps": 400}}}}, 100),
        ({"trainer": {"v1": {"trainer_mode": "sync", "sync": {}}},
          "actor_rollout_ref": {"actor": {"optim": {"total_training_steps": 586}}}}, 586),
    ],
)
def test_schedule_length_precedence(cfg, steps):
    assert schedule_length(RunConfig(OmegaConf.create(cfg))) == steps


def test_schedule_length_unknown_outside_trainer():
    with pytest.raises(ValueError, match="rlec.schedule.end_step or trainer.total_training_steps"):
        schedule_length(RunConfig(OmegaConf.create({"actor_rollout_ref": {"actor": {"optim": {"total_training_steps": -1}}}})))


@pytest.mark.slow  # a child process that imports verl (~10 CPU-s)
def test_without_the_environment_variable_verl_does_not_know_rlec(repo_root):
    # a fresh process imports verl as every Ray worker does; only VERL_USE_EXTERNAL_MODULES
    # (or a runtime env carrying it) brings rlec in
    code = ("from verl.experimental.reward_loop.reward_manager import get_reward_manager_cls\n"
            "try:\n    get_reward_manager_cls('rlec'); print('REGISTERED')\n"
            "except ValueError as e:\n    print('MISSING', e)\n")
    env = {k: v for k, v in os.environ.items() if k != "VERL_USE_EXTERNAL_MODULES"} | {"PYTHONPATH": str(repo_root)}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert "MISSING Unknown reward manager: rlec" in proc.stdout, proc.stderr[-2000:]
