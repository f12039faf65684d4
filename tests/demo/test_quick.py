"""make run's default task (rlec.demo.quick): its settings compose, and only it takes verl's bypass mode (issue 54 item 3)."""

from __future__ import annotations

from rlec.algorithms.base import BYPASS_KEY
from rlec.algorithms.e3.algorithm import E3
from rlec.algorithms.passk.algorithm import PassK
from rlec.config_base import select
from rlec.demo import pipeline, quick
from rlec.experiments.spec import shared_settings
from rlec.run_config import RunConfig


def test_make_runs_addition_task_takes_the_old_log_probs_from_the_sampler_and_nothing_else_does():
    """The addition task (no E3, no entropy switch) skips verl's old-log-prob pass; the recipe (TASK=sample, the
    resume test's launches), the demo and every experiment arm keep it: they log actor/entropy, which E3 reads."""
    cfg = pipeline.compose_checked(quick.overrides())
    assert select(cfg, BYPASS_KEY) is True
    # the rollout returns its log-probs: without them verl's bypass mode raises at the first step
    assert cfg.actor_rollout_ref.rollout.calculate_log_probs is True
    assert cfg.trainer.total_training_steps == quick.STEPS == cfg.trainer.save_freq  # one checkpoint, at the end
    assert select(pipeline.compose_checked([]), BYPASS_KEY) is False
    assert select(pipeline.compose_checked(pipeline.launcher_overrides([])), BYPASS_KEY) is False
    assert BYPASS_KEY not in shared_settings()


def test_bypass_mode_is_refused_where_an_algorithm_reads_actor_entropy(compose_rlec):
    """verl's bypass mode logs no actor/entropy; E3's temperature and Pass@k's switch would then steer by nothing
    (E3's controller skips a step without it): both are refused by name; Pass@k without the switch reads none."""
    bypass = f"{BYPASS_KEY}=true"
    e3 = [str(f) for f in E3.check(RunConfig(compose_rlec("algorithm=e3", bypass))) if f.level == "error"]
    assert any(BYPASS_KEY in f and "rlec.e3.temperature reads" in f for f in e3), e3
    assert not [f for f in E3.check(RunConfig(compose_rlec("algorithm=e3"))) if f.level == "error"]
    switch = ("algorithm=passk", "rlec.passk.switch.enable=true", "rlec.passk.switch.entropy_threshold=0.3")
    passk = [str(f) for f in PassK.check(RunConfig(compose_rlec(*switch, bypass))) if f.level == "error"]
    assert any(BYPASS_KEY in f and "rlec.passk.switch reads" in f for f in passk), passk
    assert not [f for f in PassK.check(RunConfig(compose_rlec(*switch))) if f.level == "error"]
    assert not [f for f in PassK.check(RunConfig(compose_rlec("algorithm=passk", bypass))) if f.level == "error"]
