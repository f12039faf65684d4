"""Evaluation internals shared by ``python -m rlec.eval.evaluate`` and ``python -m rlec.eval.metrics``.

- :mod:`rlec.eval.dataset`: the evaluation parquet, one item per question;
- :mod:`rlec.eval.records`: the raw-record JSON Lines format, target grid, durable appends,
  atomic writes;
- :mod:`rlec.eval.selective`: the selective-prediction metrics (coverage, selective accuracy,
  RLEC score, AURC / AOC; definitions in ``docs/metrics.md``);
- :mod:`rlec.eval.bootstrap`: question-level bootstrap confidence intervals;
- :mod:`rlec.eval.calibration`: per-question calibration: q_i, c_i, smECE / ECE / Brier / AUROC,
  agreement with "answer iff q_i > p", regret, monotonicity (``docs/metrics.md``);
- :mod:`rlec.eval.report`: the Markdown tables (one run, or two side by side).

Generation (transformers or vLLM) is :mod:`rlec.generation`, shared with the CPU rollout (``rlec_hf``);
the modules here are numpy and the standard library (relplot, for smECE and the reliability diagram, is
imported only when those are computed), so metrics stay fast to import and to test.
"""
