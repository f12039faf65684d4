"""rlec's verl V1 trainers: verl's trainers of the same mode plus rlec's metrics and algorithms.

Registered as ``trainer.v1.trainer_mode`` = ``rlec_sync``, ``rlec_colocate_async``,
``rlec_separate_async``: one class per mode, each with every mixin below.

- :class:`rlec.verl_plugin.state.CheckpointIntegrityMixin`: a manifest in every checkpoint, checked
  before resuming (a damaged checkpoint is skipped for the newest intact one, never trained on);
  outermost, so the manifest covers the algorithms' state file;
- :class:`AlgorithmsMixin`: drives every enabled algorithm of :mod:`rlec.algorithms.registry`
  through the one interface of :mod:`rlec.algorithms.base`, with the
  step's record read once from TransferQueue; a no-op when none is enabled;
- :class:`rlec.verl_plugin.mismatch.MismatchAlarmMixin`: the train-inference mismatch alarm
  (``rlec.check.mismatch_kl_alarm``), checked before every actor update;
- :class:`rlec.verl_plugin.update_guard.FiniteUpdateMixin`: a NaN / infinite loss or gradient norm stops the
  run right after the update, before the step is checkpointed;
- :class:`RLECMetricsMixin`: verl 0.9.1 logs ``reward_extra_info`` only in validation
  (``val-core/<data_source>/<key>/mean@N``); its training steps log just ``critic/score/*``, so
  it adds ``rlec/...`` (training) and ``val-rlec/...`` (validation) metrics from
  :mod:`rlec.reward.metrics`;
- :class:`rlec.verl_plugin.probe.ProbeMixin`: the fixed probe set's entropy (``rlec/probe/*``) every
  ``rlec.probe.every`` steps when ``rlec.probe.file`` is set;
- :class:`rlec.verl_plugin.replay.ReproducibleBatchMixin`: prompt ids from the step and batches in key
  order, so a run and its resume feed the update the same samples in the same order.

Where :class:`AlgorithmsMixin` hooks into verl 0.9.1's V1 trainer (``verl/trainer/ppo/v1/trainer_base.py``;
each hook point pinned by tests/verl_plugin/test_drift_algorithms.py):

- ``__init__``: the resume rules (:func:`rlec.rules.resume.apply_resume_rules`: a refused setting
  raises, a resumed longer run keeps its b schedule), then the config read once into the trainer's
  :class:`rlec.run_config.RunConfig` (``rlec_run``, which every mixin reads),
  then the early rule set and every enabled
  algorithm's ``check`` on the config as given (they judge rlec's trainer mode,
  :func:`rlec.config_writes.rlec_trainer_mode`, also after :class:`RLECMetricsMixin` wrote verl's base mode):
  the first error is raised;
- first use, after the datasets exist: ``_load_checkpoint`` (which verl's set-up calls before
  ``on_init_end``) or, at the latest, ``on_init_end`` (before verl syncs the rollout weights) builds the
  algorithms (:func:`rlec.algorithms.registry.build`) with the model's vocabulary size and the training
  dataset;
- ``_next_train_batch``: :meth:`~rlec.algorithms.base.Algorithm.plan_rollout` on the prompts'
  ``extra_info``; the plan goes into the batch as ``__rollout_n__`` (verl's per-prompt n; sum =
  rollout.n x prompts, so verl's mini-batch sizes hold), the per-prompt fields (non-tensor stacks:
  they reach the agent loop as keyword arguments, the reward manager in ``non_tensor_batch`` and
  TransferQueue with every response) and the batch fields;
- ``step``: :meth:`~rlec.algorithms.base.Algorithm.step_overrides` written into ``self.config``
  (:mod:`rlec.config_writes`: the actor's log-probs read ``rollout.temperature`` there, the estimator reads
  ``config.algorithm``), verl's step, then the step's :class:`~rlec.algorithms.base.StepRecord`
  (read once; :class:`RLECMetricsMixin` reuses it) to every
  :meth:`~rlec.algorithms.base.Algorithm.observe`, then the next step's overrides. ``fit`` saves the
  checkpoint after ``step``, so the state of step t is in the checkpoint of step t;
- ``_save_checkpoint`` / ``_load_checkpoint``: every algorithm's state in one file,
  ``rlec_algorithms.json`` (``{name: state}``), written before verl marks the checkpoint as the latest.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from tensordict import TensorDict  # what verl's step and batch fetch return (verl's trainer imports both)
from transfer_queue import KVBatchMeta
from verl.trainer.ppo.v1 import PPOTrainerColocateAsync, PPOTrainerSeparateAsync, PPOTrainerSync, register_trainer
from verl.utils import tensordict_utils as tu

from rlec.algorithms import registry
from rlec.algorithms.base import TEMPERATURE_FIELD, Algorithm, AlgorithmContext, RolloutPlan, StepRecord
from rlec.config_writes import set_base_trainer_mode, write_rollout_temperature, write_step_overrides
from rlec.reward.metrics import reward_metrics, rows_from_columns
from rlec.run_config import RunConfig
from rlec.verl_plugin.metrics_file import MetricsFileMixin
from rlec.verl_plugin.mismatch import MismatchAlarmMixin
from rlec.verl_plugin.probe import ProbeMixin
from rlec.verl_plugin.update_guard import FiniteUpdateMixin
from rlec.verl_plugin.replay import ReproducibleBatchMixin
from rlec.verl_plugin.state import CheckpointIntegrityMixin, load_state, resumed_folder, save_state, saving_folder

logger = logging.getLogger(__name__)

ROLLOUT_N_KEY = "__rollout_n__"  # verl's per-prompt n (AgentLoopWorkerTQ._run_prompt)
STATE_FILE = "rlec_algorithms.json"

__all__ = ["AlgorithmsMixin", "RLECColocateAsyncTrainer", "RLECMetricsMixin", "RLECSeparateAsyncTrainer", "RLECSyncTrainer",
           "STATE_FILE", "read_step_record"]


def _as_list(values: Any) -> list:
    """A TransferQueue / tensordict non-tensor column (NonTensorStack, LinkedList, numpy) as a list of plain values."""
    items = values.tolist() if hasattr(values, "tolist") else list(values)
    return [getattr(item, "data", item) for item in items]


def read_step_record(batch: Any, fields: tuple[str, ...] = (), metrics: Mapping[str, float] | None = None) -> StepRecord:
    """The step's non-padding responses from TransferQueue, in one read.

    Args:
        batch: verl's ``KVBatchMeta`` of the step (``keys``, ``tags``, ``partition_id``).
        fields: prompt fields to read besides ``extra_fields`` (``extra_info`` fills
            :attr:`StepRecord.extra_info`, the others :attr:`StepRecord.fields`).
        metrics: the step's metrics.

    Returns:
        A :class:`StepRecord`. Columns come back as tensordict ``NonTensorStack`` / ``LinkedList``
        of per-sample values, or ``NonTensorData`` wrappers of them, depending on how the rows were
        put: each is unwrapped; a missing or non-mapping value reads as ``{}``.
    """
    import transfer_queue as tq

    data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=[*fields, "extra_fields"])
    columns = {name: _as_list(data.pop(name)) for name in (*fields, "extra_fields")}
    keep = [i for i, tag in enumerate(batch.tags) if not tag.get("is_padding", False)]
    if any(len(column) != len(batch.tags) for column in columns.values()):
        raise ValueError(f"TransferQueue returned {[len(c) for c in columns.values()]} rows for {len(batch.tags)} keys")

    def mapping(value: Any) -> dict:
        value = getattr(value, "data", value)
        return dict(value) if isinstance(value, Mapping) else {}

    reward = [mapping(mapping(columns["extra_fields"][i]).get("reward_extra_info")) for i in keep]
    extra = [mapping(columns["extra_info"][i]) for i in keep] if "extra_info" in columns else [{} for _ in keep]
    planned = [name for name in fields if name != "extra_info"]
    per_response = [{name: columns[name][i] for name in planned} for i in keep]
    return StepRecord(per_response, extra, reward, dict(metrics or {}))


class RLECMetricsMixin:
    """Adds ``rlec/...`` (training) and ``val-rlec/...`` (validation) metrics to a verl V1 trainer.

    ``base_trainer_mode`` is the verl mode the trainer behaves as: verl branches on
    ``trainer.v1.trainer_mode == "sync"`` and reads ``trainer.v1.<mode>`` settings, so the
    constructor writes the base name back into the config once the class is chosen
    (:func:`rlec.config_writes.set_base_trainer_mode`; rlec's rules still read rlec's mode through
    :func:`rlec.config_writes.rlec_trainer_mode`).
    """

    base_trainer_mode: str = "sync"
    _rlec_record: tuple[tuple, StepRecord] | None = None

    def __init__(self, config, *args, **kwargs):
        set_base_trainer_mode(config, self.base_trainer_mode)
        super().__init__(config, *args, **kwargs)

    def _rlec_step_record(self, batch, fields: tuple[str, ...] = (), metrics: Mapping[str, float] | None = None) -> StepRecord:
        """The step's record (:func:`read_step_record`), read once per step: a second call for the same batch reuses it."""
        cached = self._rlec_record
        if cached is not None and cached[0] == tuple(batch.keys):
            return cached[1]
        record = read_step_record(batch, fields, metrics)
        self._rlec_record = (tuple(batch.keys), record)
        return record

    def _rlec_reward_records(self, batch) -> list[dict]:
        """The ``reward_extra_info`` of the batch's non-padding samples (:meth:`_rlec_step_record`)."""
        return self._rlec_step_record(batch).reward_info

    def _compute_metrics(self, batch, metrics, timing_raw, global_steps, epoch):
        super()._compute_metrics(batch, metrics, timing_raw, global_steps, epoch)
        records = self._rlec_reward_records(batch)
        self._rlec_record = None  # the step is over (verl clears its samples next)
        if not records:
            logger.warning("rlec training metrics: no reward_extra_info found for %d samples", len(batch.keys))
        metrics.update(reward_metrics(records, prefix="rlec"))

    def _val_metrics_update(self, data_sources, sample_uids, reward_extra_infos_dict, sample_turns, **kwargs):
        metric_dict = super()._val_metrics_update(
            data_sources, sample_uids, reward_extra_infos_dict, sample_turns, **kwargs
        )
        metric_dict.update(reward_metrics(rows_from_columns(reward_extra_infos_dict), prefix="val-rlec"))
        return metric_dict


class AlgorithmsMixin:
    """Drives every enabled algorithm in verl's trainer (module docstring); a no-op when none is enabled.

    Attributes:
        rlec_algorithms: the built algorithms in registry order (None until first needed).
        rlec_run: the config read once (:class:`rlec.run_config.RunConfig`), after the resume rules and before
            :class:`RLECMetricsMixin` writes verl's base mode: its ``keys.verl_trainer_mode`` is rlec's mode
            (``rlec_sync``); ``trainer_mode`` and ``parameter_sync_step`` read alike before and after that write.

    Raises (at construction):
        ValueError: a resume that changes what the run optimises (:func:`rlec.rules.resume.apply_resume_rules`);
            the first error of the early rule set (:func:`rlec.rules.settings_rules.settings_rules`:
            rlec's settings schema and verl's estimator / loss / seed / unknown-key rules), then of an
            enabled algorithm's check, so a ``main_ppo`` launched without the launcher is refused by the same
            rules as DRY_RUN and the launcher.
    """

    rlec_algorithms: list[Algorithm] | None = None
    rlec_run: RunConfig

    def __init__(self, config, *args, **kwargs):
        from rlec.rules.resume import apply_resume_rules
        from rlec.rules.settings_rules import early_errors  # the rules DRY_RUN and the launcher apply first

        apply_resume_rules(config)  # a resume keeps the run's settings and b schedule (before any worker reads them)
        self.rlec_run = RunConfig(config)  # read once, after the resume rules' writes; every mixin reads this one
        errors = early_errors(self.rlec_run)  # rlec's trainer mode: rlec.config_writes.rlec_trainer_mode, also on a config
        if errors:  # handed to an rlec trainer before (which holds verl's base mode since)
            raise ValueError(str(errors[0]))
        self.rlec_algorithms = None
        super().__init__(config, *args, **kwargs)

    def _algorithms(self) -> list[Algorithm]:
        """The enabled algorithms, built on first use (:func:`rlec.algorithms.registry.build`)."""
        if self.rlec_algorithms is None:
            run = self.rlec_run
            self.rlec_algorithms = registry.build(run, self._algorithm_context(run)) if registry.enabled(run) else []
            if self.rlec_algorithms:
                logger.info("rlec algorithms: %s", [a.name for a in self.rlec_algorithms])
            self._apply_overrides(int(getattr(self, "global_steps", 0) or 0) + 1)
        return self.rlec_algorithms

    def _algorithm_context(self, run: RunConfig) -> AlgorithmContext:
        """The model's vocabulary size (its ``config.json``; None when unreadable) and the training dataset."""
        from rlec.models import read_model_config

        vocab, path = None, run.keys.model_path
        if path:
            try:
                vocab = read_model_config(path, label="actor_rollout_ref.model.path").get("vocab_size")
            except (OSError, ValueError) as exc:
                logger.info("vocabulary size not read from the model folder: %s", exc)
        return AlgorithmContext(vocab_size=int(vocab) if vocab else None, train_dataset=getattr(self, "train_dataset", None))

    def _apply_overrides(self, step: int) -> None:
        """Write every algorithm's :meth:`~rlec.algorithms.base.Algorithm.step_overrides` into ``self.config``
        (:func:`rlec.config_writes.write_step_overrides`: verl's estimator and actor read them there)."""
        for algorithm in self.rlec_algorithms or []:
            overrides = algorithm.step_overrides(step)
            if overrides:
                write_step_overrides(self.config, overrides)

    def on_init_end(self) -> None:
        """verl's hook at the end of the trainer's construction: builds rlec's algorithms (``rlec_algorithms``) before
        verl's own hook syncs the rollout weights, so a missing environment source fails before any weights move.

        Raises:
            ValueError: an algorithm's check fails (:meth:`rlec.algorithms.base.Algorithm.from_config`).
        """
        self._algorithms()  # before verl syncs the rollout weights: a missing environment source fails here
        super().on_init_end()

    def _next_train_batch(self, num_prompts: int | None = None) -> TensorDict:
        """verl's fetch of the next prompts. With algorithms, each plans the rollout (:class:`RolloutPlan`:
        temperature, samples per prompt, extra fields) and the plan is written into the batch, its temperature also
        into ``self.config`` (the log-probs read it there); without, verl's batch unchanged."""
        batch = super()._next_train_batch(num_prompts)
        algorithms = self._algorithms()
        if not algorithms:
            return batch
        infos = list(batch["extra_info"]) if "extra_info" in batch.keys() else [None] * len(batch)
        infos = [getattr(info, "data", info) for info in infos]
        rollout = self.config.actor_rollout_ref.rollout
        plan = RolloutPlan(float(rollout.temperature), [int(rollout.n)] * len(infos))
        for algorithm in algorithms:
            algorithm.plan_rollout(int(getattr(self, "global_steps", 0) or 0), infos, plan)
        # the plan's temperature, its one carrier: the log-probs read the trainer's config, the agent loop the batch
        write_rollout_temperature(self.config, plan.temperature)
        tu.assign_non_tensor_data(batch, TEMPERATURE_FIELD, plan.temperature)
        tu.assign_non_tensor_stack(batch, ROLLOUT_N_KEY, plan.n_per_prompt)
        for name, values in plan.prompt_fields.items():
            tu.assign_non_tensor_stack(batch, name, values)
        for name, value in plan.batch_fields.items():
            tu.assign_non_tensor_data(batch, name, value)
        return batch

    def step(self, metrics: dict, timing_raw: dict) -> KVBatchMeta:
        """verl's training step, once per global step from ``fit``. With algorithms: writes their step overrides into
        ``self.config`` before verl's step, gives each the step's record (:meth:`~rlec.algorithms.base.Algorithm.observe`),
        adds the metrics they return to ``metrics`` and writes the next step's overrides. Returns verl's batch as is."""
        algorithms = self._algorithms()
        if not algorithms:
            return super().step(metrics, timing_raw)
        step = int(getattr(self, "global_steps", 0) or 0)  # verl sets it in fit() (from 1)
        self._apply_overrides(step)
        batch = super().step(metrics, timing_raw)
        wanted = [a.record_fields for a in algorithms if a.record_fields is not None]
        record = StepRecord([], [], [], dict(metrics))
        if wanted:
            fields = tuple(dict.fromkeys(name for names in wanted for name in names))
            read = self._rlec_step_record(batch, fields, metrics)
            record = StepRecord(read.fields, read.extra_info, read.reward_info, dict(metrics))
        for algorithm in algorithms:
            metrics.update(algorithm.observe(step, int(getattr(self, "total_training_steps", 0) or 0), record))
        self._apply_overrides(step + 1)
        return batch

    def _save_checkpoint(self):
        if self._algorithms():  # before verl marks the checkpoint as the latest
            save_state(saving_folder(self.config, self.global_steps), STATE_FILE,
                       {a.name: a.state_dict() for a in self.rlec_algorithms})
        return super()._save_checkpoint()

    def _load_checkpoint(self):
        out = super()._load_checkpoint()
        if self._algorithms():
            folder = resumed_folder(self.config, self.global_steps)
            state = load_state(folder, STATE_FILE) or {}
            for algorithm in self.rlec_algorithms:
                if folder is not None and algorithm.name not in state and algorithm.state_dict():
                    logger.warning("resuming from %s without %s's state (%s missing): it starts afresh",
                                   folder, algorithm.name, STATE_FILE)
                algorithm.load_state_dict(state.get(algorithm.name, {}))
            self._apply_overrides(self.global_steps + 1)
            if state:
                logger.info("rlec algorithm state restored for %s", sorted(state))
        return out


@register_trainer("rlec_sync")
class RLECSyncTrainer(MetricsFileMixin, ProbeMixin, CheckpointIntegrityMixin, MismatchAlarmMixin, FiniteUpdateMixin, AlgorithmsMixin, RLECMetricsMixin, ReproducibleBatchMixin,
                     PPOTrainerSync):
    """verl's ``sync`` trainer with rlec's algorithms and metrics."""

    base_trainer_mode = "sync"


@register_trainer("rlec_colocate_async")
class RLECColocateAsyncTrainer(MetricsFileMixin, ProbeMixin, CheckpointIntegrityMixin, MismatchAlarmMixin, FiniteUpdateMixin, AlgorithmsMixin, RLECMetricsMixin, ReproducibleBatchMixin,
                     PPOTrainerColocateAsync):
    """verl's ``colocate_async`` trainer with rlec's algorithms and metrics (an algorithm's check may refuse this mode)."""

    base_trainer_mode = "colocate_async"


@register_trainer("rlec_separate_async")
class RLECSeparateAsyncTrainer(MetricsFileMixin, ProbeMixin, CheckpointIntegrityMixin, MismatchAlarmMixin, FiniteUpdateMixin, AlgorithmsMixin, RLECMetricsMixin, ReproducibleBatchMixin,
                     PPOTrainerSeparateAsync):
    """verl's ``separate_async`` trainer with rlec's algorithms and metrics (an algorithm's check may refuse this mode)."""

    base_trainer_mode = "separate_async"
