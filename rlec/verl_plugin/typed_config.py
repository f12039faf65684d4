"""verl's own sections of a composed config as verl's typed dataclasses, for rlec's runtime readers.

verl turns its sections into dataclasses with ``verl.utils.config.omega_conf_to_dataclass``
(``actor_rollout_ref.actor`` -> ``McoreActorConfig`` by its ``_target_``, ``actor_rollout_ref.rollout``
-> ``RolloutConfig``, ``algorithm`` -> ``AlgoConfig``). rlec's code that reads verl's keys while a run
trains, after every check passed, reads them here, so it sees the value, type and default verl's
workers see (not a raw ``select`` with a default of its own). What still reads verl's keys raw, and
why (checks that must judge a raw value, pure modules that import no verl, sections verl has no
dataclass for): docs/hyperparameters.md, "Reading verl's keys".
"""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig, OmegaConf
from verl.utils.config import omega_conf_to_dataclass

from rlec.config import select
from rlec.run_config import ACTOR, ROLLOUT

__all__ = ["actor_config", "algo_config", "live_algorithm_value", "rollout_config"]


def _convert(cfg: Any, key: str, section: Any = None) -> Any:
    node = select(cfg, key) if section is None else section
    if node is None:
        raise ValueError(f"{key}: the config has no such section (compose verl's trainer config)")
    if not isinstance(node, DictConfig):
        node = OmegaConf.create(node)
    try:
        return omega_conf_to_dataclass(node)
    except Exception as exc:  # verl's dataclass refused a value: name the section
        raise ValueError(f"{key}: verl's config dataclass refuses it: {type(exc).__name__}: {exc}") from exc


def actor_config(cfg: Any) -> Any:
    """``actor_rollout_ref.actor`` as verl's actor dataclass (``McoreActorConfig`` on the Megatron engine).

    Raises:
        ValueError: no such section, or verl's dataclass refuses a value (the message names the section).
    """
    return _convert(cfg, ACTOR)


def rollout_config(cfg: Any) -> Any:
    """``actor_rollout_ref.rollout`` as verl's ``RolloutConfig``.

    Raises:
        ValueError: no such section, or verl's dataclass refuses a value.
    """
    return _convert(cfg, ROLLOUT)


def live_algorithm_value(algorithm: Any, key: str, default: Any = None) -> Any:
    """``key`` (dotted) of verl's live ``algorithm`` section as an advantage estimator receives it, or ``default``
    when absent or null.

    The one read rlec cannot do once: verl hands a registered estimator only ``config=self.config.algorithm``
    (``PPOTrainer._compute_advantage``), at call time, and rlec's trainer writes the step's values there
    (``passk.active_k``: :func:`rlec.config_writes.write_step_overrides`), so the estimator reads that section at every
    call (raw: ``AlgoConfig`` has no field for the keys rlec's algorithms add, ``passk``).
    """
    return select(algorithm, key, default)


def algo_config(cfg: Any) -> Any:
    """``algorithm`` as verl's ``AlgoConfig``, without the keys rlec's algorithms add to it (``passk``, which
    ``AlgoConfig`` has no field for: :func:`rlec.rules.checks.verl_algorithm_section`).

    Raises:
        ValueError: no such section, or verl's dataclass refuses a value.
    """
    from rlec.rules.checks import verl_algorithm_section

    section = select(cfg, "algorithm")
    if section is None:
        raise ValueError("algorithm: the config has no such section (compose verl's trainer config)")
    return _convert(cfg, "algorithm", verl_algorithm_section(section))
