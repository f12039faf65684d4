"""The checks every run passes before any work or write: rlec's settings schema and verl's keys verl checks late.

One rule set, called by ``DRY_RUN`` and the launcher (:func:`rlec.cluster.config_check.main`, exit 2
before anything is written), by the local run (:func:`rlec.local.config.check`, before anything is
written) and by verl's trainer at construction (:class:`rlec.verl_plugin.trainers.AlgorithmsMixin`).
Each finding names the full key, the value and the rule:

- rlec's own non-algorithm settings (:meth:`rlec.settings.RlecSettings.from_config`: types, ranges,
  unknown keys in its sections) and unknown ``rlec.<section>`` names (neither the schema's nor a
  registered algorithm's);
- an unknown top-level key (``+foo.bar=1``), which verl would silently ignore: the known ones are
  those of verl's own trainer config (``verl/trainer/config/_generated_ppo*_trainer.yaml``), the
  ``model_engine`` group and ``rlec``;
- ``algorithm.adv_estimator`` is registered in verl's advantage-estimator registry
  (``verl.trainer.ppo.core_algos.ADV_ESTIMATOR_REGISTRY``, rlec's plugin imported for ``rlec_*``
  names); otherwise verl fails after the first rollout;
- ``actor_rollout_ref.actor.policy_loss.loss_mode`` is registered in verl's ``POLICY_LOSS_REGISTRY``
  and ``actor_rollout_ref.actor.loss_agg_mode`` is accepted by verl's ``ActorConfig`` (its list is
  verl's, asked, not copied);
- ``actor_rollout_ref.actor.optim.clip_grad`` is a finite number > 0 and ``data.seed`` an integer or null.
- the b schedule spans more than one step: its end (``rlec.schedule.end_step``, else
  ``trainer.total_training_steps``) is after ``rlec.schedule.start_step`` (one rule for every path).
"""

from __future__ import annotations

import contextlib
import functools
import io
import math
from pathlib import Path
from typing import Any

from rlec.cluster.layout import Finding
from rlec.cluster.verl_keys import ACTOR
from rlec.config import select
from rlec.settings import RlecSettings, SettingError

__all__ = ["known_top_level_keys", "settings_rules"]

PLUGIN_MODULE = "rlec.verl_plugin"
# top-level keys besides verl's trainer sections: the engine group choice and rlec's own settings
EXTRA_TOP_LEVEL = ("model_engine", "rlec")


@functools.lru_cache(maxsize=1)
def known_top_level_keys() -> frozenset[str]:
    """The top-level keys of verl's own trainer configs plus :data:`EXTRA_TOP_LEVEL` (read once per process)."""
    import yaml

    import verl.trainer.config as verl_config

    folder = Path(verl_config.__file__).parent
    keys = set(EXTRA_TOP_LEVEL)
    for path in sorted(folder.glob("_generated_ppo*_trainer.yaml")):
        keys |= set(yaml.safe_load(path.read_text()) or {})
    return frozenset(keys)


def _quiet_import(module: str) -> Any:
    """Import ``module`` with what verl prints at import (accelerator warnings) held back."""
    import importlib

    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        return importlib.import_module(module)


def _registered_estimators(name: str) -> list[str]:
    """verl's registered advantage estimators; rlec's plugin is imported when ``name`` is not among verl's own."""
    core_algos = _quiet_import("verl.trainer.ppo.core_algos")
    if name not in core_algos.ADV_ESTIMATOR_REGISTRY:
        _quiet_import(PLUGIN_MODULE)  # registers rlec's estimators (rlec_passk)
    return sorted(core_algos.ADV_ESTIMATOR_REGISTRY)


def _verl_rules(cfg: Any) -> list[Finding]:
    out: list[Finding] = []

    def error(key: str, value: Any, rule: str) -> None:
        out.append(Finding("error", key, f"{value!r} {rule}"))

    unknown = sorted(set(cfg.keys()) - known_top_level_keys()) if hasattr(cfg, "keys") else []
    for key in unknown:
        error(key, select(cfg, key), "is not a key of verl's trainer config or rlec's: verl would ignore it (a typo?)")
    estimator = select(cfg, "algorithm.adv_estimator")
    registered = _registered_estimators(str(estimator))
    if str(estimator) not in registered:
        error("algorithm.adv_estimator", estimator, f"must be a registered verl advantage estimator: one of {registered}")
    loss_mode = select(cfg, f"{ACTOR}.policy_loss.loss_mode", "vanilla")
    losses = sorted(_quiet_import("verl.trainer.ppo.core_algos").POLICY_LOSS_REGISTRY)
    if str(loss_mode) not in losses:
        error(f"{ACTOR}.policy_loss.loss_mode", loss_mode, f"must be a registered verl policy loss: one of {losses}")
    agg = select(cfg, f"{ACTOR}.loss_agg_mode", "token-mean")
    actor_config = _quiet_import("verl.workers.config.actor").ActorConfig
    try:  # verl's own list of aggregation modes lives in ActorConfig.__post_init__
        actor_config(strategy="megatron", rollout_n=1, ppo_micro_batch_size_per_gpu=1, loss_agg_mode=str(agg))
    except ValueError:
        error(f"{ACTOR}.loss_agg_mode", agg, "must be a loss aggregation mode verl's ActorConfig accepts "
              "(token-mean, token-sum, seq-mean-token-sum, seq-mean-token-mean, ...)")
    clip = select(cfg, f"{ACTOR}.optim.clip_grad", 1.0)
    if isinstance(clip, bool) or not isinstance(clip, (int, float)) or not math.isfinite(clip) or clip <= 0:
        error(f"{ACTOR}.optim.clip_grad", clip, "must be a finite gradient-norm bound > 0")
    seed = cfg.get("data", {}).get("seed") if hasattr(cfg, "get") else None
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        error("data.seed", seed, "must be an integer (or null)")
    return out


def settings_rules(cfg: Any) -> list[Finding]:
    """Every finding of the early rule set (module docstring) on a composed config; errors only.

    Args:
        cfg: the composed trainer config (``DictConfig`` or nested dict).

    Returns:
        One ``error`` :class:`Finding` per refused setting under its full key, message ``"<value> <rule>"``.
    """
    out: list[Finding] = []
    try:
        settings = RlecSettings.from_config(cfg)
    except SettingError as exc:
        out.append(Finding("error", exc.key, f"{exc.value!r} {exc.rule}"))
    else:
        out += _schedule_rules(cfg, settings)
    return out + _section_rules(cfg) + _verl_rules(cfg)


def _schedule_rules(cfg: Any, settings: RlecSettings) -> list[Finding]:
    """The b schedule (``rlec.schedule``) spans more than one step: its end (``end_step``, else
    ``trainer.total_training_steps``) is after ``start_step`` (the schema checks an explicit end alone)."""
    schedule = settings.schedule
    total = cfg.get("trainer", {}).get("total_training_steps") if hasattr(cfg, "get") else None
    end = schedule.end_step if schedule.end_step is not None else total
    if end is None or isinstance(end, bool) or not isinstance(end, int) or end > schedule.start_step:
        return []
    if schedule.end_step is None and end < 1:
        return []  # a step count < 1 is refused as such by the run's own checks
    return [Finding("error", "rlec.schedule.end_step",
                    f"{end!r} the b schedule needs more than one step, but it would end at step {end} <= start_step "
                    f"{schedule.start_step}: with trainer.total_training_steps={total} set rlec.schedule.end_step >= "
                    f"{schedule.start_step + 1}")]


def _section_rules(cfg: Any) -> list[Finding]:
    """An ``rlec.<name>`` section that neither the schema nor a registered algorithm owns (a typo of a section
    name); an algorithm's section (its ``section``, e.g. ``rlec.e3``) is accepted without a
    change here (docs/adding_an_algorithm.md)."""
    from rlec.algorithms.registry import ALGORITHMS

    section = cfg.get("rlec") if hasattr(cfg, "get") else None
    if not hasattr(section, "keys"):
        return []
    owned = {cls.section.removeprefix("rlec.").split(".")[0] for cls in ALGORITHMS if cls.section.startswith("rlec.")}
    known = RlecSettings.sections() | owned
    return [Finding("error", f"rlec.{name}", f"{section[name]!r} is not an rlec section (known: {sorted(known)})")
            for name in section.keys() if name not in known]
