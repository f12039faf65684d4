"""Every write rlec makes into verl's composed trainer config while a run is built or trains: the one module that does.

rlec reads its settings once into typed objects (:mod:`rlec.settings`, each algorithm's settings class) and hands
those to its own code; it writes into verl's config only where verl reads a value from the config itself, at a
time or in a process rlec cannot reach otherwise. Each function below names the verl 0.9.1 behaviour that forces
its write; tests/verl_plugin/test_drift_config_writes.py probes each behaviour in verl's source (a verl release
that stops needing a write fails that test), and tests/test_config_writes.py checks that no other rlec module
writes into a config (``open_dict``, ``OmegaConf.update``).

===============================  ==========================================  =========================================
write                            the verl behaviour that forces it            caller
===============================  ==========================================  =========================================
:func:`set_base_trainer_mode`    ``PPOTrainer.__init__`` reads                rlec's trainers, at construction
                                 ``config.trainer.v1.trainer_mode`` and
                                 branches on ``== "sync"``; rlec's
                                 registered names are ``rlec_<base>``
:func:`write_step_overrides`     ``PPOTrainer._compute_advantage`` hands      :class:`~rlec.verl_plugin.trainers.
                                 the estimator only ``config.algorithm``;     AlgorithmsMixin`, before each step
                                 the actor's log-probs and update read
                                 ``rollout.temperature`` at call time
:func:`write_rollout_temperature`  the same call-time temperature read        the same, after the rollout plan
:func:`pin_schedule_end`         verl's reward-loop workers build rlec's      :func:`rlec.rules.resume.apply_resume_rules`,
                                 reward manager from the trainer config       before verl starts those workers
                                 (``load_reward_manager(self.config, ...)``)
===============================  ==========================================  =========================================

rlec's own rules judge rlec's trainer mode (``rlec_sync``), which :func:`set_base_trainer_mode` replaces in the
config verl reads; it first keeps rlec's mode in the config itself (``trainer.v1.rlec_trainer_mode``, a key verl never
reads), so :func:`rlec_trainer_mode` answers it for that config and any copy of it.
Imports nothing of verl, torch or rlec (ground floor: the rules and the trainer both call it).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from omegaconf import DictConfig, OmegaConf, open_dict

MODE_KEY = "trainer.v1.trainer_mode"
# rlec's trainer mode, kept by set_base_trainer_mode before it writes verl's base mode over MODE_KEY; verl reads
# trainer.v1 as a plain node (``trainer_mode``, ``sampler`` and ``trainer.v1.<mode>`` by name), so a key beside them
# changes nothing in verl
_RLEC_MODE = "rlec_trainer_mode"
RLEC_MODE_KEY = f"trainer.v1.{_RLEC_MODE}"
# rlec's trainers are registered as rlec_<verl's base mode> (rlec.verl_plugin.trainers; pinned by
# tests/verl_plugin/test_trainer_metrics.py)
RLEC_MODE_PREFIX = "rlec_"
TEMPERATURE_KEY = "actor_rollout_ref.rollout.temperature"
SCHEDULE_END_KEY = "rlec.schedule.end_step"

__all__ = ["MODE_KEY", "RLEC_MODE_KEY", "RLEC_MODE_PREFIX", "SCHEDULE_END_KEY", "TEMPERATURE_KEY", "pin_schedule_end",
           "rlec_trainer_mode", "set_base_trainer_mode", "verl_base_mode", "write_rollout_temperature",
           "write_step_overrides"]


def _v1_value(config: Any, name: str) -> Any:
    """``trainer.v1.<name>`` of a ``DictConfig`` or nested dict (None when any level is absent); reads only."""
    trainer = config.get("trainer") if hasattr(config, "get") else None
    v1 = trainer.get("v1") if hasattr(trainer, "get") else None
    return v1.get(name) if hasattr(v1, "get") else None


def set_base_trainer_mode(config: DictConfig, base_mode: str) -> None:
    """Write verl's base mode (``sync``, ``colocate_async``, ``separate_async``) as ``trainer.v1.trainer_mode``.

    Forced by verl: ``PPOTrainer.__init__`` sets ``self.trainer_mode = config.trainer.v1.trainer_mode``, reads
    ``trainer.v1.<mode>.parameter_sync_step`` and picks its replay buffer by ``== "sync"``; rlec's trainers are
    registered as ``rlec_<base>`` (verl picks the class by that name first). The mode it replaces is kept first as
    ``trainer.v1.rlec_trainer_mode`` (:data:`RLEC_MODE_KEY`, read by :func:`rlec_trainer_mode`), once: writing the
    base mode twice keeps the first rlec mode.
    """
    with open_dict(config):
        if _v1_value(config, _RLEC_MODE) is None:
            config.trainer.v1[_RLEC_MODE] = str(_v1_value(config, "trainer_mode") or "")
        config.trainer.v1.trainer_mode = base_mode


def rlec_trainer_mode(config: Any) -> str:
    """rlec's trainer mode of ``config`` (``rlec_sync``, ...): ``trainer.v1.rlec_trainer_mode`` (what
    :func:`set_base_trainer_mode` replaced), else ``trainer.v1.trainer_mode`` ("" when absent). Reads a
    ``DictConfig`` or a nested dict alike."""
    mode = _v1_value(config, _RLEC_MODE)
    if mode is None:
        mode = _v1_value(config, "trainer_mode")
    return "" if mode is None else str(mode)


def verl_base_mode(mode: str) -> str:
    """The mode verl's trainer runs as for the trainer mode ``mode`` (rlec's or verl's): rlec's ``rlec_<base>`` is
    ``<base>`` (``rlec_separate_async`` -> ``separate_async``, what :func:`set_base_trainer_mode` writes), verl's own as
    given, "" as "". So a reader of ``trainer.v1.<mode>`` settings gets verl's section whether or not the base mode is
    written yet (verl's trainer reads the config after rlec's trainer wrote it; rlec's trainer reads it before)."""
    return mode.removeprefix(RLEC_MODE_PREFIX)


def write_step_overrides(config: DictConfig, overrides: Mapping[str, Any]) -> None:
    """Write an algorithm's ``{dotted key: value}`` for the coming step (:meth:`rlec.algorithms.base.Algorithm.step_overrides`).

    Forced by verl: ``PPOTrainer._compute_advantage`` calls the estimator with ``config=self.config.algorithm``
    (Pass@k's ``algorithm.passk.active_k``), and ``_compute_old_log_prob`` / ``_compute_ref_log_prob`` /
    ``_update_actor`` read ``self.config.actor_rollout_ref.rollout.temperature`` at call time (E3's temperature).
    A key verl's schema lacks is added (``force_add``).
    """
    with open_dict(config):
        for key, value in overrides.items():
            OmegaConf.update(config, key, value, merge=False, force_add=True)


def write_rollout_temperature(config: DictConfig, temperature: float) -> None:
    """Write the step's sampling temperature as ``actor_rollout_ref.rollout.temperature``.

    Forced by verl: the actor's log-probs and update divide the logits by the temperature they read from the
    trainer config at call time (``_compute_old_log_prob``: ``"temperature": self.config.actor_rollout_ref.rollout.
    temperature``); the agent loop gets the same value in the batch (``rlec.algorithms.base.TEMPERATURE_FIELD``).
    The same write as :func:`write_step_overrides` of that one key.
    """
    write_step_overrides(config, {TEMPERATURE_KEY: temperature})


def pin_schedule_end(config: Any, end_step: int) -> None:
    """Write ``rlec.schedule.end_step`` (a resumed longer run keeps the b schedule it started with).

    Forced by verl: verl's reward-loop workers build rlec's reward manager (which reads the b schedule) from the
    trainer config verl hands them (``RewardLoopWorker``: ``load_reward_manager(self.config, ...)`` ->
    ``reward_manager_cls(config=config, ...)``); the config is the one carrier into those workers. Called before
    verl starts them. A plain dict is written as a dict.
    """
    if isinstance(config, DictConfig):
        with open_dict(config):
            OmegaConf.update(config, SCHEDULE_END_KEY, int(end_step), merge=False, force_add=True)
    else:
        config.setdefault("rlec", {}).setdefault("schedule", {})["end_step"] = int(end_step)
