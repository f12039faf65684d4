"""The algorithms rlec adds to RLEC training, in the order verl's trainer drives them.

Each entry is an :class:`rlec.algorithms.base.Algorithm` subclass. Every algorithm has one settings
home, ``rlec.<name>`` (its ``section``), and one switch there, ``rlec.<name>.enable``;
``algorithm=<name>`` composes the overlay ``megatron_configs/algorithm/<name>.yaml``, which sets the
switch and, from the home, whatever verl itself must receive (its ``verl_keys``; never read back as
settings, and each algorithm's check refuses a verl side that disagrees with the home):

=====  ==========================  ==============  ====================================================
name   switch                      settings        verl's side, set by the overlay from the home
=====  ==========================  ==============  ====================================================
e3     ``rlec.e3.enable=true``     ``rlec.e3``     the agent loop ``rlec_e3_agent``
passk  ``rlec.passk.enable=true``  ``rlec.passk``  ``algorithm.adv_estimator=rlec_passk`` (verl selects
                                                   an estimator by name); ``algorithm.passk``, the
                                                   estimator's copy (``k: ${rlec.passk.k}``, runtime
                                                   ``active_k``), as verl hands it only ``algorithm``
rlve   ``rlec.rlve.enable=true``   ``rlec.rlve``   ``data.custom_cls`` (the RLVE dataset) and
                                                   ``data.rlve: ${rlec.rlve}``, as verl hands the
                                                   dataset only ``data``
=====  ==========================  ==============  ====================================================

Each function below takes the process's :class:`rlec.run_config.RunConfig` (``run``, converted once by the caller)
and hands that one object to every algorithm's class methods.

Adding an algorithm: docs/adding_an_algorithm.md.
"""

from __future__ import annotations

from typing import Any, Collection

from rlec.algorithms.base import Algorithm, AlgorithmContext, Finding, RunConfig
from rlec.algorithms.e3.algorithm import E3
from rlec.algorithms.passk.algorithm import PassK
from rlec.algorithms.rlve.algorithm import RLVE

ALGORITHMS: tuple[type[Algorithm], ...] = (E3, PassK, RLVE)

__all__ = ["ALGORITHMS", "build", "check_all", "enabled", "sets_verl_value", "step_line_columns", "table_columns",
           "verdicts", "verl_algorithm_keys", "verl_keys"]


def enabled(run: RunConfig) -> list[type[Algorithm]]:
    """The registered algorithms the config switches on, in registry order."""
    return [cls for cls in ALGORITHMS if cls.enabled(run)]


def serves_prompts(run: RunConfig) -> bool:
    """Whether an enabled algorithm serves training prompts of its own (:attr:`~rlec.algorithms.base.Algorithm.serves_prompts`),
    so an empty ``data.train_files`` is a run on those alone."""
    return any(cls.serves_prompts for cls in enabled(run))


def check_all(run: RunConfig) -> list[Finding]:
    """Every finding of every registered algorithm's :meth:`~rlec.algorithms.base.Algorithm.check`, in registry order."""
    return [finding for cls in ALGORITHMS for finding in cls.check(run)]


def build(run: RunConfig, context: AlgorithmContext) -> list[Algorithm]:
    """The enabled algorithms, built (:meth:`~rlec.algorithms.base.Algorithm.from_config`), in registry order.

    Raises:
        ValueError: an enabled algorithm's check fails (its first error) or the context lacks what it needs.
    """
    return [cls.from_config(run, context) for cls in enabled(run)]


def verdicts(run: RunConfig) -> list[str]:
    """Each enabled algorithm's part of DRY_RUN's ``algo`` line (:meth:`~rlec.algorithms.base.Algorithm.verdict`),
    in registry order; one whose settings do not read (ValueError) is named with "settings refused" (the
    findings below the line say why)."""
    out = []
    for cls in enabled(run):
        try:
            out.append(cls.verdict(run))
        except ValueError:
            out.append(f"{cls.name} (settings refused)")
    return out


def table_columns(metric_keys: Collection[str]) -> list[tuple[str, str, str]]:
    """Every registered algorithm's step-table columns whose metric the run logged, in registry order."""
    keys = set(metric_keys)
    return [c for cls in ALGORITHMS for c in cls.table_columns(keys) if c[1] in keys]


def step_line_columns(metric_keys: Collection[str]) -> list[tuple[str, str, str]]:
    """The columns of the console's line per step: each registered algorithm's first
    :attr:`~rlec.algorithms.base.Algorithm.step_line_columns` table columns whose metric the run logged, in registry order."""
    keys = set(metric_keys)
    return [c for cls in ALGORITHMS for c in cls.table_columns(keys)[:cls.step_line_columns] if c[1] in keys]


def sets_verl_value(key: str, value: Any) -> bool:
    """Whether a registered algorithm's overlay gives verl's setting ``key`` this value
    (:attr:`~rlec.algorithms.base.Algorithm.verl_values`; its own check judges it)."""
    return any(key in cls.verl_values and cls.verl_values[key] == value for cls in ALGORITHMS)


def verl_keys() -> tuple[str, ...]:
    """Every registered algorithm's :attr:`~rlec.algorithms.base.Algorithm.verl_keys` (keys it adds to verl's sections)."""
    return tuple(dict.fromkeys(k for cls in ALGORITHMS for k in cls.verl_keys))


def verl_algorithm_keys() -> tuple[str, ...]:
    """The keys the registered algorithms add under verl's ``algorithm`` section (``passk``): verl's
    ``AlgoConfig`` has no such fields, so they are dropped before it reads the section."""
    return tuple(k.removeprefix("algorithm.").split(".")[0] for k in verl_keys() if k.startswith("algorithm."))
