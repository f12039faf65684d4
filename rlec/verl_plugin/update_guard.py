"""Stop verl's trainer when an update is not finite, before the step is checkpointed.

Megatron-core's optimizer skips a step on a non-finite gradient only when it has a loss scaler (fp16,
``MixedPrecisionOptimizer.prepare_grads``); with BF16 or FP32 parameters (every rlec layout) a NaN or
infinite gradient goes into clipping (``clip_coeff`` NaN: no clipping) and Adam, so the weights turn
non-finite, and verl's trainer then saves them and moves its "latest" tracker onto them: the next resume
trains on damaged weights (issue 26: a damaged checkpoint trained on gave ``loss=nan`` and a saved NaN
model). :class:`FiniteUpdateMixin` reads ``actor/pg_loss`` and ``actor/grad_norm`` of the step right
after verl's ``_update_actor`` and raises :class:`NonFiniteUpdateError` when either is not finite, so
verl's ``fit`` never reaches ``_save_checkpoint`` for that step: the last checkpoint and
``metrics.jsonl`` up to the previous step are kept, and a rerun resumes from them.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

from rlec.run_stop import RunStopError

__all__ = ["FINITE_KEYS", "FiniteUpdateMixin", "NonFiniteUpdateError", "check_finite_update"]

FINITE_KEYS = ("actor/pg_loss", "actor/grad_norm")


class NonFiniteUpdateError(RunStopError):
    """A step's policy loss or gradient norm is NaN or infinite (the message names each and the step)."""


def check_finite_update(step: int, metrics: Mapping[str, Any]) -> None:
    """Raise when a metric of :data:`FINITE_KEYS` is missing a finite value after the step's update.

    Args:
        step: the global step (from 1).
        metrics: the step's metrics after verl's actor update (``actor/*`` reduced over mini-batches).

    Raises:
        NonFiniteUpdateError: a listed metric is NaN, infinite or absent; the message names each one and
            says the last checkpoint is kept.
    """

    def finite(value: Any) -> bool:
        try:
            return math.isfinite(float(value))
        except (TypeError, ValueError):
            return False

    bad = {key: metrics.get(key) for key in FINITE_KEYS if not finite(metrics.get(key))}
    if bad:
        shown = ", ".join(f"{key}={value}" for key, value in bad.items())
        raise NonFiniteUpdateError(
            f"step {step}: {shown} after the update: stopped before saving it; the last checkpoint and metrics.jsonl up "
            "to the previous step are kept, so a rerun resumes from them (a damaged input or checkpoint, or a learning "
            "rate too high)")


class FiniteUpdateMixin:
    """For a verl V1 trainer: :func:`check_finite_update` on the step's metrics right after ``_update_actor``."""

    def _update_actor(self, batch: Any, metrics: dict) -> Any:
        out = super()._update_actor(batch, metrics)
        check_finite_update(int(self.global_steps), metrics)
        return out
