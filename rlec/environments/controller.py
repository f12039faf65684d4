"""The difficulty controller of one environment (RLVE, arXiv 2511.07317, Sec. 2.2).

State: an upper bound h (start ``initial``, default 0) and two counters of the samples seen at
difficulty exactly h (how many, how many correct).

- Sampling: each problem's difficulty is drawn uniformly from [max(0, h - w + 1), h] (window w,
  default 4), so the policy keeps practising the levels just below its frontier.
- Update (after each training step, with every sample's difficulty and outcome): samples at a
  difficulty other than h are ignored; once at least ``min_samples`` (8 x n, n = samples per
  prompt) have been counted at h, h rises by 1 if their accuracy is >= ``threshold`` (0.9), and
  the counters are reset whether or not it rose. h never decreases and never passes ``maximum``
  (the environment's cap, or a tighter one from the config).

"Correct" is the graded outcome: with RLEC targets an abstention is not correct, so h rises only
when the policy actually solves >= 90% at its frontier. The check runs once per update, after all
of the step's samples are counted (so a step may count more than ``min_samples``).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

__all__ = ["DEFAULT_THRESHOLD", "DEFAULT_WINDOW", "DifficultyController", "Update"]

# RLVE's values (arXiv 2511.07317, Sec. 2.2); the one default of rlec.rlve.window / threshold
# (rlec.environments.SourceConfig's fields take them)
DEFAULT_WINDOW = 4
DEFAULT_THRESHOLD = 0.9


@dataclass(frozen=True)
class Update:
    """What one :meth:`DifficultyController.update` did.

    Attributes:
        h: the upper bound after the update.
        counted: samples at h counted since the last reset, this step's included (before any reset).
        accuracy_at_h: their accuracy (None when none has been counted).
        decided: the check ran (at least ``min_samples`` were counted) and the counters were reset.
        raised: h rose by 1.
    """

    h: int
    counted: int
    accuracy_at_h: float | None
    decided: bool
    raised: bool


class DifficultyController:
    """Adaptive difficulty of one environment (see the module docstring).

    Args:
        min_samples: samples at h needed before a decision, >= 1 (RLVE: 8 x samples per prompt).
        initial: the starting upper bound h, >= 0.
        window: w >= 1; difficulties are drawn from [max(0, h - w + 1), h].
        threshold: accuracy in (0, 1] at which h rises.
        maximum: h never exceeds it (None: no cap); must be >= ``initial``.

    Raises:
        ValueError: an argument out of range (the message names it).
    """

    def __init__(self, min_samples: int, *, initial: int = 0, window: int = DEFAULT_WINDOW, threshold: float = DEFAULT_THRESHOLD,
                 maximum: int | None = None):
        checks = [("min_samples", min_samples, 1), ("initial", initial, 0), ("window", window, 1)]
        for name, value, low in checks:
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise ValueError(f"{name} must be an int >= {low}, got {value!r}")
        if not 0.0 < float(threshold) <= 1.0:
            raise ValueError(f"threshold must be in (0, 1], got {threshold!r}")
        if maximum is not None and (not isinstance(maximum, int) or maximum < initial):
            raise ValueError(f"maximum must be an int >= initial ({initial}), got {maximum!r}")
        self.min_samples, self.window, self.threshold, self.maximum = min_samples, window, float(threshold), maximum
        self.h = initial
        self.correct_at_h = 0
        self.total_at_h = 0

    @property
    def lowest(self) -> int:
        """The lowest difficulty drawn: max(0, h - w + 1)."""
        return max(0, self.h - self.window + 1)

    def sample(self, rng: random.Random) -> int:
        """A difficulty drawn uniformly from [max(0, h - w + 1), h] with ``rng`` (never the global RNG)."""
        return rng.randint(self.lowest, self.h)

    def update(self, outcomes: Iterable[tuple[int, bool | float]]) -> Update:
        """Count one step's samples and apply the rule once.

        Args:
            outcomes: (difficulty, correct) per sample of this environment; correct is a bool or 0/1.

        Returns:
            An :class:`Update` (h after the update, the accuracy that was judged, whether h rose).
        """
        for difficulty, correct in outcomes:
            if int(difficulty) == self.h:
                self.total_at_h += 1
                self.correct_at_h += int(bool(correct))
        counted, accuracy = self.total_at_h, self.accuracy_at_h
        decided = raised = False
        if self.total_at_h >= self.min_samples:
            decided = True
            if accuracy is not None and accuracy >= self.threshold and (self.maximum is None or self.h < self.maximum):
                self.h += 1
                raised = True
            self.correct_at_h = self.total_at_h = 0
        return Update(self.h, counted, accuracy, decided, raised)

    @property
    def accuracy_at_h(self) -> float | None:
        """Accuracy of the samples counted at h since the last reset (None before the first)."""
        return self.correct_at_h / self.total_at_h if self.total_at_h else None

    def state_dict(self) -> dict[str, Any]:
        """The mutable state: ``{"h", "correct_at_h", "total_at_h"}`` (plain ints)."""
        return {"h": self.h, "correct_at_h": self.correct_at_h, "total_at_h": self.total_at_h}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output.

        Raises:
            ValueError: a missing key, negative counts, more correct than counted, or h above ``maximum``.
        """
        try:
            h, correct, total = int(state["h"]), int(state["correct_at_h"]), int(state["total_at_h"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"controller state needs integer h, correct_at_h, total_at_h; got {dict(state)!r} ({exc})") from None
        if h < 0 or not 0 <= correct <= total:
            raise ValueError(f"controller state out of range: {dict(state)!r}")
        if self.maximum is not None and h > self.maximum:
            raise ValueError(f"controller state h={h} is above the maximum {self.maximum}")
        self.h, self.correct_at_h, self.total_at_h = h, correct, total

    def __repr__(self) -> str:
        return (f"DifficultyController(h={self.h}, counted={self.correct_at_h}/{self.total_at_h}, "
                f"min_samples={self.min_samples}, window={self.window}, threshold={self.threshold}, maximum={self.maximum})")
