"""The graded outcome of one response: correct, incorrect or abstain.

Grading decides it (:mod:`rlec.grading`); the reward reads it (:func:`rlec.reward.formula.rlec_reward`),
so it lives here, below both: grading imports nothing from :mod:`rlec.reward`.
"""

from __future__ import annotations

from enum import Enum

__all__ = ["Outcome"]


class Outcome(str, Enum):
    """The graded outcome of one response (the string values are what records and metrics store)."""

    CORRECT = "correct"
    INCORRECT = "incorrect"
    ABSTAIN = "abstain"
