"""``algorithm.passk`` of the config: Pass@k Training's settings, read and checked in one place.

:meth:`PasskSettings.check` is the only validator of the ``algorithm.passk`` values; the rules
that involve other keys (rollout.n, KL in the reward, trainer mode, E3's budget) are
:meth:`rlec.algorithms.passk.algorithm.PassK.check`. ``algorithm.passk.active_k`` is not a
setting: the trainer writes the k in force there each step (null = k).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rlec.config_base import Finding
from rlec.settings import read_section

SECTION = "algorithm.passk"

__all__ = ["PasskSettings", "PasskSwitchSettings"]


@dataclass(frozen=True)
class PasskSwitchSettings:
    """``algorithm.passk.switch``: pass@1 while ``actor/entropy`` > ``entropy_threshold`` (nats, >= 0; required when on)."""

    enable: bool = False
    entropy_threshold: float | None = None


@dataclass(frozen=True)
class PasskSettings:
    """``algorithm.passk`` (meaning and defaults: ``megatron_configs/algorithm/passk.yaml``, docs/passk.md).

    Attributes:
        k: the k of pass@k, 2 <= k < rollout.n (None: not composed, refused by :meth:`check`).
        active_k: not a setting: the k in force, written by the trainer each step (null = k).
        switch: the entropy switch.
    """

    k: int | None = None
    active_k: int | None = None
    switch: PasskSwitchSettings = field(default_factory=PasskSwitchSettings)

    @property
    def switch_enable(self) -> bool:
        """``switch.enable``."""
        return self.switch.enable

    @property
    def entropy_threshold(self) -> float | None:
        """``switch.entropy_threshold``."""
        return self.switch.entropy_threshold

    @classmethod
    def from_config(cls, cfg: Any) -> "PasskSettings":
        """Read ``algorithm.passk`` (:func:`rlec.settings.read_section`; missing keys take the defaults) without range checks.

        Raises:
            rlec.settings.SettingError: an unknown key or a value not of its type (the message starts with the full key).
        """
        return read_section(cls, cfg, SECTION)

    def check(self) -> list[Finding]:
        """One error per value out of range (keys: the full ``algorithm.passk.*`` key)."""
        out = []
        if self.k is None:
            out.append(Finding("error", f"{SECTION}.k", "rlec_passk needs it: compose algorithm=passk"))
        elif self.k < 2:
            out.append(Finding("error", f"{SECTION}.k", f"must be >= 2, got {self.k}: pass@1 is RLEC's own grpo advantage"))
        if self.active_k is not None and self.active_k < 1:
            out.append(Finding("error", f"{SECTION}.active_k", f"must be null (the trainer writes it) or >= 1, got {self.active_k}"))
        t = self.entropy_threshold
        if (self.switch_enable and t is None) or (t is not None and not t >= 0):
            out.append(Finding("error", f"{SECTION}.switch.entropy_threshold", f"must be a number >= 0 (nats), got {t}"))
        return out
