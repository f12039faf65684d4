"""rlec: train one language model to follow a confidence target stated in its prompt.

Given a target p, the model should answer only when it believes it is right with probability
above p, and otherwise abstain with ``I don't know``. The packages, by layer:

- pure (no verl, no torch.distributed, no Megatron): :mod:`rlec.reward` (R_p^(b), its schedule,
  scoring, training metrics), :mod:`rlec.grading` (answer extraction, math-verify pool, HotpotQA
  EM), :mod:`rlec.prompts`, :mod:`rlec.data` (data preparation), :mod:`rlec.config` (the one
  config schema), :mod:`rlec.io` (atomic outputs), :mod:`rlec.cluster` (config checks, layout
  rules, memory and cost models);
- :mod:`rlec.eval`: raw evaluation records (transformers or vLLM), metrics, plots;
- :mod:`rlec.verl_plugin`: the only code that registers with verl (reward manager, trainers);
- :mod:`rlec.megatron`: the only code that imports Megatron (mbridge adapter, CPU shims, model,
  log-probs, train step, dist checkpoints); the converter and verl's engine on CPU use it;
- training runs are verl's ``main_ppo`` everywhere (``tools/run_megatron_rlec.sh``; :mod:`rlec.verl_report`
  adds ``make run``'s console, summary and final evaluation on CPU).

The layer rules are checked by ``lint-imports`` (pyproject.toml) in the test command.
"""

__version__ = "0.1.0"
