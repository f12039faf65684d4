"""End of the local run: the training summary table, the curves plot, the final evaluation.

Their one home is :mod:`rlec.report` (shared with verl's trainer on CPU); the names stay importable here.
"""

from __future__ import annotations

from rlec.report import (COLUMNS, REWARD_NOTE, STEP_PHASES, curve_series, evaluate_final, evaluation_args, plot_curves,
                         print_training_summary, step_time_split, time_split, training_table)

__all__ = ["COLUMNS", "REWARD_NOTE", "STEP_PHASES", "curve_series", "evaluate_final", "evaluation_args", "plot_curves",
           "print_training_summary", "step_time_split", "time_split", "training_table"]
