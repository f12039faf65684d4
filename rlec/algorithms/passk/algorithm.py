"""Pass@k Training as an :class:`rlec.algorithms.base.Algorithm`: the entropy switch verl's trainer drives.

Switched on by ``rlec.passk.enable``; settings ``rlec.passk`` (:class:`rlec.algorithms.passk.PasskSettings`,
their one home). ``algorithm=passk`` (``megatron_configs/algorithm/passk.yaml``) sets the switch and,
from the home, verl's side: ``algorithm.adv_estimator=rlec_passk`` (verl selects the estimator,
:mod:`rlec.verl_plugin.estimators`, by name) and ``algorithm.passk`` (what the estimator reads, as
verl hands it only ``config.algorithm``: ``k: ${rlec.passk.k}`` and the runtime slot ``active_k``).
:meth:`PassK.check` refuses a verl side that disagrees with the home.

Per step: :meth:`PassK.step_overrides` gives ``algorithm.passk.active_k``, the k the estimator
uses this step (k, or 1 in the switch's pass@1 regime); :meth:`PassK.observe` logs it as
``passk/active_k`` and feeds the step's ``actor/entropy`` to the switch
(:class:`rlec.algorithms.passk.EntropySwitch`), which chooses the next step's k.
"""

from __future__ import annotations

from typing import Any, Collection, Mapping

from rlec.algorithms.base import Algorithm, AlgorithmContext, Finding, RunConfig, StepRecord, entropy_findings
from rlec.algorithms.passk.advantage import PASSK_ESTIMATOR, EntropySwitch
from rlec.algorithms.passk.settings import ACTIVE_K_KEY, SECTION, VERL_COPY, PasskSettings
from rlec.run_config import VerlKeys
from rlec.settings import SettingError

ESTIMATOR_KEY = VerlKeys.key_of("adv_estimator")

__all__ = ["ACTIVE_K_KEY", "PassK"]


class PassK(Algorithm):
    """Pass@k Training's entropy switch (module docstring).

    Args:
        k: the k of pass@k (>= 2).
        switch: the entropy switch, or None (pass@k every step).
    """

    name = "passk"
    section = SECTION
    switch = f"{SECTION}.enable=true"
    doc = "passk.md"
    verl_keys = (VERL_COPY,)  # what the estimator reads from verl's algorithm section (AlgoConfig has no passk field)
    verl_values = {ESTIMATOR_KEY: PASSK_ESTIMATOR}  # verl selects the estimator by name; check() refuses a mismatch

    def __init__(self, k: int, switch: EntropySwitch | None) -> None:
        self.k, self.entropy_switch = int(k), switch
        self._used = self.active_k

    @property
    def active_k(self) -> int:
        """The k of the next step."""
        return self.entropy_switch.active_k if self.entropy_switch is not None else self.k

    @classmethod
    def enabled(cls, run: RunConfig) -> bool:
        """``rlec.passk.enable`` (the ``algorithm=passk`` overlay sets it)."""
        return run.enabled(SECTION)

    @classmethod
    def settings_of(cls, run: RunConfig) -> PasskSettings:
        """``rlec.passk``, read once per ``run`` (types checked; ranges: :meth:`PasskSettings.check`).

        Raises:
            rlec.settings.SettingError: an unknown key or a value not of its type.
        """
        return run.section(PasskSettings, SECTION)

    @classmethod
    def check(cls, run: RunConfig) -> list[Finding]:
        """Errors: verl's estimator ``rlec_passk`` without the switch, or the switch with another
        estimator; an ``rlec.passk`` value of the wrong type or out of range (:meth:`PasskSettings.check`);
        verl's copy ``algorithm.passk.k`` not ``rlec.passk.k``; ``algorithm.passk.active_k`` (the
        trainer's runtime slot) not null or an integer in [1, rollout.n]; k >= rollout.n (a group of
        N <= k responses has advantage 0); KL in the reward (correct is read as reward > 0); the
        switch outside rlec's trainers or with verl's bypass mode (no ``actor/entropy``). Warning: with E3's budget, n_min <= k (the easiest prompts get
        advantage 0)."""
        keys = run.keys
        estimator = keys.adv_estimator
        if not cls.enabled(run):
            if estimator == PASSK_ESTIMATOR:
                return [Finding("error", ESTIMATOR_KEY, f"{PASSK_ESTIMATOR} without {SECTION}.enable: Pass@k's settings "
                                f"live in {SECTION}; compose algorithm=passk")]
            return []
        try:
            settings = cls.settings_of(run)
        except SettingError as exc:
            return [Finding("error", exc.key, f"{exc.value!r}: {exc.rule}")]
        out = settings.check()
        if estimator != PASSK_ESTIMATOR:
            out.append(Finding("error", ESTIMATOR_KEY, f"is {estimator!r}; {SECTION}.enable needs verl's estimator "
                               f"{PASSK_ESTIMATOR} (megatron_configs/algorithm/passk.yaml sets it)"))
        out += _verl_copy_findings(run, settings)
        n = keys.rollout_n
        k = settings.k
        if k is not None and k >= 2 and isinstance(n, int):
            if k >= n:
                out.append(Finding("error", f"{SECTION}.k", f"{k} must be < rollout.n = {n}: a group of N <= k responses "
                                   "has a single k-subset at most, so every advantage would be 0"))
            else:
                out += _e3_budget_warning(run, k)
        if keys.use_kl_in_reward:
            out.append(Finding("error", "algorithm.use_kl_in_reward", "must be false with rlec_passk: correct is read as reward > 0"))
        mode = run.trainer_mode
        if settings.switch_enable:
            out += entropy_findings(run, "rlec.passk.switch")
        if settings.switch_enable and not mode.startswith("rlec_"):
            out.append(Finding("error", "trainer.v1.trainer_mode",
                               f"the entropy switch runs in rlec's trainers (rlec_sync, ...), got {mode!r}"))
        return out

    @classmethod
    def verdict(cls, run: RunConfig) -> str:
        """``Pass@k (k K[ with the entropy switch])``."""
        s = cls.settings_of(run)
        return f"Pass@k (k {s.k}{' with the entropy switch' if s.switch_enable else ''})"

    @classmethod
    def table_columns(cls, metric_keys: Collection[str]) -> list[tuple[str, str, str]]:
        """The k the estimator used."""
        return [("pass@k k", "passk/active_k", "{:d}")]

    @classmethod
    def from_config(cls, run: RunConfig, context: AlgorithmContext) -> "PassK":
        """Raises ValueError: :meth:`check` fails."""
        cls.raise_first_error(run)
        s = cls.settings_of(run)
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


def _verl_copy_findings(run: RunConfig, settings: PasskSettings) -> list[Finding]:
    """Errors when verl's ``algorithm.passk`` (what the estimator reads) disagrees with the home: ``k`` not
    ``rlec.passk.k`` (the overlay interpolates it; an override of the copy would train another k than the
    one checked, logged and resumed), ``active_k`` not null or an integer in [1, rollout.n]."""
    out = []
    copy = run.plain(VERL_COPY)  # verl's dataclasses know no algorithm.passk
    copied = copy.get("k")
    if settings.k is not None and copied != settings.k:
        out.append(Finding("error", f"{VERL_COPY}.k", f"is {copied!r}, not {SECTION}.k = {settings.k}: it is verl's copy "
                           f"of the setting (${{{SECTION}.k}} in megatron_configs/algorithm/passk.yaml); set {SECTION}.k"))
    active, n = copy.get("active_k"), run.keys.rollout_n
    if active is not None:
        bad = isinstance(active, bool) or not isinstance(active, int) or active < 1
        if bad or (isinstance(n, int) and not isinstance(n, bool) and active > n):
            out.append(Finding("error", ACTIVE_K_KEY, f"{active!r} must be an integer in [1, actor_rollout_ref.rollout.n "
                               f"= {n}], or null (k): the k of pass@k this step, which a group of n responses bounds"))
    return out


def _e3_budget_warning(run: RunConfig, k: int) -> list[Finding]:
    """A warning when E3's budget gives the easiest prompts n_min <= k responses (their pass@k advantage is 0)."""
    from rlec.algorithms.e3.algorithm import E3

    if not E3.enabled(run):
        return []
    try:
        e3 = E3.settings_of(run)  # the section E3's own check read (run.section parses it once)
    except ValueError:
        return []  # E3's own check reports it
    if e3.budget_enable and e3.n_min <= k:
        return [Finding("warning", "rlec.e3.budget.n_min", f"{e3.n_min} <= {SECTION}.k = {k}: the easiest prompts, "
                        "given n_min responses, get pass@k advantage 0")]
    return []
