"""The early rule set (rlec/rules/settings_rules.py): one set of refusals for DRY_RUN, the launcher and verl's
trainer on every layout (the CPU one of `make run` too), before any other check, the model or a write."""

from __future__ import annotations

import dataclasses
import re

import pytest

from rlec.cluster.config_check import main
from rlec.rules.settings_rules import CPU_WING_SWITCHES, early_errors, known_top_level_keys, settings_rules
from rlec.settings import CpuSettings
from rlec.config import CPU_LAYOUT, CPU_PRECISION, compose
from rlec.run_config import RunConfig

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
    errors = early_errors(RunConfig(compose([f"layout={CPU_LAYOUT}", f"precision={CPU_PRECISION}", override])), [override])
    assert errors and errors[0].key == key and re.search(rule, errors[0].message), errors  # make run's layout too
    out = tmp_path / "resolved.yaml"
    assert main(["layout=tiny_1gpu", "--output", str(out), "--record-layout", override]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"rlec.cluster.config_check: refused: ERROR [{key}] "), lines
    assert not out.exists() and not any(tmp_path.iterdir())


def test_the_committed_algorithms_and_verls_other_estimators_pass():
    for overrides in (["algorithm=passk"], ["algorithm=[e3,rlve]"], ["algorithm.adv_estimator=rloo"],
                      [f"{ACTOR}.policy_loss.loss_mode=gspo", f"{ACTOR}.loss_agg_mode=seq-mean-token-mean"]):
        assert settings_rules(RunConfig(compose(overrides))) == [], overrides


def test_known_top_level_keys_are_verls_sections_and_rlecs():
    keys = known_top_level_keys()
    assert {"actor_rollout_ref", "algorithm", "data", "trainer", "reward", "ray_kwargs", "rlec", "model_engine"} <= keys
    assert "foo" not in keys


# issue 55 "What broke" item 5: settings a launch accepted (`result OK`), each with the rule that now refuses it, on the
# CPU layout (train_batch_size 8, rollout.n 4, max_response_length 64, TransferQueue storage 100,000 rows)
ISSUE_55 = [
    ((f"{ACTOR}.optim.betas=[2.0,0.999]",), f"{ACTOR}.optim.betas",
     r"^\[2\.0, 0\.999\] must be two numbers \[beta1, beta2\], each in \[0, 1\)"),
    ((f"{ACTOR}.optim.betas=[0.9,1.0]",), f"{ACTOR}.optim.betas", r"each in \[0, 1\)"),  # 1 is outside: never forgets
    ((f"{ACTOR}.optim.betas=[0.9]",), f"{ACTOR}.optim.betas", r"must be two numbers"),
    # 100,000 rows / 8 prompts = 12,500 responses per prompt at most
    (("actor_rollout_ref.rollout.n=1000000",), "actor_rollout_ref.rollout.n",
     r"^1000000 must be at most .*total_storage_size / data.train_batch_size = 100000 / 8 = 12500: a step's 8 x 1000000 "
     r"= 8,000,000 responses"),
    (("actor_rollout_ref.rollout.n=12501",), "actor_rollout_ref.rollout.n", r"= 12500:"),
    # 8 prompts x 4 responses = 32 responses a step: the most the budget can give one prompt
    (("algorithm=e3", "rlec.e3.budget.n_max=100000"), "rlec.e3.budget.n_max",
     r"^100000 must be at most data.train_batch_size x rollout.n = 8 x 4 = 32"),
    (("algorithm=e3", "rlec.e3.budget.n_max=33"), "rlec.e3.budget.n_max", r"= 32"),
    (("rlec.grading.timeout_s=1e308",), "rlec.grading.timeout_s", r"^1e\+308 must be a finite number of seconds > 0 and <= 60"),
    (("rlec.grading.timeout_s=60.5",), "rlec.grading.timeout_s", r"<= 60: the grader's per-item hang guard"),
    (("actor_rollout_ref.rollout.response_length=7",), "actor_rollout_ref.rollout.response_length",
     r"^7 must equal data.max_response_length \(64\)"),
    (("actor_rollout_ref.rollout.response_length=65",), "actor_rollout_ref.rollout.response_length", r"must equal"),
]


@pytest.mark.parametrize(("overrides", "key", "rule"), ISSUE_55)
def test_issue_55_settings_are_refused_with_key_value_and_rule_before_any_write(tmp_path, capsys, overrides, key, rule):
    cpu = [f"layout={CPU_LAYOUT}", f"precision={CPU_PRECISION}"]
    errors = early_errors(RunConfig(compose([*cpu, *overrides])), list(overrides))
    assert [e.key for e in errors] == [key] and re.search(rule, errors[0].message), errors
    out = tmp_path / "resolved.yaml"
    rc = main([*cpu, "--skip-path-checks", "--output", str(out), "--record-layout", *overrides])
    err = capsys.readouterr().err
    if key.startswith("rlec.e3."):  # an algorithm's own check (E3.check): an error line of the verdict, exit status 1
        assert rc == 1 and f"ERROR [{key}] " in err, err
    else:  # the early rule set: one line, exit status 2
        lines = err.strip().splitlines()
        assert rc == 2 and len(lines) == 1 and lines[0].startswith(f"rlec.cluster.config_check: refused: ERROR [{key}] "), lines
    assert not out.exists() and not any(tmp_path.iterdir())


@pytest.mark.parametrize("overrides", [
    (f"{ACTOR}.optim.betas=[0.0,0.0]",), (f"{ACTOR}.optim.betas=[0.9,0.95]",),
    ("actor_rollout_ref.rollout.n=12500",), ("algorithm=e3", "rlec.e3.budget.n_max=32"),
    ("rlec.grading.timeout_s=60",), ("data.max_response_length=7",),  # the rollout's length follows the data's
    ("transfer_queue.backend.SimpleStorage.total_storage_size=null", "actor_rollout_ref.rollout.n=1000000"),  # unbounded
])
def test_the_bounds_themselves_pass(overrides):
    assert early_errors(RunConfig(compose([f"layout={CPU_LAYOUT}", f"precision={CPU_PRECISION}", *overrides]))) == []


@pytest.mark.parametrize("name", CPU_WING_SWITCHES)
def test_the_cpu_wings_settings_are_refused_on_a_gpu_layout_and_kept_on_the_cpu_one(name):
    """Issue 59 item 3 moved scripted answers and the induced mismatch into the CPU wing, loaded only on the CPU
    platform: on a GPU layout ``rlec.cpu.<name>`` would have been ignored without a word; now it is refused naming the
    key and the device. The CPU layout (trainer.device=cpu) keeps it."""
    override = f"++rlec.cpu.{name}=0.25"
    found = settings_rules(RunConfig(compose(["layout=tiny_1gpu", override])))
    assert [f.key for f in found] == [f"rlec.cpu.{name}"], found
    assert "trainer.device=cuda" in found[0].message and "layout=cpu" in found[0].message
    assert settings_rules(RunConfig(compose([f"layout={CPU_LAYOUT}", f"precision={CPU_PRECISION}", f"rlec.cpu.{name}=0.25"]))) == []
    assert settings_rules(RunConfig(compose(["layout=tiny_1gpu"]))) == []  # the defaults (0) pass on a GPU layout


@pytest.mark.parametrize("name", CPU_WING_SWITCHES)
def test_a_cpu_wing_switch_at_its_dataclass_default_passes_on_a_gpu_layout(name):
    """The rule compares each switch with :class:`rlec.settings.CpuSettings`' default (one default per setting), so
    writing the default out on a GPU layout is no error; the switches are CpuSettings' fields (a rename fails here)."""
    default = {f.name: f.default for f in dataclasses.fields(CpuSettings)}[name]
    assert settings_rules(RunConfig(compose(["layout=tiny_1gpu", f"++rlec.cpu.{name}={default}"]))) == []
    assert settings_rules(RunConfig(compose(["layout=tiny_1gpu", f"++rlec.cpu.{name}={default + 0.5}"])))[0].key == f"rlec.cpu.{name}"
