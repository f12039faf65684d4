"""The seeds' headline effects at toy scale, through the launcher users run (issue 33; docs/experiments.md).

``python -m rlec.experiments <name>``: one module per experiment (:mod:`rlec.experiments.e3`,
``e3_budget``, ``passk``, ``rlve``, ``rlec``), each an :class:`rlec.experiments.spec.Experiment` of
paired arms; :mod:`rlec.experiments.core` trains every arm x seed with ``tools/run_megatron_rlec.sh``
(``TRAINER=verl``) from the demo's warm start (:mod:`rlec.demo.warm_start`);
:mod:`rlec.experiments.report` writes the table (95% bootstrap intervals over seeds and questions),
the PNG and ``results.json``. Setting and metric names: :mod:`rlec.experiments.keys`.
"""
