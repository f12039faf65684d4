"""The seeds' headline effects at toy scale, through the launcher users run (issue 33; docs/experiments.md).

``python -m rlec.experiments <name>``: one module per experiment (:mod:`rlec.experiments.e3`,
``e3_budget``, ``passk``, ``rlve``, ``rlec_advantage``, ``rlec_schedule``), each an
:class:`rlec.experiments.spec.Experiment` of paired arms with one declared primary metric and a premise gate;
:mod:`rlec.experiments.core` trains every arm x seed (the baseline's gate seeds first) with
``tools/run_megatron_rlec.sh`` (``TRAINER=verl``) from the demo's warm start (:mod:`rlec.demo.warm_start`);
:mod:`rlec.experiments.report` writes the verdicts (paired per-seed differences, 95% t-intervals), the table, the
PNG and ``results.json``. Setting and metric names: :mod:`rlec.experiments.keys`.
"""
