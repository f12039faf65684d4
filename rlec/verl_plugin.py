"""rlec's registrations in verl 0.9.1: the ``rlec`` reward manager and trainers that log its metrics.

This is the only rlec module that imports verl's registries. Import it in every Ray process
(the reward-loop workers run the reward manager, the TaskRunner builds the trainer) by setting

    VERL_USE_EXTERNAL_MODULES=rlec.verl_plugin

in the launching shell (``verl/__init__.py`` imports the listed modules) and, for Ray clusters
started with ``ray start``, also in ``ray_kwargs.ray_init.runtime_env.env_vars`` (workers inherit
the environment of ``ray start``, not of the driver). ``megatron_configs/rlec.yaml`` and
``tools/run_megatron_rlec.sh`` do both. Without it a worker dies with ``Unknown reward manager: rlec``.

Registered here:

- reward manager ``rlec`` (``reward.reward_manager.source=register``, ``name=rlec``): verl's
  naive manager (decoding, verl's per-sample interface) with rlec's score function. b comes from
  :class:`rlec.rewards.LinearSchedule` at ``data.non_tensor_batch["global_steps"]``, which verl's
  V1 trainer stamps on every batch (``extra_info["global_steps"]`` is the rollout weights version
  instead, see docs/cluster.md). The schedule length is :func:`schedule_length`.
- trainers ``rlec_sync``, ``rlec_colocate_async``, ``rlec_separate_async``
  (``trainer.v1.trainer_mode``): verl's trainers of the same name plus ``rlec/...`` training
  metrics and ``val-rlec/...`` validation metrics (:mod:`rlec.reward_metrics`). verl 0.9.1 logs
  ``reward_extra_info`` only in validation (``val-core/<data_source>/<key>/mean@N``); its
  training steps log just ``critic/score/*``.

Later registrations (e.g. a custom advantage estimator with ``@register_adv_est``) belong here.
"""

from __future__ import annotations

import contextvars
import logging
from typing import Any

import numpy as np
from omegaconf import OmegaConf, open_dict
from verl import DataProto
from verl.experimental.reward_loop.reward_manager import register
from verl.experimental.reward_loop.reward_manager.naive import NaiveRewardManager
from verl.trainer.ppo.v1 import PPOTrainerColocateAsync, PPOTrainerSeparateAsync, PPOTrainerSync, register_trainer

from rlec.batch_reward import DEFAULT_BUCKET_EDGES, score_one_async
from rlec.grading.math import DEFAULT_TIMEOUT_S
from rlec.reward_metrics import reward_metrics, rows_from_columns
from rlec.rewards import LinearSchedule

logger = logging.getLogger(__name__)

PLUGIN_MODULE = "rlec.verl_plugin"
REWARD_MANAGER_NAME = "rlec"
# The step of the sample being scored. ``run_single`` sets it and awaits verl's naive
# ``run_single`` in the same asyncio task, which awaits our async score function: the value
# cannot leak between concurrently scored samples, even of different steps.
_GLOBAL_STEP: contextvars.ContextVar[int] = contextvars.ContextVar("rlec_global_step")

__all__ = [
    "PLUGIN_MODULE",
    "REWARD_MANAGER_NAME",
    "RLECRewardManager",
    "RLECMetricsMixin",
    "global_step_of",
    "schedule_from_config",
    "schedule_length",
]


def _select(config: Any, key: str) -> Any:
    return OmegaConf.select(config, key, default=None) if OmegaConf.is_config(config) else None


def schedule_length(config: Any) -> int:
    """The global step at which b reaches its end value, read from verl's trainer config.

    First match wins:

    1. ``rlec.schedule.end_step`` (rlec's own setting);
    2. ``trainer.total_training_steps`` (verl's explicit step count);
    3. ``actor_rollout_ref.actor.optim.total_training_steps / parameter_sync_step``: verl's
       trainer writes this (dataset size // train_batch_size * total_epochs, times the local
       updates per step) into the config in ``_init_dataloader``, before it starts the reward
       workers, so the workers see the real count.

    Raises:
        ValueError: none of these is set (a config used outside verl's trainer).
    """
    for key in ("rlec.schedule.end_step", "trainer.total_training_steps"):
        value = _select(config, key)
        if value is not None:
            return int(value)
    optim_steps = _select(config, "actor_rollout_ref.actor.optim.total_training_steps")
    if optim_steps is not None and int(optim_steps) > 0:
        mode = _select(config, "trainer.v1.trainer_mode") or "sync"
        per_step = _select(config, f"trainer.v1.{mode}.parameter_sync_step") or 1
        return int(optim_steps) // int(per_step)
    raise ValueError(
        "cannot tell the b schedule's length: set rlec.schedule.end_step or trainer.total_training_steps "
        "(verl's trainer sets actor_rollout_ref.actor.optim.total_training_steps itself)"
    )


def schedule_from_config(config: Any) -> LinearSchedule:
    """The b schedule: ``rlec.schedule.{start_value, end_value, start_step}`` and :func:`schedule_length`.

    Raises:
        ValueError: see :func:`schedule_length`; values outside [0, 1]; end step <= start step.
    """
    start_value = _select(config, "rlec.schedule.start_value")
    end_value = _select(config, "rlec.schedule.end_value")
    start_step = _select(config, "rlec.schedule.start_step")
    return LinearSchedule(
        end_step=schedule_length(config),
        start_value=0.0 if start_value is None else float(start_value),
        end_value=1.0 if end_value is None else float(end_value),
        start_step=1 if start_step is None else int(start_step),
    )


def global_step_of(data: DataProto) -> int:
    """The trainer's global step of a reward-loop item (``non_tensor_batch["global_steps"]``).

    Raises:
        KeyError: the item carries no ``global_steps`` (only verl's V1 trainer stamps it).
    """
    steps = data.non_tensor_batch.get("global_steps")
    if steps is None:
        raise KeyError(
            "the rlec reward manager needs data.non_tensor_batch['global_steps'], which verl's V1 trainer "
            "(trainer.use_v1=true) stamps on every batch; got keys "
            f"{sorted(data.non_tensor_batch)}"
        )
    return int(np.asarray(steps).reshape(-1)[-1])


@register(REWARD_MANAGER_NAME)
class RLECRewardManager(NaiveRewardManager):
    """verl's naive reward manager scoring with R_p^(b), b scheduled by the global step.

    Config (the trainer config verl passes in): ``rlec.schedule.*`` (see
    :func:`schedule_from_config`), ``rlec.grading.timeout_s`` (math-verify per item, seconds),
    ``rlec.metrics.target_bucket_edges``.

    Returns from ``run_single``: ``{"reward_score": R_p^(b), "reward_extra_info":``
    :func:`rlec.batch_reward.sample_info` ``}``.

    Raises:
        ValueError: ``reward.custom_reward_function.path`` is set (it would be ignored), or the
            schedule length is unknown.
    """

    def __init__(self, config, tokenizer, compute_score=None, reward_router_address=None, reward_model_tokenizer=None):
        if _select(config, "reward.custom_reward_function.path"):
            raise ValueError(
                "reward manager 'rlec' scores with rlec.grading and R_p^(b); unset "
                "reward.custom_reward_function.path or choose another reward_manager.name"
            )
        super().__init__(config, tokenizer, self._score, reward_router_address, reward_model_tokenizer)
        self.schedule = schedule_from_config(config)
        timeout_s = _select(config, "rlec.grading.timeout_s")
        self.timeout_s = DEFAULT_TIMEOUT_S if timeout_s is None else float(timeout_s)
        edges = _select(config, "rlec.metrics.target_bucket_edges")
        self.bucket_edges = DEFAULT_BUCKET_EDGES if edges is None else tuple(float(e) for e in edges)
        logger.info("rlec reward manager: b schedule %s, grading timeout %.1fs", self.schedule, self.timeout_s)

    async def run_single(self, data: DataProto) -> dict:
        """Score one sample (the last of ``data``, as verl's naive manager does)."""
        token = _GLOBAL_STEP.set(global_step_of(data))
        try:
            return await super().run_single(data)
        finally:
            _GLOBAL_STEP.reset(token)

    async def _score(self, data_source, solution_str, ground_truth, extra_info=None, **_: Any) -> dict:
        return await score_one_async(
            solution_str,
            ground_truth,
            data_source,
            extra_info,
            _GLOBAL_STEP.get(),
            self.schedule,
            timeout_s=self.timeout_s,
            edges=self.bucket_edges,
        )


class RLECMetricsMixin:
    """Adds ``rlec/...`` (training) and ``val-rlec/...`` (validation) metrics to a verl V1 trainer.

    ``base_trainer_mode`` is the verl mode the trainer behaves as: verl branches on
    ``trainer.v1.trainer_mode == "sync"`` and reads ``trainer.v1.<mode>`` settings, so the
    constructor writes the base name back into the config once the class is chosen.
    """

    base_trainer_mode: str = "sync"

    def __init__(self, config, *args, **kwargs):
        with open_dict(config):
            config.trainer.v1.trainer_mode = self.base_trainer_mode
        super().__init__(config, *args, **kwargs)

    def _rlec_reward_records(self, batch) -> list[dict]:
        """The ``reward_extra_info`` of the batch's non-padding samples, read from TransferQueue."""
        import transfer_queue as tq

        data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=["extra_fields"])
        extra_fields = data.pop("extra_fields").tolist()
        return [
            fields.get("reward_extra_info") or {}
            for fields, tag in zip(extra_fields, batch.tags, strict=True)
            if isinstance(fields, dict) and not tag.get("is_padding", False)
        ]

    def _compute_metrics(self, batch, metrics, timing_raw, global_steps, epoch):
        super()._compute_metrics(batch, metrics, timing_raw, global_steps, epoch)
        metrics.update(reward_metrics(self._rlec_reward_records(batch), prefix="rlec"))

    def _val_metrics_update(self, data_sources, sample_uids, reward_extra_infos_dict, sample_turns, **kwargs):
        metric_dict = super()._val_metrics_update(
            data_sources, sample_uids, reward_extra_infos_dict, sample_turns, **kwargs
        )
        metric_dict.update(reward_metrics(rows_from_columns(reward_extra_infos_dict), prefix="val-rlec"))
        return metric_dict


@register_trainer("rlec_sync")
class RLECSyncTrainer(RLECMetricsMixin, PPOTrainerSync):
    """verl's ``sync`` trainer with rlec metrics."""

    base_trainer_mode = "sync"


@register_trainer("rlec_colocate_async")
class RLECColocateAsyncTrainer(RLECMetricsMixin, PPOTrainerColocateAsync):
    """verl's ``colocate_async`` trainer with rlec metrics."""

    base_trainer_mode = "colocate_async"


@register_trainer("rlec_separate_async")
class RLECSeparateAsyncTrainer(RLECMetricsMixin, PPOTrainerSeparateAsync):
    """verl's ``separate_async`` trainer with rlec metrics."""

    base_trainer_mode = "separate_async"
