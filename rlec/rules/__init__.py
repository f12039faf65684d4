"""rlec's rules of a composed verl trainer config: what the launcher checks before a run and verl's trainer at
construction, one rule set for both.

Below the launcher (:mod:`rlec.cluster`, which runs them before Ray starts: ``DRY_RUN=1``,
``rlec.cluster.config_check``) and the trainer (:mod:`rlec.verl_plugin.trainers`, which runs the early rules and
the resume rules when verl builds it, so a ``main_ppo`` started without the launcher is refused by the same
rules); this package imports neither, nor ``rlec.megatron`` (its Megatron field names are passed in), nor the
console reports (import-linter contracts in pyproject.toml).

- :mod:`rlec.rules.verl_keys`: the layout and training settings read out of verl's keys;
- :mod:`rlec.rules.settings_rules`: the early rule set (rlec's settings schema, verl's estimator / loss / seed
  rules, unknown keys, number ranges);
- :mod:`rlec.rules.checks`: the full check of a composed config (layout, rollout, batches, wiring, memory,
  every algorithm's check, known failures of the stack);
- :mod:`rlec.rules.moe`: MoE stability rules (router replay, importance-sampling correction);
- :mod:`rlec.rules.resources`: Ray's logical CPUs against what the run asks for;
- :mod:`rlec.rules.memory`: per-GPU memory of the update and rollout phases (estimates);
- :mod:`rlec.rules.resume`: what a resumed run may change (:data:`rlec.config.RESUME_ALLOWED`), the layout and
  run records beside the checkpoints, and the live writers of a checkpoint folder.
"""
