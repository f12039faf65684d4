"""The local run's config: the cluster's schema at toy scale, environment variables, refusals, --help."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from rlec.config import flatten, select
from rlec.local.config import ENV_OVERRIDES, LOCAL_KEYS, LocalConfigError, env_overrides, load_config, settings_help

MG = "actor_rollout_ref.actor.megatron"


def test_yaml_env_and_arguments_layer_in_that_order() -> None:
    cfg = load_config(["actor_rollout_ref.rollout.n=6"], env={"ROLLOUT_N": "5", "STEPS": "7", "TP": "2", "DATA_DIR": "/d"})
    assert cfg.actor_rollout_ref.rollout.n == 6  # the argument wins over the environment
    assert cfg.trainer.total_training_steps == 7 and cfg.data.train_batch_size == 8  # env, then local.yaml
    assert select(cfg, f"{MG}.tensor_model_parallel_size") == 2 and select(cfg, f"{MG}.sequence_parallel") is True
    assert (cfg.data.train_files, cfg.data.val_files) == ("/d/train.parquet", "/d/test.parquet")


@pytest.mark.parametrize(("value", "mode"), [("1", "auto"), ("true", "auto"), ("auto", "auto"), ("0", "disable"), ("no", "disable")])
def test_resume_accepts_both_conventions(value: str, mode: str) -> None:
    assert load_config([], env={"RESUME": value}).trainer.resume_mode == mode


@pytest.mark.parametrize(
    ("overrides", "env", "match"),
    [
        (["actor_rollout_ref.rollout.n=1"], {}, "group of one has no baseline"),
        (["actor_rollout_ref.rollout.top_k=-2"], {}, r"\[actor_rollout_ref.rollout.top_k\] -2 must be an integer >= 1, or -1"),
        (["actor_rollout_ref.actor.ppo_epochs=2"], {}, "ppo_epochs=2 is not supported by the local run"),
        (["actor_rollout_ref.actor.use_kl_loss=true"], {}, "no reference model"),
        (["algorithm.rollout_correction.rollout_is=token"], {}, "rollout_is='token' is not supported by the local run"),
        (["rlec.local.threads=-1"], {}, r"\[rlec.local.threads\] -1 must be an integer >= 0"),
        (["rlec.local.scripted_fraction=1.5"], {}, r"\[rlec.local.scripted_fraction\] 1.5 must be in \[0, 1\)"),
        ([f"{MG}.tensor_model_parallel_size=2"], {}, "sequence_parallel=False with tensor_model_parallel_size=2"),
        (["trainer.total_training_steps=0"], {}, r"\[trainer.total_training_steps\] 0 must be an integer >= 1"),
        (["trainer.total_training_steps=1"], {}, "set rlec.schedule.end_step"),
        (["no.such.key=1"], {}, "bad setting"),
        ([], {"RESUME": "maybe"}, "RESUME='maybe'"),
        ([], {"ENVIRONMENTS": ","}, "ENVIRONMENTS=',' names no environment"),
        (["algorithm=rlve", "rlec.rlve.environments=[]"], {}, "names no environment"),
    ],
)
def test_bad_settings_are_refused_naming_the_key(overrides: list[str], env: dict, match: str) -> None:
    with pytest.raises(LocalConfigError, match=match):
        load_config(overrides, env=env)


def test_one_step_runs_with_an_explicit_schedule_length() -> None:
    cfg = load_config(["trainer.total_training_steps=1", "rlec.schedule.end_step=2"], env={})
    assert cfg.rlec.schedule.end_step == 2


def test_every_environment_variable_names_existing_keys() -> None:
    keys_of_config = set(flatten(load_config(["algorithm=rlve"], env={})))  # with the overlay ENVIRONMENTS selects
    for var, keys in ENV_OVERRIDES.items():
        for key in keys:
            assert key in keys_of_config or key == "algorithm", (var, key)  # algorithm: the overlay group
    assert all(override.split("=")[0] in {k for keys in ENV_OVERRIDES.values() for k in keys} | {f"{MG}.sequence_parallel"}
               for override in env_overrides({"TP": "1", "SEED": "3", "OUTPUT_DIR": "o"}))


def test_help_lists_every_setting_with_its_value() -> None:
    text = settings_help(load_config([], env={}))
    for key in LOCAL_KEYS:
        assert f"  {key} = " in text
    assert "actor_rollout_ref.rollout.n = 4" in text and "MODEL_PATH" in text


@pytest.mark.parametrize("overlays, expected", [((), []), (("algorithm=e3",), ["e3"]), (("algorithm=[rlve,e3,passk]",), ["e3", "passk", "rlve"])])
def test_help_names_the_algorithm_overlays_in_effect(overlays, expected) -> None:
    """--help shows the overlays in effect, not verl's whole algorithm section (a wall of nested dicts)."""
    from rlec.local.config import load_config, settings_help
    from rlec.algorithms.registry import enabled

    cfg = load_config(list(overlays), env={})
    assert [cls.name for cls in enabled(cfg)] == expected
    text = settings_help(cfg)
    line = next(line for line in text.splitlines() if line.startswith("  algorithm = "))
    assert line == f"  algorithm = {expected!r}"
    # every setting of an overlay in effect is listed with its value, and no other overlay's
    assert ("  rlec.e3.temperature.target_entropy = " in text) == ("e3" in expected)
    assert ("  rlec.passk.k = " in text) == ("passk" in expected)


def test_scripted_fraction_is_resolved_when_the_config_is_loaded_so_a_rerun_compares_equal() -> None:
    """null resolved only at training start made every rerun of the default command differ from the
    settings its checkpoint saved (0.25 -> None) and the resume was refused."""
    from rlec.config import resume_differences
    from rlec.local.config import TINY_SCRIPTED_FRACTION

    first = load_config(["trainer.total_training_steps=2"], env={})
    assert first.rlec.local.scripted_fraction == TINY_SCRIPTED_FRACTION
    assert load_config(["actor_rollout_ref.model.path=/models/qwen3"], env={}).rlec.local.scripted_fraction == 0.0
    assert load_config(["rlec.local.scripted_fraction=0.5"], env={}).rlec.local.scripted_fraction == 0.5
    saved = OmegaConf.to_container(first, resolve=True)  # what the checkpoint stores
    assert resume_differences(saved, load_config(["trainer.total_training_steps=2"], env={})) == ([], [])


def test_an_unknown_environment_is_refused_with_the_config_before_any_work() -> None:
    with pytest.raises(LocalConfigError, match="unknown environment 'nope'; known: .*'arithmetic'"):
        load_config([], env={"ENVIRONMENTS": "arithmetic,nope"})
    assert list(load_config([], env={"ENVIRONMENTS": "arithmetic,maze"}).rlec.rlve.environments) == ["arithmetic", "maze"]


@pytest.mark.parametrize(("overrides", "match"), [
    # DRY_RUN refused these while the local run trained on (Pass@k: every advantage 0 with k >= n)
    (["algorithm=passk", "rlec.passk.k=5"], "k"),
    (["algorithm=e3", "rlec.e3.budget.n_min=20", "rlec.e3.budget.n_max=4"], "n_min"),
])
def test_algorithm_settings_are_refused_by_the_same_rules_as_dry_run(overrides: list[str], match: str) -> None:
    with pytest.raises(LocalConfigError, match=match):
        load_config(overrides, env={})
