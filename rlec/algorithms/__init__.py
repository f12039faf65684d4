"""Pure algorithm code of the systems rlec provides beside RLEC itself (no verl, no torch.distributed).

- :mod:`rlec.algorithms.passk`: Pass@k Training (arXiv 2508.10751): the analytic pass@k group
  advantage, its batch form, the entropy switch, and the unbiased pass@k estimator of evaluation.
- :mod:`rlec.algorithms.e3`: E3 (arXiv 2505.18573): the entropy-targeting temperature scheduler,
  per-prompt history and difficulty ranks, the dynamic rollout budget and the length bias.

The verl adapters live in :mod:`rlec.verl_plugin` (``estimators``, ``e3``); the local run calls
the same functions.
"""
