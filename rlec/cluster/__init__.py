"""Planning and validating a cluster run before it starts (no GPU, no Megatron, no verl registries).

- :mod:`rlec.cluster.config_check`: ``python -m rlec.cluster.config_check`` / ``DRY_RUN=1``:
  compose, print and validate the trainer config;
- :mod:`rlec.cluster.layout`: the one parallel-layout class and its divisibility rules;
- :mod:`rlec.cluster.rules`: rlec's checks of a composed config (layout, rollout, batches, memory);
- :mod:`rlec.cluster.verl_keys`: reading the layout and training settings out of verl's keys;
- :mod:`rlec.cluster.memory`: per-GPU memory of the update and rollout phases (estimates);
- :mod:`rlec.cluster.cost_model`: projected throughput of a layout (a model, not a measurement).
"""
