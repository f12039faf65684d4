"""E3's per-prompt difficulty, dynamic rollout budget and length bias (arXiv 2505.18573, Sec. 3.1).

See :mod:`rlec.algorithms.e3` for the formulas and how they differ from the original code.
"""

from __future__ import annotations

import bisect
import hashlib
import math
from typing import Any, Hashable, Mapping, Sequence

__all__ = ["PromptHistory", "allocate_rollouts", "length_bias_factor"]


class PromptHistory:
    """Per-prompt correct / total counts over earlier appearances, and difficulty ranks (:mod:`rlec.algorithms.e3`, 2).

    Keys are stable prompt ids (rlec uses ``extra_info.question_id``: the RLEC copies of one
    question at different targets share its difficulty).
    """

    def __init__(self) -> None:
        self.counts: dict[str, list[int]] = {}

    def __len__(self) -> int:
        return len(self.counts)

    def update(self, keys: Sequence[Hashable], correct: Sequence[bool | float]) -> None:
        """Add one step's graded responses: ``keys[i]`` is response i's prompt id, ``correct[i]`` its outcome.

        Raises:
            ValueError: the sequences differ in length.
        """
        if len(keys) != len(correct):
            raise ValueError(f"{len(keys)} prompt ids but {len(correct)} outcomes")
        for key, ok in zip(keys, correct):
            cell = self.counts.setdefault(str(key), [0, 0])
            cell[0] += int(bool(ok))
            cell[1] += 1

    def accuracy(self, key: Hashable) -> float | None:
        """Share of correct responses of ``key`` so far, or None if it was never seen."""
        cell = self.counts.get(str(key))
        return None if cell is None else cell[0] / cell[1]

    def ranks(self, keys: Sequence[Hashable]) -> list[float | None]:
        """Difficulty rank of each key in [0, 1] (0 easiest), None for unseen keys.

        rank = (remembered prompts with a strictly higher accuracy) / (remembered prompts - 1);
        ties share the rank of the easiest of them; a history of one prompt gives 0.5.
        """
        accs = sorted(c / t for c, t in self.counts.values())
        m = len(accs)
        out: list[float | None] = []
        for key in keys:
            acc = self.accuracy(key)
            if acc is None:
                out.append(None)
            elif m == 1:
                out.append(0.5)
            else:
                out.append((m - bisect.bisect_right(accs, acc)) / (m - 1))
        return out

    def easiest(self, share: float) -> frozenset[str]:
        """The easy prompts of the length bias: exactly floor(share x m) of the m remembered prompts.

        Prompts are ordered by rank (highest accuracy first), ties broken by a stable digest of
        the key (BLAKE2b of ``str(key)``: the same in every process and run, and uncorrelated with
        how the ids are spelt, so a tie does not favour one data source), and the first
        floor(share x m) are easy. The share is exact however many prompts tie: with 100
        remembered prompts, 30 of them always solved, share 0.1 gives 10 of the 30, the same 10
        on every call (the reference biases "10 % of the prompts").

        Args:
            share: the share of remembered prompts that is easy, in [0, 1]
                (``rlec.e3.length_bias.penalty_threshold``).

        Returns:
            The easy keys (as ``str``); empty while floor(share x m) = 0.

        Raises:
            ValueError: share outside [0, 1] or NaN.
        """
        if not 0.0 <= share <= 1.0:
            raise ValueError(f"rlec.e3.length_bias.penalty_threshold (the easy share) must be in [0, 1], got {share!r}")
        count = math.floor(share * len(self.counts) + 1e-9)
        if count == 0:
            return frozenset()
        order = sorted(self.counts, key=lambda k: (-self.counts[k][0] / self.counts[k][1], _stable_digest(k)))
        return frozenset(order[:count])

    def state_dict(self) -> dict[str, Any]:
        """JSON-safe state: ``{"counts": {key: [correct, total]}}``."""
        return {"counts": {k: list(v) for k, v in self.counts.items()}}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` output."""
        self.counts = {str(k): [int(v[0]), int(v[1])] for k, v in state["counts"].items()}


def _stable_digest(key: str) -> bytes:
    """A tie-break key for ``key`` that is the same in every process (unlike ``hash``)."""
    return hashlib.blake2b(key.encode("utf-8"), digest_size=8).digest()


def _bisect(f, lo: float, hi: float, goal: float) -> float:
    """The smallest x in [lo, hi] (to float precision) with f(x) >= goal, for a continuous non-decreasing f."""
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if f(mid) < goal else (lo, mid)
    return hi


def allocate_rollouts(ranks: Sequence[float | None], n: int, n_min: int, n_max: int) -> list[int]:
    """Per-prompt rollout counts with sum exactly n * B (:mod:`rlec.algorithms.e3`, 3).

    Seen prompts get x_i = min(n_max, max(c, n_min + lam * rank_i)): first the level lam rises
    (harder prompts gain more, in proportion to their rank, as in E3) with c = n_min; only when
    every prompt of positive rank is at n_max does the floor c rise (the easiest prompts then share
    the rest equally). The shares are rounded by largest remainder, harder first on ties.

    Args:
        ranks: B difficulty ranks in [0, 1] (None = unseen prompt).
        n: the mean budget per prompt (verl's ``rollout.n``).
        n_min: least responses per seen prompt (>= 2: a group of one has no baseline).
        n_max: most responses per prompt.

    Returns:
        B counts: unseen prompts get n; seen prompts get n_min <= n_i <= n_max, non-decreasing
        in rank, summing to n x (number of seen prompts). Seen prompts all of equal rank get n.

    Raises:
        ValueError: not 2 <= n_min <= n <= n_max, or a rank outside [0, 1].
    """
    if not 2 <= n_min <= n <= n_max:
        raise ValueError(f"need 2 <= n_min <= n <= n_max, got n_min={n_min}, n={n}, n_max={n_max}")
    seen = [i for i, r in enumerate(ranks) if r is not None]
    for i in seen:
        if not 0.0 <= float(ranks[i]) <= 1.0:
            raise ValueError(f"rank of prompt {i} must be in [0, 1], got {ranks[i]!r}")
    counts = [n] * len(ranks)
    if not seen:
        return counts
    r = [float(ranks[i]) for i in seen]
    budget = n * len(seen)

    def shares(lam: float, c: float) -> list[float]:
        return [min(float(n_max), max(c, n_min + lam * x)) for x in r]

    positive = [x for x in r if x > 0]
    lam_max = (n_max - n_min) / min(positive) if positive else 0.0  # every positive rank at n_max
    if sum(shares(lam_max, n_min)) >= budget:
        lam = _bisect(lambda v: sum(shares(v, n_min)), 0.0, lam_max, budget)
        x = shares(lam, n_min)
    else:
        c = _bisect(lambda v: sum(shares(lam_max, v)), float(n_min), float(n_max), budget)
        x = shares(lam_max, c)
    floors = [min(n_max, max(n_min, int(math.floor(v + 1e-9)))) for v in x]
    left = budget - sum(floors)
    # largest remainder first; among equal remainders the harder prompt first (keeps n_i monotone in rank)
    order = sorted(range(len(seen)), key=lambda j: (-(x[j] - floors[j]), -r[j], j))
    while left > 0:
        for j in order:
            if left and floors[j] < n_max:
                floors[j] += 1
                left -= 1
    for j in sorted(range(len(seen)), key=lambda j: (r[j], -(x[j] - floors[j]), j)):
        if left < 0 and floors[j] > n_min:  # only from float error in the floors: take back from the easiest
            floors[j] -= 1
            left += 1
    for j, i in enumerate(seen):
        counts[i] = floors[j]
    return counts


def length_bias_factor(length: int, mu: float) -> float:
    """1 - mu l / (1 + mu l) = 1 / (1 + mu l): the reward multiplier of a correct easy response (E3 Sec. 3.1).

    Args:
        length: the response length l in tokens (>= 0).
        mu: the coefficient (>= 0; 0 disables).

    Returns:
        A factor in (0, 1]: a positive reward stays positive.

    Raises:
        ValueError: negative length or mu, or NaN.
    """
    if not length >= 0 or not mu >= 0:
        raise ValueError(f"need length >= 0 and mu >= 0, got {length!r}, {mu!r}")
    return 1.0 - mu * length / (1.0 + mu * length)
