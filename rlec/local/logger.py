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
import json
import math
import os
from pathlib import Path
from typing import Any, Mapping

from rlec.flags import flag
from rlec.io import atomic_write_text


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """All complete step records of a ``metrics.jsonl`` file, in order (a torn line is skipped)."""
    records = []
    for line in Path(path).read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            records.append(json.loads(line))
        except ValueError:
            continue
    return records


def verbose() -> bool:
    """``RLEC_VERBOSE`` is on (:mod:`rlec.flags`): keep third-party warnings, logs and prints.

    Raises:
        ValueError: a spelling :mod:`rlec.flags` refuses (names the variable).
    """
    return flag("RLEC_VERBOSE")  # rlec.flags' spellings: RLEC_VERBOSE=false is off


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
        self.dir = Path(log_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.path = self.dir / "metrics.jsonl"
        self.notes: list[str] = []
        if self.path.exists():
            lines = self.path.read_text(encoding="utf-8", errors="replace").splitlines()
            kept = []
            for i, line in enumerate(lines):
                try:
                    step = json.loads(line)["step"]
                except (ValueError, KeyError, TypeError):
                    self.notes.append(f"{self.path}: dropped an unreadable line {i + 1} (a write cut by an interruption)")
                    continue
                if resume_step is not None and step <= resume_step:
                    kept.append(line)
            atomic_write_text(self.path, "".join(line + "\n" for line in kept))
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
        record = {"step": int(step), **{k: _plain(v) for k, v in metrics.items()}}
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(record, sort_keys=True) + "\n")
            f.flush()
            os.fsync(f.fileno())
        if self._tracking is not None:
            numbers = {k: v for k, v in record.items()
                       if k != "step" and isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)}
            self._tracking.log(numbers, step=int(step))

    def close(self) -> None:
        """Flush and close the trackers."""
        if self._tracking is not None:
            self._tracking.finish()


def _plain(value: Any) -> Any:
    if hasattr(value, "item") and getattr(value, "ndim", 0) == 0:
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
