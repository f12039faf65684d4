"""The one config schema of rlec: verl's trainer config plus ``rlec.*``, composed by Hydra.

Every run (``python -m verl.trainer.main_ppo --config-path megatron_configs --config-name rlec``, on the
cluster and on CPU with ``layout=cpu precision=fp32``) composes the files under ``megatron_configs/``:
``recipe.yaml`` holds every algorithm setting once (``rlec.yaml`` puts it on verl's trainer config);
layouts (the CPU one adds the ``rlec.cpu.*`` settings a CPU run needs), precisions and algorithm overlays are
groups. rlec's own settings are
read once, typed and checked, through :class:`rlec.settings.RlecSettings`; verl's keys through
:func:`select`, which accepts a composed ``DictConfig`` or a plain nested dict (tests, JSON metadata).
The ground floor (:data:`CONFIG_DIR`, :class:`Finding`, :func:`select`, :func:`flatten`) is
:mod:`rlec.config_base`, re-exported here; the resume rules below add every registered algorithm's keys
(:mod:`rlec.algorithms.registry`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from rlec.config_base import CLUSTER_CONFIG, CONFIG_DIR, REPO_ROOT, Finding, flatten, select

__all__ = ["CLUSTER_CONFIG", "CONFIG_DIR", "REPO_ROOT", "Finding", "compose", "flatten", "pinned_schedule_end",
           "resume_differences", "resume_refused", "select"]


def compose(overrides: Sequence[str] = (), config_name: str = CLUSTER_CONFIG, config_dir: str | Path = CONFIG_DIR) -> Any:
    """Compose a config the way ``verl.trainer.main_ppo --config-path DIR --config-name NAME`` does.

    Args:
        overrides: Hydra overrides (``key=value``, ``group=option``, ``+new.key=value``).
        config_name: ``rlec`` (every run; the CPU run adds ``layout=cpu precision=fp32``).
        config_dir: the folder holding the YAML files.

    Returns:
        The composed ``omegaconf.DictConfig`` (struct mode: unknown keys are errors).

    Raises:
        hydra.errors.HydraException / omegaconf.errors.OmegaConfBaseException: an unknown group
            option or key, a bad override, a missing file.
    """
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(Path(config_dir).resolve()), version_base=None):
        return hydra_compose(config_name=config_name, overrides=list(overrides))


# Settings a resumed run may change, with what happens; any other difference in these prefixes
# refuses the resume (it would silently change what the run optimises). Each registered algorithm
# adds its own (:meth:`rlec.algorithms.base.Algorithm.resume_refused`): :func:`resume_refused`.
RESUME_REFUSED = (
    "algorithm.", "rlec.schedule.", "rlec.grading.",
    "data.train_files", "data.seed", "data.train_batch_size", "data.max_prompt_length", "data.max_response_length",
    "data.custom_cls.", "actor_rollout_ref.model.path", "actor_rollout_ref.rollout.n", "actor_rollout_ref.rollout.temperature",
    "actor_rollout_ref.rollout.top_p", "actor_rollout_ref.rollout.seed", "actor_rollout_ref.actor.clip_ratio",
    "actor_rollout_ref.actor.loss_agg_mode", "actor_rollout_ref.actor.policy_loss.", "actor_rollout_ref.actor.ppo_mini_batch_size",
    "actor_rollout_ref.actor.optim.", "rlec.cpu.scripted_fraction",
)


def resume_refused() -> tuple[str, ...]:
    """The key prefixes a resume may not change: :data:`RESUME_REFUSED` plus every registered algorithm's
    (:func:`rlec.algorithms.registry.resume_refused`), read from the registry at each call."""
    from rlec.algorithms.registry import resume_refused as algorithms_refused

    return RESUME_REFUSED + tuple(p for p in algorithms_refused() if p not in RESUME_REFUSED)


def resume_differences(saved: Any, current: Any) -> tuple[list[str], list[str]]:
    """Compare a run's saved settings with the ones it is resumed with.

    The rule (one for every launch: the launcher before Ray starts, verl's trainer at construction): a setting that changes what the run
    optimises (:func:`resume_refused`: the algorithm, every registered algorithm's settings, the b
    schedule, data, sampling, loss, optimiser) refuses the resume; anything else (step count, checkpoint cadence, logging,
    parallel layout, evaluation settings, an explicit ``rlec.schedule.end_step``) continues with a
    note. The b schedule keeps its original length when only the step count changes (see
    :func:`pinned_schedule_end`).

    Args:
        saved: the resolved config stored with the checkpoint.
        current: the resolved config of this launch.

    Returns:
        ``(refused, noted)``: one line per differing setting, ``"key: old -> new"``.
    """
    old, new = flatten(saved), flatten(current)
    prefixes = resume_refused()
    refused, noted = [], []
    for key in sorted(set(old) | set(new)):
        if key in old and key in new and old[key] == new[key]:
            continue
        if key not in old or key not in new:
            continue  # a key only one side has (a newer rlec added it): not a changed setting
        line = f"{key}: {old[key]!r} -> {new[key]!r}"
        if key == "rlec.schedule.end_step":
            noted.append(line + " (the b schedule is re-planned from here)")
        else:
            (refused if key.startswith(prefixes) else noted).append(line)
    return refused, noted


def pinned_schedule_end(saved: Any, current: Any) -> int | None:
    """The b schedule's end step a resumed run must keep, or None when nothing needs pinning.

    When ``rlec.schedule.end_step`` is unset on both sides, the schedule's length is the run's
    step count; a resume that changes only the step count keeps the original length (b reaches 1
    where the original plan said); setting ``rlec.schedule.end_step`` explicitly re-plans it.
    """
    if select(saved, "rlec.schedule.end_step") is not None or select(current, "rlec.schedule.end_step") is not None:
        return None
    old, new = select(saved, "trainer.total_training_steps"), select(current, "trainer.total_training_steps")
    if old is None or old == new:
        return None
    return int(old)


# verl's own trainer on CPU (TRAINER=verl without a GPU): megatron_configs/layout/cpu.yaml + precision/fp32.yaml
CPU_LAYOUT = "cpu"
CPU_PRECISION = "fp32"


def options(group: str, config_dir: str | Path = CONFIG_DIR) -> list[str]:
    """The committed options of a config group (``megatron_configs/<group>/*.yaml`` stems), sorted.

    ``options("layout")`` includes :data:`CPU_LAYOUT` (verl's trainer on CPU; the GPU checks are not meant for it):
    use :func:`cluster_layouts` for cluster runs.
    """
    return sorted(p.stem for p in (Path(config_dir) / group).glob("*.yaml"))


def cluster_layouts(config_dir: str | Path = CONFIG_DIR) -> list[str]:
    """The layouts a GPU run can select (every layout but verl-on-CPU's)."""
    return [name for name in options("layout", config_dir) if name != CPU_LAYOUT]


def gpu_precisions(config_dir: str | Path = CONFIG_DIR) -> list[str]:
    """The precisions a GPU run can select (every one but :data:`CPU_PRECISION`)."""
    return [name for name in options("precision", config_dir) if name != CPU_PRECISION]
