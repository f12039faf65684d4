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

from rlec.algorithms.e3.settings import E3TemperatureSettings

__all__ = ["MIN_ENTROPY", "TemperatureScheduler", "anneal_factor", "temperature_update"]

_DEFAULT = E3TemperatureSettings()  # the one home of the defaults (recipe.yaml spells the same ones out)
MIN_ENTROPY = 1e-8  # nats; a fully collapsed policy (H = 0) is treated as this (T jumps up; to T_max if bounded)


def anneal_factor(step: int, total_steps: int, start: float = _DEFAULT.anneal.start,
                  final: float = _DEFAULT.anneal.final_factor) -> float:
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

    Built from checked settings (:meth:`from_settings`; :meth:`rlec.algorithms.e3.E3Settings.check`
    is their only validator); the defaults are :class:`rlec.algorithms.e3.settings.E3TemperatureSettings`'.

    Attributes:
        vocab_size: V, the policy's output vocabulary (the model's ``vocab_size``, >= 3).
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
    t_min: float | None = _DEFAULT.min
    t_max: float | None = _DEFAULT.max
    init_steps: int = _DEFAULT.init_steps
    target_entropy: float | None = _DEFAULT.target_entropy
    anneal: bool = _DEFAULT.anneal.enable
    anneal_start: float = _DEFAULT.anneal.start
    anneal_final: float = _DEFAULT.anneal.final_factor
    init_entropies: list[float] = field(default_factory=list)
    base_target: float | None = None
    clipped: bool = field(default=False, compare=False)  # whether the last update was changed by the bound (not state)

    def __post_init__(self) -> None:
        if self.vocab_size < 3:  # the model's V reaches here unchecked (rlec.e3.temperature.vocab_size is checked)
            raise ValueError(f"vocab_size must be >= 3, got {self.vocab_size!r}")
        if self.target_entropy is not None:
            self.base_target = float(self.target_entropy)

    @classmethod
    def from_settings(cls, settings: E3TemperatureSettings, vocab_size: int, temperature: float) -> "TemperatureScheduler":
        """The scheduler of checked ``rlec.e3.temperature`` settings, vocabulary size V and T_0."""
        return cls(vocab_size=vocab_size, temperature=temperature, t_min=settings.min, t_max=settings.max,
                   init_steps=settings.init_steps, target_entropy=settings.target_entropy, anneal=settings.anneal.enable,
                   anneal_start=settings.anneal.start, anneal_final=settings.anneal.final_factor)

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
