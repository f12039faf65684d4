"""The train-inference mismatch alarm of rlec's verl trainers (``rlec.check.mismatch_kl_alarm`` / ``mismatch_kl_stop``).

verl 0.9.1's trainer computes the mismatch between the rollout's log-probs and the trainer's old log-probs
before the update (``verl/trainer/ppo/rollout_corr_helper.py``, with ``rollout.calculate_log_probs``):
``rollout_corr/kl`` (mean of log pi_rollout - log pi_old), ``rollout_corr/k3_kl`` (the non-negative k3
estimate), ``rollout_corr/chi2_token``, ``training/rollout_probs_diff_max`` and more, logged with every
step's metrics (console and tensorboard). :class:`MismatchAlarmMixin` reads ``rollout_corr/k3_kl`` just
before the actor update: above ``rlec.check.mismatch_kl_alarm`` (default 0.004, NeMo-RL's nightly alarm
level for the train-vs-generation KL) it logs a warning naming the step and the value and counts it in
``rlec/mismatch_alarm`` (1 that step, else 0); with ``rlec.check.mismatch_kl_stop=true`` it raises before
the update, so the weights of the alarmed step are never changed. Every step also logs one line of the
mismatch metrics (:data:`SUMMARY_KEYS`) on the console. A rollout backend may add its own metrics first
(:data:`STEP_METRICS`): with an induced mismatch on CPU (``rlec.cpu.rollout_weight_noise`` > 0) the CPU wing adds
``rlec/router_disagreement``, the share of the step's response token-layer expert sets the rollout's routers chose
differently from the exact weights' routers (:func:`rlec.cpu.induced_mismatch.step_router_disagreement`).
"""

from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING, Any, Callable, Mapping

from rlec.run_stop import RunStopError

if TYPE_CHECKING:
    from rlec.run_config import RunConfig

__all__ = ["ALARM_KEY", "MismatchAlarmMixin", "MismatchError", "STEP_METRICS", "SUMMARY_KEYS", "check_mismatch"]

logger = logging.getLogger(__name__)

ALARM_KEY = "rollout_corr/k3_kl"
SUMMARY_KEYS = ("rollout_corr/kl", "rollout_corr/k3_kl", "rollout_corr/chi2_token", "training/rollout_probs_diff_max",
                "training/rollout_probs_diff_mean", "rlec/router_disagreement")


STEP_METRICS: list[Callable[[Any, Any], Mapping[str, float]]] = []
"""Metrics a rollout backend adds to each step before the alarm reads them: ``fn(batch, settings)`` with the step's
TransferQueue batch and the run's :class:`rlec.settings.RlecSettings`, returning ``{key: value}`` (empty when it has
nothing to add). Registered by the backend's own package when a process loads it (the CPU wing, :mod:`rlec.cpu`:
the induced mismatch's router disagreement); empty on a GPU launch."""


class MismatchError(RunStopError):
    """A step's train-inference KL is above ``rlec.check.mismatch_kl_alarm`` with ``mismatch_kl_stop=true``."""


def check_mismatch(step: int, metrics: Mapping[str, Any], alarm: float, stop: bool) -> dict[str, float]:
    """The alarm of one step: warn (or raise) when ``metrics[ALARM_KEY] > alarm``.

    Args:
        step: the training step (named in the warning).
        metrics: the step's metrics so far (verl's, before the update).
        alarm: the KL level (``rlec.check.mismatch_kl_alarm``).
        stop: raise instead of only warning (``rlec.check.mismatch_kl_stop``).

    Returns:
        ``{"rlec/mismatch_alarm": 0.0 or 1.0}``; empty when the step has no mismatch metric
        (``rollout.calculate_log_probs=false``, or ``rollout_correction.bypass_mode=true``, where verl
        computes none: DRY_RUN warns then). A non-finite KL alarms.

    Raises:
        MismatchError: above the level with ``stop``.
    """
    if ALARM_KEY not in metrics:
        return {}
    value = float(metrics[ALARM_KEY])
    present = {k: float(metrics[k]) for k in SUMMARY_KEYS if k in metrics}
    # printed, as verl's console logger prints each step's metrics (a logger's INFO is not shown in Ray workers)
    print(f"rlec step {step} train-inference mismatch: " + ", ".join(f"{k}={v:.3g}" for k, v in present.items()), flush=True)
    if math.isfinite(value) and value <= alarm:  # a NaN / inf KL is an alarm, not a pass
        return {"rlec/mismatch_alarm": 0.0}
    message = (f"step {step}: train-inference mismatch {ALARM_KEY}={value:.6g} > rlec.check.mismatch_kl_alarm={alarm:g} "
               "(rollout vs. trainer log-probs of the same tokens, before the update)")
    if stop:
        raise MismatchError(f"{message}; stopped before the update (rlec.check.mismatch_kl_stop=true)")
    logger.warning("%s; training continues (rlec.check.mismatch_kl_stop=true stops here)", message)
    return {"rlec/mismatch_alarm": 1.0}


class MismatchAlarmMixin:
    """For a verl V1 trainer: :func:`check_mismatch` on every step's metrics before ``_update_actor``."""

    rlec_run: RunConfig  # the trainer's config, converted once at construction (rlec.verl_plugin.trainers.AlgorithmsMixin)

    def _update_actor(self, batch: Any, metrics: dict) -> Any:
        settings = self.rlec_run.rlec
        for step_metrics in STEP_METRICS:  # a rollout backend's own (the CPU wing's router disagreement)
            metrics.update(step_metrics(batch, settings))
        check = settings.check_
        metrics.update(check_mismatch(int(self.global_steps), metrics, check.mismatch_kl_alarm, check.mismatch_kl_stop))
        return super()._update_actor(batch, metrics)

