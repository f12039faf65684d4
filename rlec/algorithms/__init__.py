"""The algorithms rlec adds to RLEC training, one folder each (pure: no verl, no torch.distributed).

- :mod:`rlec.algorithms.base`: the one interface verl's trainer drives (:class:`~rlec.algorithms.base.Algorithm`,
  :class:`~rlec.algorithms.base.RolloutPlan`, :class:`~rlec.algorithms.base.StepRecord`);
- :mod:`rlec.algorithms.registry`: the registered algorithms, how each is switched on, ``check_all``;
- :mod:`rlec.algorithms.e3`: E3 (arXiv 2505.18573): the entropy-targeting temperature scheduler,
  per-prompt history and difficulty ranks, the dynamic rollout budget and the length bias;
- :mod:`rlec.algorithms.passk`: Pass@k Training (arXiv 2508.10751): the analytic pass@k group
  advantage, its batch form, the entropy switch, and the unbiased pass@k estimator of evaluation;
- :mod:`rlec.algorithms.rlve`: RLVE (arXiv 2511.07317), whose environments and difficulty
  controllers live in :mod:`rlec.environments`.

Each folder holds the math, one settings class whose ``check`` is the only validator, and
``algorithm.py``. The verl side (:mod:`rlec.verl_plugin`) keeps only verl's registrations plus one
generic trainer mixin, which drives the algorithm objects.
"""
