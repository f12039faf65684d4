"""``rlec.e3`` of the config: E3's settings as a typed tree, read by the one generic reader and checked in one place.

:func:`rlec.settings.read_section` reads the tree (:class:`E3Settings`: its ``temperature``,
``budget`` and ``length_bias`` parts, each with its own ``enable``), refusing an unknown key or a
value of the wrong type; :meth:`E3Settings.check` is the only validator of the ranges; the cross-key
rules (rollout.n, trainer mode, agent loop, T_0) are :meth:`rlec.algorithms.e3.algorithm.E3.check`.
One default per value: ``megatron_configs/recipe.yaml`` spells each out for users, the dataclasses
below hold the same ones for configs without them (a test pins them equal).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rlec.config_base import Finding
from rlec.settings import read_section

SECTION = "rlec.e3"
# the agent loop rlec registers in verl to sample at the step's temperature (rollout.agent.default_agent_loop)
E3_AGENT_LOOP = "rlec_e3_agent"

__all__ = ["E3_AGENT_LOOP", "E3AnnealSettings", "E3BudgetSettings", "E3LengthBiasSettings", "E3Settings",
           "E3TemperatureSettings"]


@dataclass(frozen=True)
class E3AnnealSettings:
    """``rlec.e3.temperature.anneal``: H* anneals from ``start`` of training to ``final_factor`` x H*_0."""

    enable: bool = True
    start: float = 0.6
    final_factor: float = 0.9


@dataclass(frozen=True)
class E3TemperatureSettings:
    """``rlec.e3.temperature``: the entropy-targeting temperature (``min`` / ``max``: rlec's safety bound, null = open)."""

    enable: bool = True
    min: float | None = 0.5
    max: float | None = 1.5
    init_steps: int = 5
    target_entropy: float | None = None
    vocab_size: int | None = None
    anneal: E3AnnealSettings = field(default_factory=E3AnnealSettings)


@dataclass(frozen=True)
class E3BudgetSettings:
    """``rlec.e3.budget``: per-prompt rollouts in [n_min, n_max] by difficulty rank."""

    enable: bool = True
    n_min: int = 4
    n_max: int = 16


@dataclass(frozen=True)
class E3LengthBiasSettings:
    """``rlec.e3.length_bias``: reward x 1 / (1 + mu l) on correct responses of the easiest ``penalty_threshold`` share."""

    enable: bool = True
    mu: float = 0.001
    penalty_threshold: float = 0.1


@dataclass(frozen=True)
class E3Settings:
    """``rlec.e3`` of the config (meaning and defaults: megatron_configs/recipe.yaml, docs/e3.md).

    Each part has its own switch under ``enable``: ``temperature.enable``, ``budget.enable``,
    ``length_bias.enable`` (ablations turn one off). The flat properties below name the values the
    controller reads.
    """

    enable: bool = False
    temperature: E3TemperatureSettings = field(default_factory=E3TemperatureSettings)
    budget: E3BudgetSettings = field(default_factory=E3BudgetSettings)
    length_bias: E3LengthBiasSettings = field(default_factory=E3LengthBiasSettings)

    @classmethod
    def read(cls, cfg: Any) -> "E3Settings":
        """Read ``rlec.e3`` (:func:`rlec.settings.read_section`; missing keys take the defaults), without range checks.

        Raises:
            SettingError: an unknown key or a value of the wrong type (the message starts with the full key).
        """
        return read_section(cls, cfg, SECTION)

    @classmethod
    def from_config(cls, cfg: Any) -> "E3Settings":
        """Read and check ``rlec.e3`` (:meth:`read`, then :meth:`check`).

        Raises:
            ValueError: a value of the wrong type (:class:`rlec.settings.SettingError`) or out of range
                (:meth:`check`'s first error); the message names the full key.
        """
        return cls.read(cfg).checked()

    def checked(self) -> "E3Settings":
        """These settings when :meth:`check` finds nothing (what :meth:`from_config` returns; the algorithm reads its
        section once, ``run.section(E3Settings, SECTION)``, and checks it here).

        Raises:
            ValueError: :meth:`check`'s first error (the message names the full key).
        """
        for finding in self.check():
            raise ValueError(finding.message)
        return self

    # the values the controller and the checks read, by their short names
    temperature_enable = property(lambda self: self.temperature.enable)
    t_min = property(lambda self: self.temperature.min)
    t_max = property(lambda self: self.temperature.max)
    init_steps = property(lambda self: self.temperature.init_steps)
    target_entropy = property(lambda self: self.temperature.target_entropy)
    vocab_size = property(lambda self: self.temperature.vocab_size)
    anneal = property(lambda self: self.temperature.anneal.enable)
    anneal_start = property(lambda self: self.temperature.anneal.start)
    anneal_final = property(lambda self: self.temperature.anneal.final_factor)
    budget_enable = property(lambda self: self.budget.enable)
    n_min = property(lambda self: self.budget.n_min)
    n_max = property(lambda self: self.budget.n_max)
    length_bias_enable = property(lambda self: self.length_bias.enable)
    mu = property(lambda self: self.length_bias.mu)
    penalty_threshold = property(lambda self: self.length_bias.penalty_threshold)

    def temperature_in_bounds(self, temperature: float) -> bool:
        """Whether T lies in the safety bound [``temperature.min``, ``temperature.max``] (a null side is open)."""
        return (self.t_min is None or temperature >= self.t_min) and (self.t_max is None or temperature <= self.t_max)

    def check(self) -> list[Finding]:
        """One error per ``rlec.e3`` value out of range (key ``rlec.e3``; the message names the full key)."""
        checks = [
            (all(t is None or t > 0 for t in (self.t_min, self.t_max))
             and (self.t_min is None or self.t_max is None or self.t_min <= self.t_max),
             "temperature.min/max", f"need 0 < min <= max (each a number or null), got {self.t_min}, {self.t_max}"),
            (self.init_steps >= 1, "temperature.init_steps", f"must be >= 1, got {self.init_steps}"),
            (self.target_entropy is None or self.target_entropy > 0, "temperature.target_entropy",
             f"must be > 0 nats or null, got {self.target_entropy}"),
            (self.vocab_size is None or self.vocab_size >= 3, "temperature.vocab_size", f"must be >= 3 or null, got {self.vocab_size}"),
            (0 <= self.anneal_start <= 1, "temperature.anneal.start", f"must be in [0, 1], got {self.anneal_start}"),
            (0 < self.anneal_final <= 1, "temperature.anneal.final_factor", f"must be in (0, 1], got {self.anneal_final}"),
            (2 <= self.n_min <= self.n_max, "budget.n_min/n_max", f"need 2 <= n_min <= n_max, got {self.n_min}, {self.n_max}"),
            (self.mu >= 0, "length_bias.mu", f"must be >= 0, got {self.mu}"),
            (0 <= self.penalty_threshold <= 1, "length_bias.penalty_threshold", f"must be in [0, 1], got {self.penalty_threshold}"),
        ]
        return [Finding("error", SECTION, f"{SECTION}.{key}: {message}") for ok, key, message in checks if not ok]

