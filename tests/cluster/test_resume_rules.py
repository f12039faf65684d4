"""Resume rules on verl's trainer (rlec.rules.resume): the settings a run started with, recorded beside its
checkpoints, refuse a resume that changes what the run optimises (before Ray: the launcher's config check) and
keep the b schedule of a resumed longer run (verl's trainer: apply_resume_rules, before its workers start)."""

from __future__ import annotations

import json

import pytest

from rlec.cluster.config_check import main
from rlec.rules.resume import RUN_RECORD, apply_resume_rules, record_run, resume_setting_findings, resumes
from rlec.config import flatten
from rlec.reward.schedule import schedule_from_config
from rlec.run_config import RunConfig

TRACKER = "latest_checkpointed_iteration.txt"


def launch(compose_rlec, folder, *overrides):
    return compose_rlec("layout=cpu", "precision=fp32", f"trainer.default_local_dir={folder}", *overrides)


def test_a_resumed_longer_run_keeps_the_b_schedule_it_started_with(compose_rlec, tmp_path):
    """A 2-step run resumed to 4 steps: b = 1.0 at step 3 (the schedule ended at step 2), not 2/3."""
    two = launch(compose_rlec, tmp_path, "trainer.total_training_steps=2")
    assert record_run(two) == tmp_path / RUN_RECORD  # the launch that starts the run records its settings
    assert apply_resume_rules(two) is None  # nothing to resume yet: nothing pinned
    assert schedule_from_config(RunConfig(two))(2) == 1.0
    (tmp_path / TRACKER).write_text("2")  # verl's tracker: step 2 is checkpointed
    four = launch(compose_rlec, tmp_path, "trainer.total_training_steps=4")
    assert schedule_from_config(RunConfig(four))(3) == pytest.approx(2 / 3)  # what verl's trainer did before
    assert record_run(four) is None  # a resume keeps the first launch's record
    assert json.loads((tmp_path / RUN_RECORD).read_text())["trainer"]["total_training_steps"] == 2
    assert resume_setting_findings(four) == []  # the step count may change
    assert apply_resume_rules(four) == 2
    assert four.rlec.schedule.end_step == 2
    assert schedule_from_config(RunConfig(four))(3) == 1.0
    # an explicit end step that moves where b ends would re-plan the schedule: refused (before issue 55 it re-planned
    # it, a resume that changed the objective); a fresh start (resume disabled) plans over its own length
    explicit = launch(compose_rlec, tmp_path, "trainer.total_training_steps=4", "rlec.schedule.end_step=4")
    assert [f.key for f in resume_setting_findings(explicit)] == ["rlec.schedule.end_step"]
    with pytest.raises(ValueError, match=r"rlec\.schedule\.end_step\] None -> 4"):
        apply_resume_rules(explicit)
    same = launch(compose_rlec, tmp_path, "trainer.total_training_steps=4", "rlec.schedule.end_step=2")
    assert resume_setting_findings(same) == [] and apply_resume_rules(same) is None  # the same end, written out
    fresh = launch(compose_rlec, tmp_path, "trainer.total_training_steps=4", "trainer.resume_mode=disable")
    assert not resumes(fresh) and apply_resume_rules(fresh) is None


def test_a_resume_that_changes_what_the_run_optimises_is_refused_naming_each_key(compose_rlec, tmp_path):
    record_run(launch(compose_rlec, tmp_path))
    (tmp_path / TRACKER).write_text("5")
    changed = launch(compose_rlec, tmp_path, "algorithm=e3", "actor_rollout_ref.actor.optim.lr=0.5",
                     "trainer.total_training_steps=20", "trainer.save_freq=1")
    findings = resume_setting_findings(changed)
    keys = [f.key for f in findings]
    assert all(f.level == "error" for f in findings)
    assert "actor_rollout_ref.actor.optim.lr" in keys and "rlec.e3.enable" in keys
    # the step count and the checkpoint cadence are not what the run optimises
    assert not any(k.startswith(("trainer.", "rlec.schedule.")) for k in keys), keys
    lr = next(f for f in findings if f.key == "actor_rollout_ref.actor.optim.lr")
    assert "1e-05 -> 0.5" in lr.message and "changes what the run optimises" in lr.message
    assert str(tmp_path) in lr.message and "RESUME=disable" in lr.message
    with pytest.raises(ValueError, match=r"actor_rollout_ref\.actor\.optim\.lr"):
        apply_resume_rules(changed)  # verl's trainer refuses it too (a main_ppo started without the launcher)
    assert resume_setting_findings(launch(compose_rlec, tmp_path, "algorithm=e3", "trainer.resume_mode=disable")) == []


def test_missing_or_damaged_record(compose_rlec, tmp_path):
    cfg = launch(compose_rlec, tmp_path)
    (tmp_path / TRACKER).write_text("5")
    (warning,) = resume_setting_findings(cfg)  # checkpoints from before the record: a warning, nothing pinned
    assert warning.level == "warning" and RUN_RECORD in warning.message
    assert apply_resume_rules(cfg) is None
    (tmp_path / RUN_RECORD).write_text("{not json")
    (error,) = resume_setting_findings(cfg)
    assert error.level == "error" and error.key == "trainer.default_local_dir" and "unreadable" in error.message
    with pytest.raises(ValueError, match="unreadable"):
        apply_resume_rules(cfg)
    (tmp_path / RUN_RECORD).write_text("[1]")  # JSON, but not the resolved config's object
    (error,) = resume_setting_findings(cfg)
    assert (f"{tmp_path / RUN_RECORD}: expected a JSON object (the run's resolved config), got a JSON list; restore it"
            in error.message), error.message


def test_launcher_check_refuses_before_any_write_and_records_only_a_fresh_run(tmp_path, capsys, monkeypatch):
    """config_check --record-layout is what the launcher runs before Ray: exit 1 naming the key, nothing written."""
    monkeypatch.setenv("VERL_PLATFORM", "cpu")
    from rlec.cpu import enable_cpu

    enable_cpu(force=True)  # what the plugin does in every process of a TRAINER=verl run (fp32 Megatron parameters)
    folder = tmp_path / "run"
    base = ["layout=cpu", "precision=fp32", f"trainer.default_local_dir={folder}", "--skip-path-checks", "--record-layout"]
    assert main([*base, "--output", str(tmp_path / "first.yaml")]) == 0
    saved = (folder / RUN_RECORD).read_text()
    (folder / TRACKER).write_text("5")
    capsys.readouterr()
    out = tmp_path / "second.yaml"
    assert main([*base, "data.train_batch_size=16", "--output", str(out)]) == 1
    err = capsys.readouterr().err
    assert "data.train_batch_size" in err and "8 -> 16" in err and "changes what the run optimises" in err
    assert not out.exists() and (folder / RUN_RECORD).read_text() == saved  # nothing written
    assert main([*base, "trainer.total_training_steps=20", "--output", str(out)]) == 0  # a longer run resumes
    assert (folder / RUN_RECORD).read_text() == saved  # and keeps the record of the launch that started it


def test_a_resume_that_changes_passks_settings_in_their_home_is_refused(compose_rlec, tmp_path):
    """Pass@k's settings live in rlec.passk (issue 35): the registry's resume keys refuse a change there, with
    verl's copy algorithm.passk.k following it through the overlay's interpolation."""
    record_run(launch(compose_rlec, tmp_path, "algorithm=passk"))
    (tmp_path / TRACKER).write_text("2")
    assert resume_setting_findings(launch(compose_rlec, tmp_path, "algorithm=passk")) == []
    findings = resume_setting_findings(launch(compose_rlec, tmp_path, "algorithm=passk", "rlec.passk.k=3",
                                              "rlec.passk.switch.enable=true", "rlec.passk.switch.entropy_threshold=0.3"))
    assert sorted(f.key for f in findings) == ["algorithm.passk.k", "rlec.passk.k", "rlec.passk.switch.enable",
                                               "rlec.passk.switch.entropy_threshold"]
    assert all(f.level == "error" for f in findings) and "2 -> 3" in next(f for f in findings if f.key == "rlec.passk.k").message


def test_resume_disabled_into_a_folder_with_an_earlier_runs_checkpoints_is_refused_naming_it(compose_rlec, tmp_path):
    """The retired local loop moved such a folder aside; verl's path recorded the new run's settings over the earlier
    run's and kept its checkpoints, so a rerun with auto would resume them under the new record."""
    from rlec.rules.resume import fresh_start_findings

    assert fresh_start_findings(launch(compose_rlec, tmp_path / "new", "trainer.resume_mode=disable")) == []  # no folder
    assert fresh_start_findings(launch(compose_rlec, tmp_path, "trainer.resume_mode=disable")) == []  # empty folder
    (tmp_path / "global_step_3").mkdir()
    findings = fresh_start_findings(launch(compose_rlec, tmp_path, "trainer.resume_mode=disable"))
    assert [(f.level, f.key) for f in findings] == [("error", "trainer.default_local_dir")]
    assert "global_step_3" in findings[0].message and "another OUTPUT_DIR" in findings[0].message
    assert fresh_start_findings(launch(compose_rlec, tmp_path)) == []  # auto resumes them: the resume rules apply


def test_resume_path_names_a_step_folder_of_the_checkpoint_folder_and_counts_as_a_resume(compose_rlec, tmp_path):
    from rlec.rules.settings_rules import settings_rules

    def refused(*overrides):
        return [f.key for f in settings_rules(RunConfig(launch(compose_rlec, tmp_path, "trainer.resume_mode=resume_path", *overrides)))]

    assert refused() == ["trainer.resume_from_path"]  # verl asserts a str inside Ray, after the start-up
    assert refused(f"trainer.resume_from_path={tmp_path}/step_3") == ["trainer.resume_from_path"]
    assert refused(f"trainer.resume_from_path={tmp_path.parent}/other/global_step_3") == ["trainer.resume_from_path"]
    assert refused(f"trainer.resume_from_path={tmp_path}/global_step_3") == []
    assert resumes(launch(compose_rlec, tmp_path, "trainer.resume_mode=resume_path",
                          f"trainer.resume_from_path={tmp_path}/global_step_3"))  # so the resume rules apply to it


# issue 55 item 2: each of these passed a resume of a finished 2-step run (fp32) with `result OK`; the keys each changes
SIX = {
    "actor_rollout_ref.rollout.top_k=5": ["actor_rollout_ref.rollout.top_k"],
    "actor_rollout_ref.actor.ppo_epochs=3": ["actor_rollout_ref.actor.ppo_epochs", "critic.ppo_epochs"],  # verl's copy
    "actor_rollout_ref.actor.entropy_coeff=0.5": ["actor_rollout_ref.actor.entropy_coeff"],
    "actor_rollout_ref.rollout.response_length=16": ["actor_rollout_ref.rollout.response_length",
                                                     "distillation.teacher_models.teacher_model.inference.response_length"],
    "rlec.cpu.rollout_weight_noise=0.5": ["actor_rollout_ref.rollout.custom.rlec_weight_noise",  # the rollout's copy
                                          "rlec.cpu.rollout_weight_noise"],
    # the run trained in fp32: bf16 changes the actor's, the reference's and the rollout's dtypes (and the unused
    # distillation teacher's)
    "precision=bf16": ["actor_rollout_ref.actor.megatron.dtype", "actor_rollout_ref.ref.megatron.dtype",
                       "actor_rollout_ref.rollout.dtype", "distillation.teacher_models.teacher_model.inference.dtype"],
}


FIRST_VALUES = {"actor_rollout_ref.rollout.top_k=5": "-1 -> 5: ", "actor_rollout_ref.actor.ppo_epochs=3": "1 -> 3: ",
                "actor_rollout_ref.actor.entropy_coeff=0.5": "0 -> 0.5: ",
                "actor_rollout_ref.rollout.response_length=16": "64 -> 16: ",
                "rlec.cpu.rollout_weight_noise=0.5": "0.0 -> 0.5: ", "precision=bf16": "'float32' -> 'bfloat16': "}


@pytest.mark.parametrize("override", list(SIX))
def test_each_resume_change_that_passed_before_issue_55_is_refused_naming_both_values(compose_rlec, tmp_path, override):
    record_run(launch(compose_rlec, tmp_path, "trainer.total_training_steps=2"))
    (tmp_path / TRACKER).write_text("2")
    args = [a for a in ("layout=cpu", "precision=fp32") if a.split("=")[0] != override.split("=")[0]]
    resumed = compose_rlec(*args, f"trainer.default_local_dir={tmp_path}", "trainer.total_training_steps=4", override)
    findings = resume_setting_findings(resumed)
    assert sorted(f.key for f in findings) == SIX[override] and all(f.level == "error" for f in findings)
    old, new = flatten(json.loads((tmp_path / RUN_RECORD).read_text())), flatten(resumed)
    for f in findings:  # both values, the saved one first
        assert f.message.startswith(f"{old[f.key]!r} -> {new[f.key]!r}: "), f.message
    first = next(f for f in findings if f.key == SIX[override][0])
    assert first.message.startswith(FIRST_VALUES[override]), first.message  # by hand: the recipe's and CPU layout's
    with pytest.raises(ValueError, match=SIX[override][0].replace(".", r"\.")):
        apply_resume_rules(resumed)  # verl's trainer refuses it too


def _changed(value):
    """A different value of the same kind (what a user could pass on a resume)."""
    if value is None:
        return 1
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value + 1
    if isinstance(value, str):
        return value + "_changed"
    if isinstance(value, list):
        return [*value, 1]
    raise AssertionError(f"a leaf of an unexpected kind: {value!r}")


def test_every_key_of_the_resolved_config_is_allowed_or_refused_on_change(compose_rlec):
    """The generated check of issue 55 item 2: every key of the composed config (the CPU run with every algorithm
    overlay, and the cluster's) changed on a resume, alone, is either in the allow-list (noted) or refused; the
    allow-list names only keys that exist and none of the six changes issue 55 found passing; and what each entry
    allows is the whole list (printed by key when it grows)."""
    from rlec.config import RESUME_ALLOWED, resume_allowed, resume_differences

    configs = [flatten(compose_rlec("layout=cpu", "precision=fp32", "algorithm=[rlve,e3,passk]")), flatten(compose_rlec())]
    keys = sorted(set().union(*configs))
    assert len(keys) > 900  # the whole resolved config, verl's sections too
    for flat in configs:
        saved = {k: v for k, v in flat.items()}
        for key in flat:
            changed = {**saved, key: _changed(saved[key])}
            refused, noted = resume_differences(_nest(saved), _nest(changed))
            # the epochs end verl's loop only when the step count is set (resume_differences' one conditional key)
            if resume_allowed(key) or (key == "trainer.total_epochs" and saved["trainer.total_training_steps"] is not None):
                assert refused == [] and [line.split(":")[0] for line in noted] == [key], (key, refused)
            else:
                assert [line.split(":")[0] for line in refused] == [key] and noted == [], (key, noted)
    assert all(any(k == e or (e.endswith(".") and k.startswith(e)) for k in keys) for e in RESUME_ALLOWED), \
        [e for e in RESUME_ALLOWED if not any(k == e or k.startswith(e) for k in keys)]
    for override, changed_keys in SIX.items():
        assert not any(resume_allowed(k) for k in changed_keys), override
    # a short list (the parallel sizes spelled out per role), each entry with its reason: a new entry is a decision
    # (53: `rlec.probe.`, a measurement sampled from seeds of its own, which the training does not read; issue 57)
    assert len(RESUME_ALLOWED) <= 53 and all(RESUME_ALLOWED.values())


def _nest(flat: dict) -> dict:
    out: dict = {}
    for key, value in flat.items():
        node = out
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return out


def test_run_checks_applies_the_resume_rules_when_handed_a_run_config(compose_rlec, tmp_path):
    """run_checks takes the caller's RunConfig; the resume rules read its tree. Before the fix it passed the RunConfig
    itself to them, which read no checkpoint folder and refused nothing: a fresh start over an earlier run's
    checkpoints went through when the caller held a RunConfig."""
    from rlec.cluster.config_check import run_checks

    (tmp_path / "global_step_3").mkdir()
    cfg = launch(compose_rlec, tmp_path, "trainer.resume_mode=disable")
    findings, _, _ = run_checks(RunConfig(cfg), check_paths=False)
    assert "trainer.default_local_dir" in [f.key for f in findings if f.level == "error"]
