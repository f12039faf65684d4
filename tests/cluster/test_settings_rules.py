"""The early rule set (rlec/cluster/settings_rules.py): one set of refusals for DRY_RUN, the launcher and verl's
trainer on every layout (the CPU one of `make run` too), before any other check, the model or a write."""

from __future__ import annotations

import re

import pytest

from rlec.cluster.config_check import main
from rlec.cluster.settings_rules import early_errors, known_top_level_keys, settings_rules
from rlec.config import CPU_LAYOUT, CPU_PRECISION, compose

ACTOR = "actor_rollout_ref.actor"
# settings that passed every early check before (issue 24): key refused, the override that sets it
REFUSED = [
    ("algorithm.adv_estimator", "algorithm.adv_estimator=nonsense", "must be a registered verl advantage estimator"),
    ("rlec.grading.timeout_s", "rlec.grading.timeout_s=0", "must be a finite number of seconds > 0"),
    ("rlec.grading.timeout_s", "rlec.grading.timeout_s=nan", "must be a finite number of seconds > 0"),
    (f"{ACTOR}.optim.clip_grad", f"{ACTOR}.optim.clip_grad=nan", "must be a finite gradient-norm bound > 0"),
    ("data.seed", "data.seed=abc", "must be an integer"),
    (f"{ACTOR}.policy_loss.loss_mode", f"{ACTOR}.policy_loss.loss_mode=nonsense", "must be a registered verl policy loss"),
    (f"{ACTOR}.loss_agg_mode", f"{ACTOR}.loss_agg_mode=token-median", "must be a loss aggregation mode verl"),
    ("rlec.metrics.target_bucket_edges", "rlec.metrics.target_bucket_edges=[0,0.6,0.3,1]", "must be strictly increasing"),
    ("rlec.metrics.target_bucket_edges", "rlec.metrics.target_bucket_edges=[0,0.5,1.5]", r"must be at least 2 numbers in \[0, 1\]"),
    ("foo", "+foo.bar=1", "is not a key of verl's trainer config"),
    (f"{ACTOR}.checkpoint.async_save", f"{ACTOR}.checkpoint.async_save=true", "needs its files complete"),  # not hours in
    # verl logs "Unknown resume mode" and then fails on an unbound name inside Ray (the local loop refused it)
    ("trainer.resume_mode", "trainer.resume_mode=sometimes", "must be one of verl's resume modes"),
]


@pytest.mark.parametrize(("key", "override", "rule"), REFUSED)
def test_settings_that_passed_the_early_checks_are_refused_with_key_value_and_rule(tmp_path, capsys, key, override, rule):
    errors = early_errors(compose([f"layout={CPU_LAYOUT}", f"precision={CPU_PRECISION}", override]), [override])
    assert errors and errors[0].key == key and re.search(rule, errors[0].message), errors  # make run's layout too
    out = tmp_path / "resolved.yaml"
    assert main(["layout=tiny_1gpu", "--output", str(out), "--record-layout", override]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"rlec.cluster.config_check: refused: ERROR [{key}] "), lines
    assert not out.exists() and not any(tmp_path.iterdir())


def test_the_committed_algorithms_and_verls_other_estimators_pass():
    for overrides in (["algorithm=passk"], ["algorithm=[e3,rlve]"], ["algorithm.adv_estimator=rloo"],
                      [f"{ACTOR}.policy_loss.loss_mode=gspo", f"{ACTOR}.loss_agg_mode=seq-mean-token-mean"]):
        assert settings_rules(compose(overrides)) == [], overrides


def test_known_top_level_keys_are_verls_sections_and_rlecs():
    keys = known_top_level_keys()
    assert {"actor_rollout_ref", "algorithm", "data", "trainer", "reward", "ray_kwargs", "rlec", "model_engine"} <= keys
    assert "foo" not in keys
