"""rlec's verl V1 trainers: verl's trainers of the same mode plus rlec's metrics and algorithms.

Registered as ``trainer.v1.trainer_mode`` = ``rlec_sync``, ``rlec_colocate_async``,
``rlec_separate_async``: one class per mode, each with every mixin below; a mixin whose config
section does not enable it calls straight through to verl.

- :class:`RLECMetricsMixin`: verl 0.9.1 logs ``reward_extra_info`` only in validation
  (``val-core/<data_source>/<key>/mean@N``); its training steps log just ``critic/score/*``, so
  it adds ``rlec/...`` (training) and ``val-rlec/...`` (validation) metrics from
  :mod:`rlec.reward.metrics`;
- :class:`rlec.verl_plugin.e3.E3TrainerMixin`: E3 (``rlec.e3.enable``; ``sync`` mode only);
- :class:`rlec.verl_plugin.estimators.PasskSwitchMixin`: Pass@k Training's entropy switch and
  ``passk/active_k`` (``algorithm.adv_estimator=rlec_passk``);
- :class:`rlec.verl_plugin.state.CheckpointIntegrityMixin`: a manifest in every checkpoint, checked
  before resuming (a damaged checkpoint is skipped for the newest intact one, never trained on);
- :class:`rlec.verl_plugin.rlve_trainer.RLVEMixin`: updates the RLVE difficulty controllers after
  each step (``data.rlve.enable``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from omegaconf import open_dict
from verl.trainer.ppo.v1 import PPOTrainerColocateAsync, PPOTrainerSeparateAsync, PPOTrainerSync, register_trainer

from rlec.reward.metrics import reward_metrics, rows_from_columns
from rlec.verl_plugin.e3 import E3TrainerMixin
from rlec.verl_plugin.estimators import PasskSwitchMixin
from rlec.verl_plugin.rlve_trainer import RLVEMixin
from rlec.verl_plugin.state import CheckpointIntegrityMixin

logger = logging.getLogger(__name__)

__all__ = ["RLECColocateAsyncTrainer", "RLECMetricsMixin", "RLECSeparateAsyncTrainer", "RLECSyncTrainer"]


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
        """The ``reward_extra_info`` of the batch's non-padding samples, read from TransferQueue.

        The column comes back as a tensordict ``NonTensorStack`` / ``LinkedList`` of per-sample
        mappings (or ``NonTensorData`` wrappers of them), depending on how the rows were put.
        """
        import transfer_queue as tq

        data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=["extra_fields"])
        column = data.pop("extra_fields")
        extra_fields = column.tolist() if hasattr(column, "tolist") else list(column)
        records = []
        for fields, tag in zip(extra_fields, batch.tags, strict=True):
            fields = getattr(fields, "data", fields)
            if isinstance(fields, Mapping) and not tag.get("is_padding", False):
                info = fields.get("reward_extra_info") or {}
                records.append(dict(getattr(info, "data", info)))
        return records

    def _compute_metrics(self, batch, metrics, timing_raw, global_steps, epoch):
        super()._compute_metrics(batch, metrics, timing_raw, global_steps, epoch)
        records = self._rlec_reward_records(batch)
        if not records:
            logger.warning("rlec training metrics: no reward_extra_info found for %d samples", len(batch.keys))
        metrics.update(reward_metrics(records, prefix="rlec"))

    def _val_metrics_update(self, data_sources, sample_uids, reward_extra_infos_dict, sample_turns, **kwargs):
        metric_dict = super()._val_metrics_update(
            data_sources, sample_uids, reward_extra_infos_dict, sample_turns, **kwargs
        )
        metric_dict.update(reward_metrics(rows_from_columns(reward_extra_infos_dict), prefix="val-rlec"))
        return metric_dict


@register_trainer("rlec_sync")
class RLECSyncTrainer(CheckpointIntegrityMixin, RLECMetricsMixin, RLVEMixin, E3TrainerMixin, PasskSwitchMixin, PPOTrainerSync):
    """verl's ``sync`` trainer with rlec metrics, RLVE, E3 and the Pass@k switch."""

    base_trainer_mode = "sync"


@register_trainer("rlec_colocate_async")
class RLECColocateAsyncTrainer(CheckpointIntegrityMixin, RLECMetricsMixin, RLVEMixin, E3TrainerMixin, PasskSwitchMixin, PPOTrainerColocateAsync):
    """verl's ``colocate_async`` trainer with rlec metrics, RLVE and the Pass@k switch (E3 refuses this mode)."""

    base_trainer_mode = "colocate_async"


@register_trainer("rlec_separate_async")
class RLECSeparateAsyncTrainer(CheckpointIntegrityMixin, RLECMetricsMixin, RLVEMixin, E3TrainerMixin, PasskSwitchMixin, PPOTrainerSeparateAsync):
    """verl's ``separate_async`` trainer with rlec metrics, RLVE and the Pass@k switch (E3 refuses this mode)."""

    base_trainer_mode = "separate_async"
