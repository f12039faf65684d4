"""Planning and validating a cluster run before it starts (no GPU, no Megatron import, no training).

- :mod:`rlec.cluster.config_check`: ``python -m rlec.cluster.config_check`` / ``DRY_RUN=1``:
  compose and validate the trainer config, print a short verdict;
- the value types it shares with ``rlec.megatron`` live below both (neither imports the other for them):
  :mod:`rlec.layout`, the one parallel-layout class and its rules (Megatron sizes, vLLM rollout sizes, the
  FP8 block rule), and :mod:`rlec.model_shape`, a model's shape from its ``config.json``;
- :mod:`rlec.cluster.rules`: rlec's checks of a composed config (layout, rollout, batches, memory);
- :mod:`rlec.cluster.paths`: the model folder, data files and checkpoint folder a run uses;
- :mod:`rlec.cluster.verl_keys`: reading the layout and training settings out of verl's keys;
- :mod:`rlec.cluster.memory`: per-GPU memory of the update and rollout phases (estimates);
- :mod:`rlec.cluster.cost_model`: projected throughput of a layout (a model, not a measurement).
- :mod:`rlec.cluster.main_ppo`: the launcher's training entry, verl's ``main_ppo`` unchanged but for a
  full disk at a checkpoint (one line, exit 2); it delegates to verl, it runs no model itself.
"""
