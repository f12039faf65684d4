"""The training data an experiment names (:attr:`rlec.experiments.spec.Experiment.data`): one :class:`DataKind` per
name in :data:`DATA_KINDS`, so a new kind is one entry here.

A kind says what the shared data folder of an experiment gets (its ``train.parquet`` and ``test.parquet``,
:func:`rlec.experiments.core.prepare_shared`), whether it takes a pool (:attr:`rlec.experiments.spec.Experiment.pool`)
and whether the held-out set is RLVE's environment test set. Where a pilot picks the training prompts, how it does
(its candidates, the training rows and the probe set built from a committed pilot file) is the kind's entry in
:data:`rlec.experiments.pilot.PILOTS` (a kind without one has no pilot). This module imports no other module of
:mod:`rlec.experiments`, so the spec can check an experiment's data against it.

- ``binary``: the demo's additions, plain correctness (no target in the prompt); the pilot's candidates are addition
  prompts, its probe set held-out additions;
- ``targets``: the demo's additions at targets 0.1 / 0.8 (RLEC's reward); no pilot;
- ``environments``: the demo's binary additions for training, RLVE's environment test set held out; no pilot;
- ``pool``: a fixed pool of one environment's problems in the binary prompt; the pilot's candidates are the pool's own
  problems and its probe candidates.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

__all__ = ["DATA_KINDS", "DataKind", "data_kind"]


@dataclass(frozen=True)
class DataKind:
    """One kind of training data (module docstring).

    Attributes:
        name: the value of :attr:`rlec.experiments.spec.Experiment.data`.
        write_data: ``(folder, exp) -> summary``: writes the experiment's ``train.parquet`` and ``test.parquet`` into
            ``folder``; returns a line to log, or None.
        pool: the kind is a pool's problems (the experiment must name a pool, and only this kind may).
        environments_test: the held-out set is RLVE's environment test set.
    """

    name: str
    write_data: Callable[[Path, Any], "str | None"]
    pool: bool = False
    environments_test: bool = False


def _demo_data(targets: bool) -> Callable[[Path, Any], "str | None"]:
    """The demo's additions, binary or at targets 0.1 / 0.8 (:func:`rlec.demo.data.write_demo_data`, seed 0)."""

    def write(folder: Path, exp: Any) -> str | None:
        from rlec.demo import data as demo_data

        demo_data.write_demo_data(folder, seed=0, test_questions=60, train_rows=exp.train_rows,
                                  binary_fraction=0.0 if targets else 1.0, targets=[0.1, 0.8] if targets else None)
        return None

    return write


def _pool_data(folder: Path, exp: Any) -> str:
    """The pool's training and held-out rows (:func:`rlec.environments.pool.write_pool`, seed 0); their summary."""
    from rlec.environments.pool import format_pool_summary, write_pool

    return format_pool_summary(write_pool(folder, exp.pool, train_rows=exp.train_rows, seed=0))


DATA_KINDS: dict[str, DataKind] = {kind.name: kind for kind in (
    DataKind("binary", _demo_data(targets=False)),
    DataKind("targets", _demo_data(targets=True)),
    DataKind("environments", _demo_data(targets=False), environments_test=True),
    DataKind("pool", _pool_data, pool=True),
)}


def data_kind(name: str) -> DataKind:
    """The :class:`DataKind` called ``name``.

    Raises:
        ValueError: no such kind (names the known ones).
    """
    try:
        return DATA_KINDS[name]
    except KeyError:
        raise ValueError(f"unknown training data {name!r}: one of {', '.join(DATA_KINDS)}") from None
