"""Pass@k Training's math: the analytic pass@k group advantage, the entropy switch, the pass@k estimator.

Source: Chen et al., "Pass@k Training for Adaptively Balancing Exploration and Exploitation of
Large Reasoning Models", arXiv 2508.10751, Sec. 3 (analytic derivation of the pass@k advantage).
A group of N responses to one prompt, N_neg of them not correct, is split into all C(N, k)
k-subsets; a subset scores 1 when it holds a correct response (its pass@k), else 0. The
normalised subset advantage (score - mean) / std, averaged over the subsets that contain a
response, is that response's advantage. In closed form (every subset holding a correct response
scores 1; a subset scores 0 only when all of its k members are negatives)::

    R       = 1 - C(N_neg, k) / C(N, k)                       mean subset score
    sigma   = sqrt(R (1 - R))                                  its std (subset scores are 0/1)
    A_pos   = (1 - R) / sigma
    A_neg   = (1 - R - C(N_neg - 1, k - 1) / C(N - 1, k - 1)) / sigma

Defined edge cases (the paper's formula divides by zero there):

- sigma = 0 (every subset scores the same: no negative response, N_neg < k, or no correct one):
  every advantage is 0, as in a GRPO group with equal rewards;
- N <= k (at most one k-subset, so no spread to learn from; N < k has no k-subset at all):
  every advantage is 0. Groups of unequal size are each handled with their own N.

How rlec differs from the public Passk_Training code: exact integer binomials (``math.comb`` and
``fractions.Fraction``) instead of scipy floats, "correct" is a boolean (the graded outcome, never
``reward == 1``), the N <= k and sigma = 0 cases are defined instead of dividing by zero, and the
batch form accepts groups of unequal size (E3's dynamic rollout budget).

Also here: the entropy switch of the paper's combination (pass@1 while the policy's entropy is
high, pass@k when it is low) and the unbiased pass@k estimator of evaluation,
``1 - C(n - c, k) / C(n, k)`` (Chen et al., "Evaluating Large Language Models Trained on Code",
arXiv 2107.03374, Sec. 2.1, Eq. 1).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Hashable, Iterable, Sequence

import numpy as np

if TYPE_CHECKING:  # torch is imported lazily: rlec.eval.metrics uses this module without it
    import torch

# the name rlec registers the estimator under in verl (``algorithm.adv_estimator``); the key of its settings
PASSK_ESTIMATOR = "rlec_passk"

__all__ = [
    "PASSK_ESTIMATOR",
    "EntropySwitch",
    "pass_at_k",
    "pass_at_k_array",
    "passk_advantage_batch",
    "passk_group_advantage",
    "passk_group_advantages",
    "passk_group_reward",
    "switch_k",
]


def _check_group(n: int, n_neg: int, k: int) -> None:
    if int(n) != n or n < 1:
        raise ValueError(f"group size N must be an integer >= 1, got {n!r}")
    if int(n_neg) != n_neg or not 0 <= n_neg <= n:
        raise ValueError(f"N_neg must be an integer in [0, N={n}], got {n_neg!r}")
    if int(k) != k or k < 1:
        raise ValueError(f"k must be an integer >= 1, got {k!r}")


def passk_group_reward(n: int, n_neg: int, k: int) -> Fraction:
    """R = 1 - C(N_neg, k) / C(N, k): the exact mean pass@k over the k-subsets of a group.

    Args:
        n: group size N >= 1.
        n_neg: responses that are not correct, 0 <= N_neg <= N.
        k: subset size k >= 1.

    Returns:
        R in [0, 1] as an exact fraction; for N < k (no k-subset) the pass@N of the whole group
        (1 if any response is correct, else 0), the limit the definition extends to.

    Raises:
        ValueError: arguments outside the ranges above.
    """
    _check_group(n, n_neg, k)
    if n < k:
        return Fraction(int(n_neg < n))
    return 1 - Fraction(math.comb(n_neg, k), math.comb(n, k))


def passk_group_advantage(n: int, n_neg: int, k: int) -> tuple[float, float]:
    """(A_pos, A_neg): the pass@k advantage of a correct and of a not-correct response of a group.

    Formula: module docstring (arXiv 2508.10751, Sec. 3). Exact integer binomials and exact
    rational A^2 = x^2 / sigma^2; only the final rounding and square root are in floating point
    (a float sigma underflows to 0 for large groups, e.g. N = 2000, N_neg = k = 300).

    Args:
        n: group size N >= 1.
        n_neg: responses that are not correct, 0 <= N_neg <= N.
        k: subset size k >= 1.

    Returns:
        ``(A_pos, A_neg)`` as floats; ``(0.0, 0.0)`` when N <= k or sigma = 0. Finite for every
        valid (N, N_neg, k), however large: each is rounded once from its exact square. ``A_pos >= 0 >= A_neg``;
        for k = 1 they are the GRPO advantages (population std) of 0/1 rewards.
        A value is meaningless for a kind of response the group does not hold (e.g. A_pos when
        N_neg = N), but it is still finite.

    Raises:
        ValueError: arguments outside the ranges above.
    """
    _check_group(n, n_neg, k)
    return _group_advantage(int(n), int(n_neg), int(k))


@lru_cache(maxsize=4096)
def _group_advantage(n: int, n_neg: int, k: int) -> tuple[float, float]:
    """:func:`passk_group_advantage` of arguments known valid (the batch form's counts, a checked k), unchecked."""
    if n <= k:
        return 0.0, 0.0
    mean = 1 - Fraction(math.comb(n_neg, k), math.comb(n, k))
    var = mean * (1 - mean)
    if var == 0:
        return 0.0, 0.0
    # share of the subsets holding a given negative response in which every member is negative
    all_neg = Fraction(math.comb(n_neg - 1, k - 1), math.comb(n - 1, k - 1)) if n_neg >= 1 else Fraction(0)
    # x / sigma = sign(x) sqrt(x^2 / var), with x^2 / var exact and its square root taken after scaling by a
    # power of 4: float(var) alone underflows to 0.0 in large groups (N = 1082, N_neg = k = 541: var ~ 1e-325),
    # where x / sqrt(float(var)) divided by zero although A_pos ~ 1e-162 is representable.
    a_pos, a_neg = 1 - mean, 1 - mean - all_neg
    abs_neg = _sqrt_fraction(a_neg * a_neg / var)
    return _sqrt_fraction(a_pos * a_pos / var), (-abs_neg if a_neg < 0 else abs_neg)


def _sqrt_fraction(x: Fraction) -> float:
    """sqrt(x) of an exact x >= 0 as a float, without under- or overflow of the intermediate float(x).

    x is scaled by 4^-e into [1/4, 4) before the one rounding, and the root by 2^e after it
    (``math.ldexp``): relative error ~1e-16 for any x whose root is a normal float.
    """
    if x == 0:
        return 0.0
    e = (x.numerator.bit_length() - x.denominator.bit_length()) // 2
    return math.ldexp(math.sqrt(float(x / Fraction(4) ** e)), e)


def passk_group_advantages(correct: Sequence[bool], k: int) -> list[float]:
    """The pass@k advantage of each response of one group, in input order.

    Args:
        correct: N >= 1 flags, True for a correct response (abstentions are not correct).
        k: subset size >= 1.

    Returns:
        N floats (see :func:`passk_group_advantage`).

    Raises:
        ValueError: empty group or k < 1.
    """
    flags = [bool(c) for c in correct]
    if not flags:
        raise ValueError("a group needs at least one response")
    a_pos, a_neg = passk_group_advantage(len(flags), flags.count(False), int(k))
    return [a_pos if c else a_neg for c in flags]


def passk_advantage_batch(correct: "torch.Tensor", index: Sequence[Hashable], k: int) -> "torch.Tensor":
    """Pass@k advantages of a batch of responses grouped by prompt (groups of any sizes).

    Args:
        correct: bool (or 0/1) tensor (bs,), True for a correct response.
        index: bs group ids (verl's ``uid`` array: one id per prompt, repeated for its responses;
            any hashable values, groups need not be contiguous).
        k: subset size, an integer >= 1, validated by the caller (the estimator's k: Pass@k's settings
            check and the early rule set, before the first step); not re-checked here.

    Returns:
        float32 tensor (bs,) on ``correct``'s device: each response's advantage from its group's
        (N, N_neg) (:func:`passk_group_advantage`; exact per group, looked up per response).

    Raises:
        ValueError: ``index`` and ``correct`` differ in length, or ``correct`` is not 1-D.
    """
    import torch

    if correct.dim() != 1 or len(index) != correct.shape[0]:
        raise ValueError(f"correct must be 1-D with one group id per response; got shape {tuple(correct.shape)} "
                         f"and {len(index)} ids")
    if correct.shape[0] == 0:
        return torch.zeros(0, dtype=torch.float32, device=correct.device)
    ids: dict[Hashable, int] = {}
    group_t = torch.tensor([ids.setdefault(i, len(ids)) for i in index], dtype=torch.long, device=correct.device)
    is_correct = correct.to(torch.bool)
    sizes = torch.bincount(group_t)
    negatives = torch.bincount(group_t, weights=(~is_correct).to(torch.float64)).round().to(torch.long)
    table = torch.tensor([_group_advantage(int(n), int(m), int(k)) for n, m in zip(sizes.tolist(), negatives.tolist())],
                         dtype=torch.float32, device=correct.device)  # (groups, 2): A_pos, A_neg
    return torch.where(is_correct, table[group_t, 0], table[group_t, 1])


def switch_k(entropy: float, threshold: float, k: int) -> int:
    """The k of the paper's combination: pass@1 while exploration is high, pass@k when it is low.

    Args:
        entropy: the policy's mean token entropy of the last step (nats; verl's ``actor/entropy``).
        threshold: entropy (nats) above which pass@1 is used.
        k: the pass@k of the low-entropy regime, validated by the caller (Pass@k's settings check).

    Returns:
        1 when ``entropy > threshold``, else ``k``.

    Raises:
        ValueError: a NaN or negative entropy (a measurement of the step, not a setting).
    """
    if not entropy >= 0.0:  # also catches NaN
        raise ValueError(f"entropy must be a number >= 0, got {entropy!r}")
    return 1 if entropy > threshold else int(k)


@dataclass
class EntropySwitch:
    """The entropy switch with its one piece of state: the k the next step's advantage uses.

    Source: arXiv 2508.10751 (combining pass@k and pass@1 training by policy entropy). Call
    :meth:`update` with each step's ``actor/entropy`` after the step; :attr:`active_k` is the k
    of the next step. Before the first measurement the switch uses ``initial_k`` (default 1:
    RLEC's own pass@1 advantage until the entropy says exploration is low).

    Attributes:
        k: pass@k of the low-entropy regime (validated by :meth:`rlec.algorithms.passk.PasskSettings.check`).
        threshold: entropy in nats above which pass@1 is used (validated there too).
        active_k: the k in force (state; saved with every checkpoint).
        last_entropy: the entropy of the last update (None before the first).
    """

    k: int
    threshold: float
    active_k: int = 1
    last_entropy: float | None = field(default=None)

    def __post_init__(self) -> None:
        # k and threshold are validated settings (PasskSettings.check: k >= 2, threshold >= 0), not re-checked here
        if self.active_k not in (1, self.k):
            raise ValueError(f"active_k must be 1 or k={self.k}, got {self.active_k!r}")

    def update(self, entropy: float) -> int:
        """Read a step's entropy; returns (and keeps) the k of the next step (:func:`switch_k`)."""
        self.active_k = switch_k(float(entropy), self.threshold, self.k)
        self.last_entropy = float(entropy)
        return self.active_k

    def state_dict(self) -> dict[str, Any]:
        """JSON-safe state: ``{"k", "threshold", "active_k", "last_entropy"}``."""
        return {"k": self.k, "threshold": self.threshold, "active_k": self.active_k, "last_entropy": self.last_entropy}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` output.

        Raises:
            ValueError: the saved k or threshold differ from this switch's (a changed config on resume).
        """
        if int(state["k"]) != self.k or float(state["threshold"]) != self.threshold:
            raise ValueError(f"saved entropy switch has k={state['k']}, threshold={state['threshold']}; the config has "
                             f"k={self.k}, threshold={self.threshold}")
        self.active_k = int(state["active_k"])
        self.last_entropy = None if state.get("last_entropy") is None else float(state["last_entropy"])


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased pass@k estimator 1 - C(n - c, k) / C(n, k) (Chen et al. 2021, Eq. 1).

    Args:
        n: samples drawn for the problem (>= 1).
        c: correct samples among them, 0 <= c <= n.
        k: 1 <= k <= n.

    Returns:
        The probability, in [0, 1], that k samples drawn without replacement from the n hold a
        correct one (exact rational arithmetic, rounded once).

    Raises:
        ValueError: arguments outside the ranges above (k > n has no unbiased estimate).
    """
    if int(n) != n or n < 1 or int(c) != c or not 0 <= c <= n:
        raise ValueError(f"need integers n >= 1 and 0 <= c <= n, got n={n!r}, c={c!r}")
    if int(k) != k or not 1 <= k <= n:
        raise ValueError(f"k must be an integer in [1, n={n}], got {k!r}")
    return float(1 - Fraction(math.comb(int(n - c), int(k)), math.comb(int(n), int(k))))


def pass_at_k_array(n: Iterable[float] | np.ndarray, c: Iterable[float] | np.ndarray, k: int) -> np.ndarray:
    """:func:`pass_at_k` elementwise over arrays of sample and correct counts.

    Args:
        n: array of sample counts (any shape; float counts must be whole numbers).
        c: array of correct counts, same shape.
        k: >= 1.

    Returns:
        float array of the same shape; NaN where n < k (no unbiased estimate; a problem with no
        samples also gives NaN).

    Raises:
        ValueError: shapes differ, non-integral counts, c outside [0, n], or k < 1.
    """
    n_arr, c_arr = np.asarray(n, dtype=np.float64), np.asarray(c, dtype=np.float64)
    if n_arr.shape != c_arr.shape:
        raise ValueError(f"n and c must have the same shape, got {n_arr.shape} and {c_arr.shape}")
    if int(k) != k or k < 1:
        raise ValueError(f"k must be an integer >= 1, got {k!r}")
    if np.any(n_arr != np.round(n_arr)) or np.any(c_arr != np.round(c_arr)) or np.any((c_arr < 0) | (c_arr > n_arr)):
        raise ValueError("counts must be whole numbers with 0 <= c <= n")
    out = np.full(n_arr.shape, np.nan)
    defined = n_arr >= k
    if defined.any():
        pairs, inverse = np.unique(np.stack([n_arr[defined], c_arr[defined]], axis=-1), axis=0, return_inverse=True)
        values = np.array([pass_at_k(int(a), int(b), int(k)) for a, b in pairs])
        out[defined] = values[inverse.reshape(-1)]
    return out
