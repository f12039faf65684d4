"""Metrics of the local run: ``metrics.jsonl`` (durable) and verl's ``Tracking`` (TensorBoard).

Each training step is one JSON object per line in ``metrics.jsonl``, flushed and fsynced, so an
interrupted run keeps every finished step; on resume the lines of steps after the checkpoint are
dropped first (they will be recomputed), and a torn last line (a write cut by a kill) is dropped
with a note. TensorBoard goes through verl's own ``Tracking`` with the ``tensorboard`` backend,
the same tags as the cluster. verl's ``file`` backend is not used for the JSON Lines: it opens
its file with ``"wb"`` (a resumed run would erase the steps before the checkpoint) and never
fsyncs.
"""

from __future__ import annotations

import contextlib
import io
import math
import os
from pathlib import Path
from typing import Any, Mapping

from rlec.report import MetricsFile, plain, read_metrics, verbose

__all__ = ["MetricsLogger", "read_metrics", "verbose"]


class MetricsLogger:
    """Append per-step metrics to ``<dir>/metrics.jsonl`` and the configured verl trackers.

    Args:
        log_dir: output folder (created).
        resume_step: when resuming after step k, records of steps > k are dropped first; None
            starts a new file.
        backends: verl ``Tracking`` backends besides the JSON Lines (``tensorboard``; ``console``
            is the run's own progress bar).
        project, experiment: verl's project / experiment names.

    Attributes:
        notes: what was repaired in an existing file (for the run to report).
    """

    def __init__(self, log_dir: str | Path, *, resume_step: int | None = None, backends: tuple[str, ...] = ("tensorboard",),
                 project: str = "rlec", experiment: str = "local_run") -> None:
        self._file = MetricsFile(log_dir, resume_step=0 if resume_step is None else resume_step)
        self.dir, self.path, self.notes = self._file.dir, self._file.path, self._file.notes
        self._tracking = None
        wanted = [b for b in backends if b != "console"]
        if wanted:
            from verl.utils.tracking import Tracking

            os.environ["TENSORBOARD_DIR"] = str(self.dir / "tensorboard")
            # verl's Tracking prints "Saving tensorboard log to ..." on stdout; the folder is in our docs
            with contextlib.nullcontext() if verbose() else contextlib.redirect_stdout(io.StringIO()):
                self._tracking = Tracking(project_name=project, experiment_name=experiment, default_backend=wanted)

    def log(self, step: int, metrics: Mapping[str, Any]) -> None:
        """Record one step's metrics (finite numbers to the trackers; everything to JSON Lines)."""
        self._file.log(metrics, step)
        if self._tracking is not None:
            numbers = {k: v for k, v in ((k, plain(v)) for k, v in metrics.items())
                       if k != "step" and isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)}
            self._tracking.log(numbers, step=int(step))

    def close(self) -> None:
        """Flush and close the trackers."""
        if self._tracking is not None:
            self._tracking.finish()

