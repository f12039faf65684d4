"""``RLVEMixin``: after every training step, feed each sample's (environment, difficulty, outcome)
to the RLVE difficulty controllers and log ``rlve/<env>/{difficulty,accuracy_at_h,share}``.

A no-op unless the training dataset is :class:`rlec.verl_plugin.rlve_dataset.RLVEDataset` with
``data.rlve.enable`` (then ``train_dataset.rlve_source`` exists). Where it hooks into verl 0.9.1's
V1 trainer (``verl/trainer/ppo/v1/trainer_base.py``, ``fit``): ``step()`` returns the step's
``KVBatchMeta`` while its samples are still in TransferQueue; ``fit`` then saves the checkpoint
(``data.pt`` holds the dataset's ``state_dict``), so updating the controllers at the end of
``step()`` puts this step's outcomes into the checkpoint of the same step and a resumed run
continues with the same h and counters as an uninterrupted one.

Per sample it reads, from TransferQueue, ``extra_info`` (the prompt row's, which the agent loop
stores with every response: ``environment``, ``difficulty``) and ``extra_fields.reward_extra_info``
(rlec's reward record: ``correct``, the graded outcome; an abstention is not correct).
Exact in verl's ``sync`` mode; the async modes fetch prompts ahead of the update, so some samples
are generated at an older h (they are simply not counted, as the rule only counts samples at h).
"""

from __future__ import annotations

from typing import Any

from rlec.config import select

__all__ = ["RLVEMixin", "rlve_enabled"]


def rlve_enabled(config: Any) -> bool:
    """``data.rlve.enable`` of a trainer config (False when absent)."""
    return bool(select(config, "data.rlve.enable", False))


class RLVEMixin:
    """Updates the RLVE controllers after each training step (see the module docstring)."""

    @property
    def rlve_source(self):
        """The training dataset's :class:`rlec.environments.EnvironmentSource`, or None."""
        return getattr(getattr(self, "train_dataset", None), "rlve_source", None)

    def on_init_end(self):
        if rlve_enabled(self.config) and self.rlve_source is None:  # before verl syncs the rollout weights
            raise ValueError("data.rlve.enable is true but the training dataset has no environment source: set "
                             "data.custom_cls.path=pkg://rlec.verl_plugin.rlve_dataset and data.custom_cls.name=RLVEDataset "
                             "(megatron_configs/algorithm/rlve.yaml does)")
        super().on_init_end()

    def step(self, metrics: dict, timing_raw: dict):
        batch = super().step(metrics, timing_raw)
        source = self.rlve_source
        if source is not None:
            metrics.update(source.update(self._rlve_samples(batch)))
        return batch

    def _rlve_samples(self, batch) -> list[dict[str, Any]]:
        """``{"environment", "difficulty", "correct"}`` of every non-padding sample of the step."""
        import transfer_queue as tq

        data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id,
                               select_fields=["extra_info", "extra_fields"])
        infos, fields = data.pop("extra_info").tolist(), data.pop("extra_fields").tolist()
        samples = []
        for info, extra, tag in zip(infos, fields, batch.tags, strict=True):
            if tag.get("is_padding", False):
                continue
            info = info if isinstance(info, dict) else {}
            reward = (extra.get("reward_extra_info") if isinstance(extra, dict) else None) or {}
            samples.append({"environment": info.get("environment"), "difficulty": info.get("difficulty"),
                            "correct": float(reward.get("correct", 0.0))})
        return samples
