"""The algorithms rlec adds to RLEC training, in the order both loops drive them.

Each entry is an :class:`rlec.algorithms.base.Algorithm` subclass. How each is switched on (the
switch is where the composed config already had to say it; ``algorithm=<name>`` composes the
overlay ``megatron_configs/algorithm/<name>.yaml`` that sets it):

=========  ======================================  ===================  ==========================================
name       switch                                  settings             why that switch
=========  ======================================  ===================  ==========================================
e3         ``rlec.e3.enable=true``                 ``rlec.e3``          rlec's own section
passk      ``algorithm.adv_estimator=rlec_passk``  ``algorithm.passk``  verl selects the advantage estimator by name
rlve       ``data.rlve.enable=true``               ``rlec.rlve``        verl hands the dataset only ``data``
=========  ======================================  ===================  ==========================================

Adding an algorithm: docs/adding_an_algorithm.md.
"""

from __future__ import annotations

from typing import Any

from rlec.algorithms.base import Algorithm, AlgorithmContext, Finding
from rlec.algorithms.e3.algorithm import E3
from rlec.algorithms.passk.algorithm import PassK
from rlec.algorithms.rlve.algorithm import RLVE

ALGORITHMS: tuple[type[Algorithm], ...] = (E3, PassK, RLVE)

__all__ = ["ALGORITHMS", "build", "check_all", "enabled"]


def enabled(cfg: Any) -> list[type[Algorithm]]:
    """The registered algorithms the config switches on, in registry order."""
    return [cls for cls in ALGORITHMS if cls.enabled(cfg)]


def check_all(cfg: Any) -> list[Finding]:
    """Every finding of every registered algorithm's :meth:`~rlec.algorithms.base.Algorithm.check`, in registry order."""
    return [finding for cls in ALGORITHMS for finding in cls.check(cfg)]


def build(cfg: Any, context: AlgorithmContext) -> list[Algorithm]:
    """The enabled algorithms, built (:meth:`~rlec.algorithms.base.Algorithm.from_config`), in registry order.

    Raises:
        ValueError: an enabled algorithm's check fails (its first error) or the context lacks what it needs.
    """
    return [cls.from_config(cfg, context) for cls in enabled(cfg)]
