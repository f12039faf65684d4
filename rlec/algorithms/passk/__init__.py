"""Pass@k Training (arXiv 2508.10751): the math, its settings and its per-step behaviour.

- :mod:`.advantage`: the analytic pass@k group advantage, its batch form, the entropy switch and
  the unbiased pass@k estimator of evaluation (formulas and sources in its docstring);
- :mod:`.settings`: ``rlec.passk`` (:class:`PasskSettings`; verl's copy ``algorithm.passk`` is set from it);
- :mod:`.algorithm`: :class:`PassK`, the :class:`rlec.algorithms.base.Algorithm` verl's trainer drives
  (the entropy switch sets ``algorithm.passk.active_k`` for the ``rlec_passk`` estimator of
  :mod:`rlec.verl_plugin.estimators`).
"""

from __future__ import annotations

from rlec.algorithms.passk.advantage import (
    PASSK_ESTIMATOR,
    EntropySwitch,
    pass_at_k,
    pass_at_k_array,
    passk_advantage_batch,
    passk_group_advantage,
    passk_group_advantages,
    passk_group_reward,
    switch_k,
)
from rlec.algorithms.passk.settings import PasskSettings

__all__ = [
    "PASSK_ESTIMATOR",
    "EntropySwitch",
    "PasskSettings",
    "pass_at_k",
    "pass_at_k_array",
    "passk_advantage_batch",
    "passk_group_advantage",
    "passk_group_advantages",
    "passk_group_reward",
    "switch_k",
]
