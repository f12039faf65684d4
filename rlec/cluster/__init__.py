"""The launcher: planning and validating a cluster run before it starts, and its training entry.

- :mod:`rlec.cluster.config_check`: ``python -m rlec.cluster.config_check`` / ``DRY_RUN=1``:
  compose and validate the trainer config, print a short verdict;
- :mod:`rlec.cluster.paths`: the model folder, data files and checkpoint folder a run uses;
- :mod:`rlec.cluster.cost_model`: projected throughput of a layout (a model, not a measurement);
- :mod:`rlec.cluster.ray_cluster`: Ray's start on a multi-node allocation;
- :mod:`rlec.cluster.main_ppo`: the launcher's training entry, verl's ``main_ppo`` unchanged but for a
  full disk at a checkpoint (one line, exit 2); it delegates to verl, it runs no model itself.

The rules it applies live below it in :mod:`rlec.rules` (verl's trainer applies the same ones at construction), the
value types it shares with ``rlec.megatron`` below both (:mod:`rlec.layout`, :mod:`rlec.model_shape`). Nothing
in ``rlec.verl_plugin``, ``rlec.megatron`` or ``rlec.rules`` imports this package (import-linter contracts in
pyproject.toml).
"""
