"""Pass@k Training as an :class:`rlec.algorithms.base.Algorithm`: the entropy switch both loops drive.

Switched on by ``algorithm.adv_estimator=rlec_passk`` (``megatron_configs/algorithm/passk.yaml``):
the estimator is verl's registration (:mod:`rlec.verl_plugin.estimators`), so its switch is the
estimator's name; settings ``algorithm.passk`` (:class:`rlec.algorithms.passk.PasskSettings`).

Per step: :meth:`PassK.step_overrides` gives ``algorithm.passk.active_k``, the k the estimator
uses this step (k, or 1 in the switch's pass@1 regime); :meth:`PassK.observe` logs it as
``passk/active_k`` and feeds the step's ``actor/entropy`` to the switch
(:class:`rlec.algorithms.passk.EntropySwitch`), which chooses the next step's k.
"""

from __future__ import annotations

from typing import Any, Collection, Mapping

from rlec.algorithms.base import Algorithm, AlgorithmContext, Finding, StepRecord, trainer_mode
from rlec.algorithms.passk.advantage import PASSK_ESTIMATOR, EntropySwitch
from rlec.algorithms.passk.settings import SECTION, PasskSettings
from rlec.config_base import select
from rlec.settings import SettingError

ACTIVE_K_KEY = f"{SECTION}.active_k"

__all__ = ["ACTIVE_K_KEY", "PassK"]


class PassK(Algorithm):
    """Pass@k Training's entropy switch (module docstring).

    Args:
        k: the k of pass@k (>= 2).
        switch: the entropy switch, or None (pass@k every step).
    """

    name = "passk"
    section = SECTION
    switch = f"algorithm.adv_estimator={PASSK_ESTIMATOR}"
    doc = "passk.md"
    registration = "rlec.verl_plugin.estimators"  # the rlec_passk estimator verl's compute_advantage calls
    verl_keys = (SECTION,)  # verl's AlgoConfig has no passk field

    def __init__(self, k: int, switch: EntropySwitch | None) -> None:
        self.k, self.entropy_switch = int(k), switch
        self._used = self.active_k

    @property
    def active_k(self) -> int:
        """The k of the next step."""
        return self.entropy_switch.active_k if self.entropy_switch is not None else self.k

    @classmethod
    def enabled(cls, cfg: Any) -> bool:
        """``algorithm.adv_estimator == "rlec_passk"`` (verl picks estimators by name; ``algorithm=passk`` sets it)."""
        return select(cfg, "algorithm.adv_estimator") == PASSK_ESTIMATOR

    @classmethod
    def check(cls, cfg: Any) -> list[Finding]:
        """Errors: an ``algorithm.passk`` value of the wrong type or out of range
        (:meth:`PasskSettings.check`); k >= rollout.n (a group of N <= k responses has advantage 0);
        KL in the reward (correct is read as reward > 0); the switch outside rlec's trainers.
        Warning: with E3's budget, n_min <= k (the easiest prompts get advantage 0)."""
        if not cls.enabled(cfg):
            return []
        try:
            settings = PasskSettings.from_config(cfg)
        except SettingError as exc:
            return [Finding("error", exc.key, f"{exc.value!r}: {exc.rule}")]
        out = settings.check()
        n = select(cfg, "actor_rollout_ref.rollout.n", 1)
        k = settings.k
        if k is not None and k >= 2 and isinstance(n, int):
            if k >= n:
                out.append(Finding("error", f"{SECTION}.k", f"{k} must be < rollout.n = {n}: a group of N <= k responses "
                                   "has a single k-subset at most, so every advantage would be 0"))
            else:
                out += _e3_budget_warning(cfg, k)
        if select(cfg, "algorithm.use_kl_in_reward", False):
            out.append(Finding("error", "algorithm.use_kl_in_reward", "must be false with rlec_passk: correct is read as reward > 0"))
        mode = trainer_mode(cfg)
        if settings.switch_enable and not mode.startswith("rlec_"):
            out.append(Finding("error", "trainer.v1.trainer_mode",
                               f"the entropy switch runs in rlec's trainers (rlec_sync, ...), got {mode!r}"))
        return out

    @classmethod
    def verdict(cls, cfg: Any) -> str:
        """``Pass@k (k K[ with the entropy switch])``."""
        s = PasskSettings.from_config(cfg)
        return f"Pass@k (k {s.k}{' with the entropy switch' if s.switch_enable else ''})"

    @classmethod
    def table_columns(cls, metric_keys: Collection[str]) -> list[tuple[str, str, str]]:
        """The k the estimator used."""
        return [("pass@k k", "passk/active_k", "{:d}")]

    @classmethod
    def from_config(cls, cfg: Any, context: AlgorithmContext) -> "PassK":
        """Raises ValueError: :meth:`check` fails."""
        cls.raise_first_error(cfg)
        s = PasskSettings.from_config(cfg)
        switch = EntropySwitch(k=int(s.k), threshold=float(s.entropy_threshold)) if s.switch_enable else None
        return cls(int(s.k), switch)

    def step_overrides(self, step: int) -> dict[str, Any]:
        """``algorithm.passk.active_k``: the k the ``rlec_passk`` estimator uses this step (1 in the switch's pass@1 regime)."""
        return {ACTIVE_K_KEY: self.active_k}

    def observe(self, step: int, total_steps: int, record: StepRecord) -> dict[str, float]:
        """``passk/active_k``: the k the estimator used at ``step``; then the switch reads ``actor/entropy``."""
        used = self.active_k
        if self.entropy_switch is not None and record.entropy is not None:
            self.entropy_switch.update(record.entropy)
        return {"passk/active_k": float(used)}

    def state_dict(self) -> dict[str, Any]:
        """The entropy switch's state ({} without a switch)."""
        return self.entropy_switch.state_dict() if self.entropy_switch is not None else {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output ({} leaves the switch as built)."""
        if state and self.entropy_switch is not None:
            self.entropy_switch.load_state_dict(dict(state))


def _e3_budget_warning(cfg: Any, k: int) -> list[Finding]:
    """A warning when E3's budget gives the easiest prompts n_min <= k responses (their pass@k advantage is 0)."""
    from rlec.algorithms.e3.settings import E3Settings

    if not select(cfg, "rlec.e3.enable", False):
        return []
    try:
        e3 = E3Settings.from_config(cfg)
    except ValueError:
        return []  # E3's own check reports it
    if e3.budget_enable and e3.n_min <= k:
        return [Finding("warning", "rlec.e3.budget.n_min", f"{e3.n_min} <= algorithm.passk.k = {k}: the easiest prompts, "
                        "given n_min responses, get pass@k advantage 0")]
    return []
