"""E3's entropy-targeting sampling temperature (arXiv 2505.18573, Sec. 3.2; see :mod:`rlec.algorithms.e3`).

After step t, with H_t the policy entropy of that step at temperature T_t, V the vocabulary size
and H*(t) the (annealed) target::

    T_{t+1} = T_t * (1 + T_t * ln(H*(t) / H_t) / (ln V + ln ln V))

Entropy above the target lowers the temperature, below it raises it; the step size grows with T
(a hotter policy's entropy reacts more strongly to T).

The clip to [T_min, T_max] is not part of the method (the paper and its code never clip): it is
rlec's configurable safety bound (``rlec.e3.temperature.min`` / ``.max``, 0.5 / 1.5 by default;
null = that side unbounded). Why it is on by default: at T = 1 with Qwen3's vocabulary a step
moves T by under 2 % while H_t is within 25 % of the target, so the bound only acts after a run of
far-off-target steps; but a collapsed entropy (H -> 0, H* = 1 nat) multiplies T by ~2.3 per step,
and an entropy far above the target can drive the unclipped update to T <= 0, which neither vLLM
nor the log-prob division accepts. ``e3/temperature_clipped`` reports every step where the bound
changed T. With no bound on a side, an update that leaves (0, inf) raises instead of inventing one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping

__all__ = ["MIN_ENTROPY", "TemperatureScheduler", "anneal_factor", "temperature_update"]

MIN_ENTROPY = 1e-8  # nats; a fully collapsed policy (H = 0) is treated as this (T jumps up; to T_max if bounded)


def anneal_factor(step: int, total_steps: int, start: float = 0.6, final: float = 0.9) -> float:
    """The factor H*(t) / H*_0 of the annealed entropy target (E3 Sec. 3.2).

    Args:
        step: the global step t (from 1).
        total_steps: the run's total steps (>= 1).
        start: fraction of training after which the target anneals, in [0, 1].
        final: the factor reached at the last step, in (0, 1].

    Returns:
        1 up to ``start * total_steps``, then ``(1 - final) * 0.5 * (1 + cos(pi * progress)) + final``,
        progress = (t - start * total) / (total - start * total) clipped to [0, 1].

    Raises:
        ValueError: values outside the ranges above.
    """
    if total_steps < 1 or not 0.0 <= start <= 1.0 or not 0.0 < final <= 1.0:
        raise ValueError(f"need total_steps >= 1, start in [0, 1], final in (0, 1]; got {total_steps}, {start}, {final}")
    begin = start * total_steps
    if step <= begin or total_steps <= begin:
        return 1.0
    progress = min(1.0, (step - begin) / (total_steps - begin))
    return (1.0 - final) * 0.5 * (1.0 + math.cos(math.pi * progress)) + final


def temperature_update(temperature: float, entropy: float, target: float, vocab_size: int) -> float:
    """One unclipped step T * (1 + T ln(H* / H) / (ln V + ln ln V)) (E3 Sec. 3.2).

    Args:
        temperature: the step's temperature T > 0.
        entropy: the step's policy entropy H >= 0 in nats (0 is taken as :data:`MIN_ENTROPY`).
        target: the target entropy H* > 0 in nats.
        vocab_size: V >= 3 (ln ln V must be positive).

    Returns:
        The next temperature (may be negative for absurd inputs; callers clip).

    Raises:
        ValueError: values outside the ranges above, or NaN.
    """
    if not temperature > 0 or not target > 0 or not entropy >= 0 or vocab_size < 3:
        raise ValueError(f"need T > 0, H* > 0, H >= 0, V >= 3; got T={temperature!r}, H*={target!r}, "
                         f"H={entropy!r}, V={vocab_size!r}")
    scale = math.log(vocab_size) + math.log(math.log(vocab_size))
    return temperature * (1.0 + temperature * math.log(target / max(entropy, MIN_ENTROPY)) / scale)


@dataclass
class TemperatureScheduler:
    """The entropy-targeting sampling temperature, with its state (formula: module docstring).

    Attributes:
        vocab_size: V, the policy's output vocabulary (the model's ``vocab_size``).
        temperature: the temperature in force (state; starts at T_0).
        t_min, t_max: the safety bound of T (module docstring); None leaves that side open.
        init_steps: steps whose mean entropy becomes H*_0 when ``target_entropy`` is None.
        target_entropy: H*_0 when configured (nats); then the temperature moves from step 1.
        anneal: whether the target anneals from ``anneal_start`` of training to ``anneal_final`` x H*_0.
        init_entropies: entropies collected during the first steps (state).
        base_target: H*_0 once known (state).
    """

    vocab_size: int
    temperature: float = 1.0
    t_min: float | None = 0.5
    t_max: float | None = 1.5
    init_steps: int = 5
    target_entropy: float | None = None
    anneal: bool = True
    anneal_start: float = 0.6
    anneal_final: float = 0.9
    init_entropies: list[float] = field(default_factory=list)
    base_target: float | None = None
    clipped: bool = field(default=False, compare=False)  # whether the last update was changed by the bound (not state)

    def __post_init__(self) -> None:
        if self.vocab_size < 3:
            raise ValueError(f"vocab_size must be >= 3, got {self.vocab_size!r}")
        low = 0.0 if self.t_min is None else self.t_min
        high = math.inf if self.t_max is None else self.t_max
        bounds_ok = (self.t_min is None or self.t_min > 0) and (self.t_max is None or self.t_max > 0) and low <= high
        if not bounds_ok or not low <= self.temperature <= high or not 0 < self.temperature < math.inf:
            raise ValueError(f"need 0 < t_min <= temperature <= t_max (a null bound is open), got {self.t_min}, "
                             f"{self.temperature}, {self.t_max}")
        if self.init_steps < 1:
            raise ValueError(f"init_steps must be >= 1, got {self.init_steps}")
        if self.target_entropy is not None:
            if not self.target_entropy > 0:
                raise ValueError(f"target_entropy must be > 0 nats or null, got {self.target_entropy!r}")
            self.base_target = float(self.target_entropy)
        anneal_factor(1, 1, self.anneal_start, self.anneal_final)  # validates the annealing settings

    def target(self, step: int, total_steps: int) -> float | None:
        """H*(step), or None while the first ``init_steps`` entropies are being collected."""
        if self.base_target is None:
            return None
        factor = anneal_factor(step, total_steps, self.anneal_start, self.anneal_final) if self.anneal else 1.0
        return self.base_target * factor

    def update(self, entropy: float, step: int, total_steps: int) -> float:
        """Read step ``step``'s entropy (taken at :attr:`temperature`); returns the next step's temperature.

        The unclipped update is clipped to the configured bound (sides that are None are open);
        :attr:`clipped` tells whether the bound changed it.

        Raises:
            ValueError: entropy is NaN, infinite or negative; or, with no bound on that side, the
                update reached T <= 0 or an infinite T (the message names ``rlec.e3.temperature.min/max``).
        """
        if not 0.0 <= entropy < math.inf:
            raise ValueError(f"entropy must be a finite number >= 0 (nats), got {entropy!r}")
        if self.base_target is None:
            self.init_entropies.append(float(entropy))
            if len(self.init_entropies) >= self.init_steps:
                self.base_target = sum(self.init_entropies) / len(self.init_entropies)
            return self.temperature
        target = self.target(step, total_steps)
        new = temperature_update(self.temperature, float(entropy), target, self.vocab_size)
        bounded = new
        if self.t_min is not None:
            bounded = max(self.t_min, bounded)
        if self.t_max is not None:
            bounded = min(self.t_max, bounded)
        if not 0 < bounded < math.inf:
            raise ValueError(f"E3 temperature update at step {step} gave T = {new!r} from T = {self.temperature}, "
                             f"H = {entropy} nats, H* = {target} nats: not a usable sampling temperature; set "
                             f"rlec.e3.temperature.min/max (now {self.t_min}, {self.t_max}) to bound it")
        self.clipped = bounded != new
        self.temperature = bounded
        return self.temperature

    def state_dict(self) -> dict[str, Any]:
        """JSON-safe state: ``{"temperature", "init_entropies", "base_target"}``."""
        return {"temperature": self.temperature, "init_entropies": list(self.init_entropies), "base_target": self.base_target}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` output (a configured ``target_entropy`` still wins)."""
        self.temperature = float(state["temperature"])
        self.init_entropies = [float(h) for h in state["init_entropies"]]
        base = state.get("base_target")
        self.base_target = float(self.target_entropy) if self.target_entropy is not None else (None if base is None else float(base))
