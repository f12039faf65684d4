"""``algorithm.passk`` of the config: Pass@k Training's settings, read and checked in one place.

:meth:`PasskSettings.check` is the only validator of the ``algorithm.passk`` values; the rules
that involve other keys (rollout.n, KL in the reward, trainer mode, E3's budget) are
:meth:`rlec.algorithms.passk.algorithm.PassK.check`. ``algorithm.passk.active_k`` is not a
setting: the trainer writes the k in force there each step (null = k).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rlec.algorithms.base import wrong_type
from rlec.config_base import Finding, select

SECTION = "algorithm.passk"

__all__ = ["PasskSettings"]


@dataclass(frozen=True)
class PasskSettings:
    """``algorithm.passk`` (meaning and defaults: ``megatron_configs/algorithm/passk.yaml``, docs/passk.md).

    Attributes:
        k: the k of pass@k, 2 <= k < rollout.n (None: not composed, refused by :meth:`check`).
        switch_enable: the entropy switch (pass@1 while ``actor/entropy`` > the threshold).
        entropy_threshold: the switch's threshold in nats (>= 0; required when the switch is on).
    """

    k: int | None = None
    switch_enable: bool = False
    entropy_threshold: float | None = None

    # field -> (key under algorithm.passk, type)
    KEYS = {
        "k": ("k", int),
        "switch_enable": ("switch.enable", bool),
        "entropy_threshold": ("switch.entropy_threshold", float),
    }

    @classmethod
    def from_config(cls, cfg: Any) -> "PasskSettings":
        """Read ``algorithm.passk.*`` (missing keys take the defaults above) without range checks.

        Raises:
            ValueError: a value not of its type (the message starts with the full key).
        """
        values = {}
        for name, (key, kind) in cls.KEYS.items():
            raw = select(cfg, f"{SECTION}.{key}")
            if raw is None:
                continue
            problem = wrong_type(raw, kind)
            if problem is not None:
                raise ValueError(f"{SECTION}.{key}: {problem}")
            values[name] = kind(float(raw)) if kind is int else kind(raw)
        return cls(**values)

    def check(self) -> list[Finding]:
        """One error per value out of range (keys: the full ``algorithm.passk.*`` key)."""
        out = []
        if self.k is None:
            out.append(Finding("error", f"{SECTION}.k", "rlec_passk needs it: compose algorithm=passk"))
        elif self.k < 2:
            out.append(Finding("error", f"{SECTION}.k", f"must be >= 2, got {self.k}: pass@1 is RLEC's own grpo advantage"))
        t = self.entropy_threshold
        if (self.switch_enable and t is None) or (t is not None and t < 0):
            out.append(Finding("error", f"{SECTION}.switch.entropy_threshold", f"must be a number >= 0 (nats), got {t}"))
        return out
