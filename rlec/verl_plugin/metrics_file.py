"""``metrics.jsonl`` on verl's trainer: rlec's durable metrics file as one more backend of verl's ``Tracking``.

verl's ``fit`` builds ``self.logger = Tracking(...)`` (the ``trainer.logger`` backends) and then calls
``on_train_begin``; every step it calls ``self.logger.log(data=metrics, step=global_steps)``, and
``Tracking`` keeps its backends in ``self.logger.logger`` (name -> object with ``log(data, step)``).
:class:`MetricsFileMixin` adds :class:`rlec.metrics_log.MetricsFile` there as backend :data:`BACKEND`, so
``<trainer.default_local_dir>/metrics.jsonl`` holds one JSON object per step, ``{"step": N, <verl's
metric names>...}`` (``timing_s/*``, ``actor/*``, ``critic/*``, ``rlec/*``, the algorithms' and, on test
steps, the validation metrics), each line fsynced. On a resume from step k (``global_steps`` is k + 1
when ``on_train_begin`` runs) the lines of steps > k are dropped first, so the file never holds a step twice.
"""

from __future__ import annotations

import logging

from rlec.metrics_log import METRICS_FILE, MetricsFile

logger = logging.getLogger(__name__)

BACKEND = "rlec_metrics"

__all__ = ["BACKEND", "METRICS_FILE", "MetricsFileMixin"]


class MetricsFileMixin:
    """Adds :data:`BACKEND` (``metrics.jsonl`` in ``trainer.default_local_dir``) to verl's ``Tracking`` at train begin."""

    def on_train_begin(self):
        resumed = int(getattr(self, "global_steps", 1) or 1) - 1  # fit has already moved to the first step to train
        writer = MetricsFile(str(self.config.trainer.default_local_dir), resume_step=resumed)
        for note in writer.notes:
            logger.warning(note)
        tracking = getattr(self, "logger", None)
        if tracking is None or not isinstance(getattr(tracking, "logger", None), dict):
            raise RuntimeError("verl's trainer has no Tracking with a backend dict at on_train_begin (self.logger.logger): "
                               "rlec's metrics.jsonl cannot be attached (verl changed fit)")
        tracking.logger[BACKEND] = writer
        return super().on_train_begin()
