"""Evaluation internals shared by ``python -m rlec.eval.evaluate`` and ``python -m rlec.eval.metrics``.

- :mod:`rlec.eval.dataset`: the evaluation parquet, one item per question;
- :mod:`rlec.eval.records`: the raw-record JSON Lines format, target grid, durable appends,
  atomic writes;
- :mod:`rlec.eval.engines`: generation engines (transformers ``generate``; vLLM on GPUs);
- :mod:`rlec.eval.selective`: the selective-prediction metrics (coverage, selective accuracy,
  RLEC score, AURC / AOC; definitions in ``docs/metrics.md``);
- :mod:`rlec.eval.bootstrap`: question-level bootstrap confidence intervals;
- :mod:`rlec.eval.report`: the Markdown tables (one run, or two side by side).

Only :mod:`rlec.eval.engines` imports torch / transformers / vLLM; the rest is numpy and the
standard library, so metrics stay fast to import and to test.
"""
