"""The per-step metrics file of a training run, ``<dir>/metrics.jsonl``: written by verl's trainer, read by the reports.

:class:`MetricsFile`: one JSON object per step (``{"step": N, <metric>: value, ...}``, verl's metric names),
flushed and fsynced per line; on resume the lines of steps after the resumed step are dropped first (they will be
recomputed) and an unreadable (torn) line is dropped with a note. verl's own ``file`` tracker is not used for it: it
opens its file with ``"wb"`` (a resumed run would erase the steps before the checkpoint) and never fsyncs. The file
name and shape are a contract (the console report :mod:`rlec.report` and the experiments read it).

Below both the trainer's plugins (:mod:`rlec.verl_plugin.metrics_file`, :mod:`rlec.verl_plugin.state`) and the
console report, so the trainer never imports the report (an import-linter contract in pyproject.toml).
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any, Mapping

from rlec.io import atomic_write_text

METRICS_FILE = "metrics.jsonl"

__all__ = ["METRICS_FILE", "MetricsFile", "plain", "read_metrics", "read_metrics_from"]


def _records(text: str) -> list[dict[str, Any]]:
    records = []
    for line in text.splitlines():
        try:
            records.append(json.loads(line))
        except ValueError:
            continue
    return records


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """All complete step records of a ``metrics.jsonl`` file, in order (a torn line is skipped)."""
    return _records(Path(path).read_text(encoding="utf-8", errors="replace"))


def read_metrics_from(path: str | Path, offset: int) -> tuple[list[dict[str, Any]], int]:
    """The step records of the complete lines after byte ``offset`` (a line boundary a previous call returned; 0:
    the whole file), and the offset after the last complete line (a line still being written is left for the next
    call). A follower reading a growing file with it parses each line once, where :func:`read_metrics` per poll
    parses the whole file each time.

    Raises:
        OSError: the file cannot be read.
    """
    with open(path, "rb") as handle:
        handle.seek(offset)
        data = handle.read()
    end = data.rfind(b"\n") + 1
    return _records(data[:end].decode("utf-8", errors="replace")), offset + end


def plain(value: Any) -> Any:
    """A JSON value for one metric: numpy / torch scalars as Python numbers, a non-finite float as None."""
    if hasattr(value, "item") and getattr(value, "ndim", 0) == 0:
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


class MetricsFile:
    """``<dir>/metrics.jsonl``, appended one fsynced line per step; also a verl ``Tracking`` backend
    (``.log(data, step)``, ``.finish()``).

    Args:
        log_dir: output folder (created).
        resume_step: resuming after step k: lines of steps > k are dropped first; 0 drops every line
            (a new run in a folder with an old file); None keeps every readable line.

    Attributes:
        path: the file. It exists (possibly empty) once the object is built, so a reader can tell the
            rewritten file from an older one (a new inode).
        notes: what was repaired in the existing file (for the run to report).
    """

    def __init__(self, log_dir: str | Path, *, resume_step: int | None = None) -> None:
        self.dir = Path(log_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.path = self.dir / METRICS_FILE
        self.notes: list[str] = []
        kept = []
        if self.path.exists():
            for i, line in enumerate(self.path.read_text(encoding="utf-8", errors="replace").splitlines()):
                try:
                    step = int(json.loads(line)["step"])
                except (ValueError, KeyError, TypeError):
                    self.notes.append(f"{self.path}: dropped an unreadable line {i + 1} (a write cut by an interruption)")
                    continue
                if resume_step is None or step <= resume_step:
                    kept.append(line)
        atomic_write_text(self.path, "".join(line + "\n" for line in kept))

    def log(self, data: Mapping[str, Any], step: int) -> None:
        """Append one step's record ``{"step": step, **data}`` (sorted keys; non-finite floats as null), fsynced."""
        record = {"step": int(step), **{k: plain(v) for k, v in data.items() if k != "step"}}
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(record, sort_keys=True, default=str) + "\n")
            f.flush()
            os.fsync(f.fileno())

    def finish(self) -> None:
        """Nothing to flush (every line is fsynced): verl's ``Tracking`` interface."""
