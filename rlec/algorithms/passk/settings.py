"""``rlec.passk`` of the config: Pass@k Training's settings, their one home, read and checked in one place.

:meth:`PasskSettings.check` is the only validator of the ``rlec.passk`` values; the rules that
involve other keys (rollout.n, KL in the reward, trainer mode, E3's budget, verl's copy below) are
:meth:`rlec.algorithms.passk.algorithm.PassK.check`.

verl's side (``megatron_configs/algorithm/passk.yaml`` sets it from the home; nothing reads it back
as a setting): verl selects the estimator by name (``algorithm.adv_estimator=rlec_passk``) and
hands the estimator only its ``algorithm`` section, so the overlay puts there what the estimator
reads (:data:`VERL_COPY`): ``algorithm.passk.k: ${rlec.passk.k}`` (an interpolation) and
``algorithm.passk.active_k``, the runtime slot the trainer writes the k in force into each step
(null = k; not a setting).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from rlec.config_base import Finding

SECTION = "rlec.passk"
# what the rlec_passk estimator reads from verl's algorithm section: k (${rlec.passk.k}) and the runtime active_k
VERL_COPY = "algorithm.passk"
ACTIVE_K_KEY = f"{VERL_COPY}.active_k"

__all__ = ["ACTIVE_K_KEY", "SECTION", "VERL_COPY", "PasskSettings", "PasskSwitchSettings"]


@dataclass(frozen=True)
class PasskSwitchSettings:
    """``rlec.passk.switch``: pass@1 while ``actor/entropy`` > ``entropy_threshold`` (nats, >= 0; required when on)."""

    enable: bool = False
    entropy_threshold: float | None = None


@dataclass(frozen=True)
class PasskSettings:
    """``rlec.passk`` (meaning and defaults: ``megatron_configs/algorithm/passk.yaml``, docs/passk.md).

    Attributes:
        enable: the switch (``algorithm=passk`` sets it, with verl's ``algorithm.adv_estimator=rlec_passk``).
        k: the k of pass@k, 2 <= k < rollout.n (None: not composed, refused by :meth:`check`).
        switch: the entropy switch.
    """

    enable: bool = False
    k: int | None = None
    switch: PasskSwitchSettings = field(default_factory=PasskSwitchSettings)

    @property
    def switch_enable(self) -> bool:
        """``switch.enable``."""
        return self.switch.enable

    @property
    def entropy_threshold(self) -> float | None:
        """``switch.entropy_threshold``."""
        return self.switch.entropy_threshold

    def check(self) -> list[Finding]:
        """One error per value out of range (keys: the full ``rlec.passk.*`` key)."""
        out = []
        if self.k is None:
            out.append(Finding("error", f"{SECTION}.k", "Pass@k needs it: compose algorithm=passk"))
        elif self.k < 2:
            out.append(Finding("error", f"{SECTION}.k", f"must be >= 2, got {self.k}: pass@1 is RLEC's own grpo advantage"))
        t = self.entropy_threshold
        if (self.switch_enable and t is None) or (t is not None and not t >= 0):
            out.append(Finding("error", f"{SECTION}.switch.entropy_threshold", f"must be a number >= 0 (nats), got {t}"))
        return out
