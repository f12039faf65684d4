"""The learning demo: a warm-started tiny Qwen3 trained with RLEC by verl's trainer, evaluated before and after.

``python -m rlec.demo`` (``make demo``); the stages are in :mod:`rlec.demo.pipeline`, the warm
start in :mod:`rlec.demo.warm_start` (its shipped weights in ``rlec/demo/assets/``), the demo's
addition problems as data-contract rows in :mod:`rlec.demo.data`. The guide is
``docs/local_run.md`` ("The learning demo"). Library code never imports this package (an
import-linter contract in ``pyproject.toml``); it sits on top of the launcher
(``tools/run_megatron_rlec.sh``, verl's trainer on CPU) and :mod:`rlec.eval`.
"""
