"""RLVE (arXiv 2511.07317): verifiable environments with adaptive difficulty, as an rlec algorithm.

The math lives in :mod:`rlec.environments` (the environments, the difficulty controller
:mod:`rlec.environments.controller` and the prompt source :mod:`rlec.environments.source`, which
data preparation and evaluation use too); this folder holds what makes it an algorithm:

- :mod:`.settings`: ``rlec.rlve``, the home (verl's copy ``data.rlve`` is set from it) (:class:`RLVESettings`, extending
  :class:`rlec.environments.SourceConfig`);
- :mod:`.algorithm`: :class:`RLVE`, the :class:`rlec.algorithms.base.Algorithm` verl's trainer drives
  (after each step, every response's environment, difficulty and outcome update the controllers).
"""

from __future__ import annotations

from rlec.algorithms.rlve.settings import DEFAULT_ROWS_PER_EPOCH, RLVE_DATASET, RLVESettings

__all__ = ["DEFAULT_ROWS_PER_EPOCH", "RLVE_DATASET", "RLVESettings"]
