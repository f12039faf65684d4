"""``rlec.e3`` of the config: E3's settings, read and checked in one place (:class:`E3Settings`).

:meth:`E3Settings.check` is the only validator of the ``rlec.e3`` values; the cross-key rules
(rollout.n, trainer mode, agent loop, T_0) are :meth:`rlec.algorithms.e3.algorithm.E3.check`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rlec.algorithms.base import wrong_type
from rlec.config_base import Finding, select

# the agent loop rlec registers in verl to sample at the step's temperature (rollout.agent.default_agent_loop)
E3_AGENT_LOOP = "rlec_e3_agent"

__all__ = ["E3_AGENT_LOOP", "E3Settings"]


@dataclass(frozen=True)
class E3Settings:
    """``rlec.e3`` of the config, checked (meaning and defaults: megatron_configs/rlec.yaml, docs/e3.md).

    Each part has its own switch under ``enable``: ``temperature.enable``, ``budget.enable``,
    ``length_bias.enable`` (ablations turn one off).
    """

    enable: bool = False
    temperature_enable: bool = True
    t_min: float | None = 0.5
    t_max: float | None = 1.5
    init_steps: int = 5
    target_entropy: float | None = None
    vocab_size: int | None = None
    anneal: bool = True
    anneal_start: float = 0.6
    anneal_final: float = 0.9
    budget_enable: bool = True
    n_min: int = 4
    n_max: int = 16
    length_bias_enable: bool = True
    mu: float = 0.001
    penalty_threshold: float = 0.1

    # fields whose explicit null means "no bound" (a missing key keeps the default above)
    NULLABLE = ("t_min", "t_max")

    # field -> (key under rlec.e3, type)
    KEYS = {
        "enable": ("enable", bool),
        "temperature_enable": ("temperature.enable", bool),
        "t_min": ("temperature.min", float),
        "t_max": ("temperature.max", float),
        "init_steps": ("temperature.init_steps", int),
        "target_entropy": ("temperature.target_entropy", float),
        "vocab_size": ("temperature.vocab_size", int),
        "anneal": ("temperature.anneal.enable", bool),
        "anneal_start": ("temperature.anneal.start", float),
        "anneal_final": ("temperature.anneal.final_factor", float),
        "budget_enable": ("budget.enable", bool),
        "n_min": ("budget.n_min", int),
        "n_max": ("budget.n_max", int),
        "length_bias_enable": ("length_bias.enable", bool),
        "mu": ("length_bias.mu", float),
        "penalty_threshold": ("length_bias.penalty_threshold", float),
    }

    @classmethod
    def from_config(cls, cfg: Any) -> "E3Settings":
        """Read ``rlec.e3.*`` from a composed config or nested dict (missing keys take the defaults above).

        Raises:
            ValueError: a value outside its range (:meth:`check`), or not of its type: a bool that is
                not true/false, a non-whole int, a non-finite float (the message names the key).
        """
        values = {}
        for name, (key, kind) in cls.KEYS.items():
            raw = select(cfg, f"rlec.e3.{key}")
            if raw is None:
                if name in cls.NULLABLE and _is_explicit_null(cfg, f"rlec.e3.{key}"):
                    values[name] = None
                continue
            problem = wrong_type(raw, kind)
            if problem is not None:
                raise ValueError(f"rlec.e3.{key}: {problem}")
            values[name] = kind(float(raw)) if kind is int else kind(raw)
        settings = cls(**values)
        for finding in settings.check():
            raise ValueError(finding.message)
        return settings

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
        return [Finding("error", "rlec.e3", f"rlec.e3.{key}: {message}") for ok, key, message in checks if not ok]


def _is_explicit_null(cfg: Any, dotted: str) -> bool:
    """Whether ``dotted`` is present in ``cfg`` and holds None (``select`` treats both as missing)."""
    parent, _, leaf = dotted.rpartition(".")
    node = select(cfg, parent)
    try:
        return node is not None and leaf in node and node[leaf] is None
    except TypeError:
        return False
