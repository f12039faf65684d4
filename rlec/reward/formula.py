"""The RLEC reward family R_p^(b) and the linear schedule of its stability coefficient b.

For a target p in [0, 1) stated in the prompt and a stability coefficient b in [0, 1]::

    R_p^(b)(correct)   =  (1 - p)^b
    R_p^(b)(incorrect) = -p (1 - p)^(b - 1)
    R_p^(b)(abstain)   =  0

If the model is right with probability q, answering earns in expectation

    q (1-p)^b - (1-q) p (1-p)^(b-1) = (1-p)^(b-1) (q - p),

so answering beats abstaining exactly when q > p, for every b: b only rescales the reward by
the positive factor (1-p)^(b-1). At b = 0 the stakes are +1 / -p/(1-p) (the odds of the target,
large near p -> 1); at b = 1 they are the bounded (1-p) / -p. Training moves b linearly from 0 to
1 (:class:`rlec.reward.schedule.LinearSchedule`), a pure function of the global step.

p = 0 is the ordinary binary objective: correct 1, incorrect 0, at every b.

Source: the RLEC objective as specified for this project (README, "The algorithm"); ternary
rewards with an abstention option follow Reinforced Hesitation (Mohamadi et al., 2025,
arXiv 2511.11500, Sec. 3), whose penalty lambda corresponds to p/(1-p) at b = 0.
"""

from __future__ import annotations

import math
from typing import Any, TypeVar

import numpy as np

from rlec.grading.outcome import Outcome

ArrayT = TypeVar("ArrayT")


def check_target(p: float) -> float:
    """Validate a target p and return it as float.

    Raises:
        ValueError: p is NaN, not a real number, or outside [0, 1) (p = 1 would make the
            incorrect-answer penalty infinite).
    """
    try:
        value = float(p)
    except (TypeError, ValueError, OverflowError):  # OverflowError: an int beyond a float (10**400)
        raise ValueError(f"target p must be a number in [0, 1), got {_shown(p)}") from None
    if math.isnan(value) or not 0.0 <= value < 1.0:
        raise ValueError(f"target p must be in [0, 1), got {_shown(p)}")
    return value


def _shown(value: object) -> str:
    """``repr(value)`` cut to 60 characters (an int of 10,000 digits has no repr at all)."""
    try:
        text = repr(value)
    except ValueError:  # int repr beyond sys.get_int_max_str_digits
        text = f"<{type(value).__name__} too large to print>"
    return text if len(text) <= 60 else text[:57] + "..."


def check_b(b: float) -> float:
    """Validate a stability coefficient b and return it as float.

    Raises:
        ValueError: b is NaN, not a real number, or outside [0, 1].
    """
    try:
        value = float(b)
    except (TypeError, ValueError, OverflowError):
        raise ValueError(f"stability coefficient b must be a number in [0, 1], got {_shown(b)}") from None
    if math.isnan(value) or not 0.0 <= value <= 1.0:
        raise ValueError(f"stability coefficient b must be in [0, 1], got {_shown(b)}")
    return value


def reward_stakes(p: float, b: float) -> tuple[float, float]:
    """The (correct, incorrect) rewards of R_p^(b); abstaining is always 0.

    Args:
        p: target in [0, 1).
        b: stability coefficient in [0, 1].

    Returns:
        ``((1-p)^b, -p (1-p)^(b-1))``; at p = 0 exactly ``(1.0, 0.0)``.

    Raises:
        ValueError: p or b out of range or NaN (see :func:`check_target`, :func:`check_b`).
    """
    p, b = check_target(p), check_b(b)
    return (1.0 - p) ** b, -p * (1.0 - p) ** (b - 1.0) + 0.0  # + 0.0 turns -0.0 into 0.0


def rlec_reward(outcome: Outcome | str, p: float, b: float) -> float:
    """R_p^(b)(outcome) for one response.

    Args:
        outcome: an :class:`Outcome` or its value ("correct", "incorrect", "abstain").
        p: target in [0, 1).
        b: stability coefficient in [0, 1].

    Returns:
        The scalar reward, in [-p/(1-p), 1].

    Raises:
        ValueError: unknown outcome, or p / b out of range or NaN.
    """
    try:
        outcome = Outcome(outcome)
    except ValueError:
        raise ValueError(f"outcome must be one of {[o.value for o in Outcome]}, got {outcome!r}") from None
    r_correct, r_incorrect = reward_stakes(p, b)
    if outcome is Outcome.CORRECT:
        return r_correct
    if outcome is Outcome.INCORRECT:
        return r_incorrect
    return 0.0


def rlec_reward_array(correct: ArrayT, answered: ArrayT, p: ArrayT, b: float | ArrayT) -> ArrayT:
    """Vectorised R_p^(b) for numpy arrays or torch tensors (same type in, same type out).

    Args:
        correct: bool array, shape (N,): the answer was right (ignored where not answered).
        answered: bool array, shape (N,): the response gave an answer (False = abstained).
        p: float array, shape (N,): per-sample target in [0, 1).
        b: scalar or float array broadcastable to (N,), in [0, 1].

    Returns:
        float array, shape (N,), dtype float64 for numpy and p's dtype for torch.

    Raises:
        ValueError: any p outside [0, 1) or any b outside [0, 1], or NaN (the message names the
            first offending index and value).
    """
    _check_array(p, "target p", upper_open=True)
    _check_array(b, "stability coefficient b", upper_open=False)
    one_minus_p = 1.0 - p
    r_correct = one_minus_p**b
    r_incorrect = -p * one_minus_p ** (b - 1.0)
    answered_f = answered * 1.0
    correct_f = correct * 1.0
    return answered_f * (correct_f * r_correct + (1.0 - correct_f) * r_incorrect) + 0.0


def _check_array(x: Any, name: str, *, upper_open: bool) -> None:
    values = np.asarray(x.detach().cpu() if hasattr(x, "detach") else x, dtype=np.float64)
    bad = np.isnan(values) | (values < 0.0) | ((values >= 1.0) if upper_open else (values > 1.0))
    if bad.any():
        flat = np.flatnonzero(bad.reshape(-1))[0]
        interval = "[0, 1)" if upper_open else "[0, 1]"
        raise ValueError(f"{name} must be in {interval}; index {flat} is {float(values.reshape(-1)[flat])!r}")
