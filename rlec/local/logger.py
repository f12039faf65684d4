"""Metrics of the local run: JSON Lines (durable), TensorBoard (when installed), console.

Each training step is one JSON object per line in ``metrics.jsonl``, flushed and fsynced, so an
interrupted run keeps every finished step. On resume, lines of steps after the checkpoint being
resumed are dropped first (they will be recomputed), so the file never holds a step twice.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any, Mapping


class MetricsLogger:
    """Append per-step metrics to ``<dir>/metrics.jsonl`` and TensorBoard.

    Args:
        log_dir: output folder (created).
        resume_step: when resuming after step k, drop recorded steps > k first.
        tensorboard: also write TensorBoard events (skipped silently if not installed).
    """

    def __init__(self, log_dir: str | Path, *, resume_step: int | None = None, tensorboard: bool = True) -> None:
        self.dir = Path(log_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.path = self.dir / "metrics.jsonl"
        if resume_step is not None and self.path.exists():
            kept = [line for line in self.path.read_text().splitlines() if line.strip() and json.loads(line)["step"] <= resume_step]
            tmp = self.path.with_suffix(".jsonl.tmp")
            tmp.write_text("".join(line + "\n" for line in kept))
            tmp.replace(self.path)
        elif resume_step is None and self.path.exists():
            self.path.unlink()  # a fresh run starts a fresh file
        self._tb = None
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self._tb = SummaryWriter(str(self.dir / "tensorboard"))
            except ImportError:
                self._tb = None

    def log(self, step: int, metrics: Mapping[str, Any]) -> None:
        """Record one step's metrics (numbers go to TensorBoard; everything to JSON Lines)."""
        record = {"step": int(step), **{k: _plain(v) for k, v in metrics.items()}}
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(record, sort_keys=True) + "\n")
            f.flush()
            os.fsync(f.fileno())
        if self._tb is not None:
            for key, value in record.items():
                if key != "step" and isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
                    self._tb.add_scalar(key, value, step)
            self._tb.flush()

    def close(self) -> None:
        """Close the TensorBoard writer."""
        if self._tb is not None:
            self._tb.close()


def _plain(value: Any) -> Any:
    if hasattr(value, "item") and getattr(value, "ndim", 0) == 0:
        return value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """All step records of a ``metrics.jsonl`` file, in order."""
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
