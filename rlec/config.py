"""The one config schema of rlec: verl's trainer config plus ``rlec.*``, composed by Hydra.

Every run (``python -m verl.trainer.main_ppo --config-path megatron_configs --config-name rlec``, on the
cluster and on CPU with ``layout=cpu precision=fp32``) composes the files under ``megatron_configs/``:
``recipe.yaml`` holds every algorithm setting once (``rlec.yaml`` puts it on verl's trainer config);
layouts (the CPU one adds the ``rlec.cpu.*`` settings a CPU run needs), precisions and algorithm overlays are
groups. rlec's own settings are
read once, typed and checked, through :class:`rlec.settings.RlecSettings`; verl's keys through
:func:`select`, which accepts a composed ``DictConfig`` or a plain nested dict (tests, JSON metadata).
The ground floor (:data:`CONFIG_DIR`, :class:`Finding`, :func:`select`, :func:`flatten`) is
:mod:`rlec.config_base`, re-exported here; the resume rule below refuses a resume that changes any setting but the
few that cannot change what the run optimises (:data:`RESUME_ALLOWED`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from rlec.config_base import CLUSTER_CONFIG, CONFIG_DIR, REPO_ROOT, Finding, flatten, select
from rlec.config_writes import SCHEDULE_END_KEY
from rlec.run_config import VerlKeys

__all__ = ["CLUSTER_CONFIG", "CONFIG_DIR", "REPO_ROOT", "RESUME_ALLOWED", "Finding", "compose", "flatten",
           "pinned_schedule_end", "resume_allowed", "resume_differences", "select"]


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


_PARALLEL = ("tensor_model", "expert_model", "expert_tensor", "pipeline_model", "virtual_pipeline_model", "context")
_LAYOUT_RULE = ("how the run is laid out over workers, not what it computes; the checkpoint's own sharding is refused "
                "by the layout rule (rlec_layout.json, rlec.rules.resume.layout_change_findings)")
_ROLLOUT_LAYOUT = "how the rollout engine is laid out: it is rebuilt from the synced weights each launch and samples the same"

# The settings a resume may change, each with why it cannot change what the run optimises (the model's updates: the
# data and its order, the samples drawn, their rewards, the loss, the optimiser). An entry ending in "." covers every
# key under it. Every other key of the resolved config that differs from the first launch's (or that only one side
# has) refuses the resume (:func:`resume_differences`): an allow-list, so a key nobody listed is refused, never missed.
RESUME_ALLOWED: dict[str, str] = {
    "trainer.total_training_steps": "how long the run goes on: the b schedule keeps the first launch's length "
                                    "(pinned_schedule_end) and the LR schedule is the checkpoint's "
                                    "(optim.use_checkpoint_opt_param_scheduler, itself refused on change)",
    "trainer.save_freq": "checkpoint cadence: saving reads the state, never changes it",
    "trainer.max_actor_ckpt_to_keep": "how many checkpoints stay on disk",
    "trainer.max_critic_ckpt_to_keep": "how many checkpoints stay on disk",
    "trainer.test_freq": "validation cadence: validation reads the model, never updates it",
    "trainer.val_before_train": "validation only",
    "data.val_files": "validation only",
    "data.val_max_samples": "validation only",
    "data.val_batch_size": "validation only",
    "data.validation_shuffle": "validation only",
    "actor_rollout_ref.rollout.val_kwargs.": "validation sampling only",
    "trainer.logger": "logging",
    "trainer.log_val_generations": "logging",
    "trainer.project_name": "the run's name in the loggers",
    "trainer.experiment_name": "the run's name in the loggers",
    "trainer.rollout_data_dir": "an output path (dumps of the rollouts)",
    "trainer.validation_data_dir": "an output path (dumps of the validation generations)",
    "trainer.default_local_dir": "the checkpoint folder itself (a moved folder); its checkpoints are what resumes",
    "trainer.resume_mode": "how the resume is asked for",
    "trainer.resume_from_path": "how the resume is asked for (a global_step_<N> of the same folder)",
    "trainer.ray_wait_register_center_timeout": "a start-up timeout",
    "ray_kwargs.": "how Ray starts: logical resources and the processes' environment (paths, thread counts)",
    "transfer_queue.": "verl's transport of the batch between workers (main_ppo turns it on in every launch): "
                       "storage size and addresses; it moves the batch, never changes it",
    "global_profiler.": "profiling",
    "data.dataloader_num_workers": "worker count: the sampler's seeded order, not the loader's processes, orders the data",
    "reward.num_workers": "worker count: each response is graded alone",
    "trainer.nnodes": _LAYOUT_RULE,
    "trainer.n_gpus_per_node": _LAYOUT_RULE,
    **{f"actor_rollout_ref.{role}.megatron.{size}_parallel_size": _LAYOUT_RULE
       for role in ("actor", "ref") for size in _PARALLEL},
    "actor_rollout_ref.actor.megatron.sequence_parallel": _LAYOUT_RULE + " (Megatron needs it with TP > 1)",
    "actor_rollout_ref.ref.megatron.sequence_parallel": _LAYOUT_RULE + " (Megatron needs it with TP > 1)",
    **{f"actor_rollout_ref.rollout.{size}_parallel_size": _ROLLOUT_LAYOUT
       for size in ("tensor_model", "data", "expert", "pipeline_model")},
    "actor_rollout_ref.rollout.n_gpus_per_node": _ROLLOUT_LAYOUT,
    "actor_rollout_ref.rollout.nnodes": _ROLLOUT_LAYOUT,
    "rlec.check.": "pre-launch checks' inputs (GPU memory and architecture, CPUs) and the mismatch alarm: they refuse "
                   "or stop a run, never change an update",
    "rlec.metrics.": "logging (metric buckets)",
    "rlec.checkpoint.": "what a checkpoint records about itself (its manifest)",
    "rlec.probe.": "measurement (the probe set's entropy, sampled by the rollout server from seeds of its own between "
                   "steps): it never changes an update",
    "rlec.cpu.eval.": "the final evaluation after training",
}
EPOCHS = "trainer.total_epochs"


def resume_allowed(key: str) -> bool:
    """Whether a resume may change ``key`` (a dotted key of the resolved config): :data:`RESUME_ALLOWED`."""
    return any(key == entry or (entry.endswith(".") and key.startswith(entry)) for entry in RESUME_ALLOWED)


def _plain(value: Any) -> Any:
    """A leaf as the run's record holds it (JSON: tuples become lists, other objects strings)."""
    import json

    return json.loads(json.dumps(value, default=str))


def _schedule_end(cfg: dict[str, Any]) -> Any:
    """Where b reaches its end value: ``rlec.schedule.end_step``, or the run's step count when unset."""
    end = cfg.get(SCHEDULE_END_KEY)
    return cfg.get("trainer.total_training_steps") if end is None else end


def resume_differences(saved: Any, current: Any) -> tuple[list[str], list[str]]:
    """Compare a run's saved settings with the ones it is resumed with.

    The rule (one for every launch: the launcher before Ray starts, verl's trainer at construction): every key of
    the resolved config that differs from the saved one, or that only one side has, refuses the resume unless a
    resume may change it (:data:`RESUME_ALLOWED`, each with its reason); those continue with a note.
    ``rlec.schedule.end_step`` is refused when it moves the step where b reaches its end value (the saved
    ``end_step``, or the saved step count when unset); written out at the same step it is only noted.
    ``trainer.total_epochs`` is noted when both sides set ``trainer.total_training_steps`` (the epochs then only
    end verl's loop, which a longer run over few rows needs: :func:`rlec.cluster.paths.steps_findings`), refused
    otherwise (they would set the step count, hence the b schedule). The b
    schedule keeps its original length when only the step count changes (see :func:`pinned_schedule_end`).

    Args:
        saved: the resolved config stored with the checkpoint.
        current: the resolved config of this launch.

    Returns:
        ``(refused, noted)``: one line per differing setting, ``"key: old -> new"`` (``<absent>`` for a key one
        side lacks), by key.
    """
    old, new = flatten(saved), flatten(current)
    refused, noted = [], []
    for key in sorted(set(old) | set(new)):
        if key in old and key in new and (old[key] == new[key] or _plain(old[key]) == _plain(new[key])):
            continue
        line = f"{key}: {old.get(key, '<absent>')!r} -> {new.get(key, '<absent>')!r}"
        if key == EPOCHS and all(side.get("trainer.total_training_steps") is not None for side in (old, new)):
            noted.append(line + " (the step count is set: the epochs only bound verl's loop)")
        elif key == SCHEDULE_END_KEY:
            same = _schedule_end(old) == (_schedule_end(new) if new.get(key) is not None else _schedule_end(old))
            (noted if same else refused).append(line + (" (b still reaches its end value at the same step)" if same
                                                        else " (moves the step where b reaches its end value)"))
        else:
            (noted if resume_allowed(key) else refused).append(line)
    return refused, noted


def pinned_schedule_end(saved: Any, current: Any) -> int | None:
    """The b schedule's end step a resumed run must keep, or None when nothing needs pinning.

    When this launch leaves ``rlec.schedule.end_step`` unset, the schedule's length would be its own step count; a
    resume keeps the run's (the saved ``end_step``, or the saved step count when that was unset too), so b reaches
    its end value where the original plan said. An explicit ``end_step`` is not pinned: :func:`resume_differences`
    refuses one that moves that step.
    """
    now, then = VerlKeys.read(current), VerlKeys.read(saved)
    if now.schedule_end_step is not None:
        return None
    old = then.schedule_end_step
    old = then.total_training_steps if old is None else old
    if old is None or old == now.total_training_steps:
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
