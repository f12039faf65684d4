"""E3 as an :class:`rlec.algorithms.base.Algorithm`: the per-step behaviour verl's trainer drives.

Switched on by ``rlec.e3.enable`` (``megatron_configs/algorithm/e3.yaml``); settings ``rlec.e3``
(:class:`rlec.algorithms.e3.settings.E3Settings`). Per step t (formulas: :mod:`rlec.algorithms.e3`):

- :meth:`E3.plan_rollout`: the controller's per-prompt budget n_i and the step's temperature
  T_t (``plan.temperature``, its one carrier: the rollout samples at it and divide the old, reference
  and new log-probs' logits by it; in verl the ``rlec_e3_agent`` agent loop samples at it, because
  every rollout worker has its own config copy); each prompt carries its history key
  (``rlec_e3_prompt``) and length-bias coefficient (``rlec_e3_length_mu``);
- :meth:`E3.adjust_reward`: the length bias of a correct response of an easy prompt, chosen by the
  graded outcome, never by the reward's sign;
- :meth:`E3.observe`: the step's ``actor/entropy`` and outcomes update the prompt history and the
  temperature (``e3/...`` metrics).
"""

from __future__ import annotations

from typing import Any, Collection, Hashable, Mapping, Sequence

from rlec.algorithms.base import (TEMPERATURE_FIELD, Algorithm, AlgorithmContext, Finding, RolloutPlan, RunConfig,
                                  StepRecord, entropy_findings)
from rlec.algorithms.e3.budget import length_bias_factor
from rlec.algorithms.e3.controller import E3Controller
from rlec.algorithms.e3.settings import E3_AGENT_LOOP, SECTION, E3Settings
from rlec.run_config import ROLLOUT
TEMPERATURE_KEY = TEMPERATURE_FIELD  # where verl's agent loop reads T_t (the mixin writes plan.temperature there)
PROMPT_KEY = "rlec_e3_prompt"
LENGTH_MU_KEY = "rlec_e3_length_mu"

__all__ = ["E3", "LENGTH_MU_KEY", "PROMPT_KEY", "TEMPERATURE_KEY", "prompt_key_of"]


def prompt_key_of(extra_info: Mapping[str, Any] | None, fallback: Hashable) -> str:
    """The stable id E3's history keys a prompt by: ``extra_info.question_id``, else ``extra_info.index``, else ``fallback``.

    rlec's data gives every copy of a question (one per target p) the same ``question_id``, so
    the copies share one difficulty.
    """
    info = extra_info or {}
    for key in ("question_id", "index"):
        if info.get(key) is not None:
            return f"{key}:{info[key]}"
    return f"row:{fallback}"


class E3(Algorithm):
    """E3 (arXiv 2505.18573) driven through :class:`rlec.algorithms.e3.E3Controller` (module docstring).

    Args:
        settings: ``rlec.e3``.
        controller: the controller built from them.
    """

    name = "e3"
    section = "rlec.e3"
    switch = "rlec.e3.enable=true"
    doc = "e3.md"
    record_fields = (PROMPT_KEY,)

    def __init__(self, settings: E3Settings, controller: E3Controller) -> None:
        self.settings, self.controller = settings, controller

    @classmethod
    def enabled(cls, run: RunConfig) -> bool:
        """``rlec.e3.enable`` (the ``algorithm=e3`` overlay sets it)."""
        return run.enabled(SECTION)

    @classmethod
    def settings_of(cls, run: RunConfig) -> E3Settings:
        """``rlec.e3``, read once per ``run`` and checked.

        Raises:
            ValueError: a value of the wrong type or out of range (the message names the full key).
        """
        return run.section(E3Settings, SECTION).checked()

    @classmethod
    def check(cls, run: RunConfig) -> list[Finding]:
        """Errors: an ``rlec.e3`` value of the wrong type or out of range; a trainer mode other than
        ``rlec_sync`` (the async modes sample ahead with an older temperature; verl's own modes lack
        rlec's trainer); with the temperature part, an agent loop other than ``rlec_e3_agent``,
        T_0 outside [min, max] or verl's bypass mode (no ``actor/entropy`` to steer by); with the budget part, not n_min <= rollout.n <= n_max (the sums stay
        rollout.n x prompts), or n_max above a step's responses (``data.train_batch_size x rollout.n``)."""
        if not cls.enabled(run):
            return []
        try:
            e3 = cls.settings_of(run)
        except ValueError as exc:
            return [Finding("error", "rlec.e3", str(exc))]
        out, keys = [], run.keys
        mode = run.trainer_mode
        if mode != "rlec_sync":
            out.append(Finding("error", "trainer.v1.trainer_mode", f"rlec.e3 needs rlec_sync, got {mode!r}: the async "
                               "modes generate ahead with an older temperature, and verl's own modes lack rlec's E3 trainer mixin"))
        n = keys.rollout_n
        if e3.temperature_enable:
            out += entropy_findings(run, "rlec.e3.temperature")
            loop = keys.default_agent_loop
            if loop != E3_AGENT_LOOP:
                out.append(Finding("error", f"{ROLLOUT}.agent.default_agent_loop", f"is {loop!r}; rlec.e3.temperature needs "
                                   f"{E3_AGENT_LOOP} (the only agent loop that passes the step's temperature to vLLM)"))
            t0 = keys.rollout_temperature
            if isinstance(t0, (int, float)) and not isinstance(t0, bool) and not e3.temperature_in_bounds(float(t0)):
                out.append(Finding("error", f"{ROLLOUT}.temperature",
                                   f"{t0} is outside rlec.e3.temperature [min, max] = [{e3.t_min}, {e3.t_max}]"))
        if e3.budget_enable and isinstance(n, int) and not e3.n_min <= n <= e3.n_max:
            out.append(Finding("error", "rlec.e3.budget", f"need n_min <= rollout.n <= n_max so every batch gets exactly "
                               f"rollout.n x prompts responses, got {e3.n_min} <= {n} <= {e3.n_max}"))
        batch = keys.train_batch_size
        if e3.budget_enable and isinstance(n, int) and isinstance(batch, int) and e3.n_max > n * batch:
            # the budget keeps a step's responses at rollout.n x prompts, so one prompt never gets more than all of them
            # (at most n x B - (B - 1) x n_min, the others at n_min); memory is the step's, whatever the split
            out.append(Finding("error", "rlec.e3.budget.n_max", f"{e3.n_max!r} must be at most data.train_batch_size x "
                               f"rollout.n = {batch} x {n} = {batch * n}: the budget splits a step's {batch * n} responses "
                               "between its prompts, so no prompt can get more"))
        return out

    @classmethod
    def verdict(cls, run: RunConfig) -> str:
        """``E3 (temperature min..max from T0 T_0; n n_min..n_max; length bias on the easiest share of prompts)``."""
        e3 = cls.settings_of(run)
        return (f"E3 (temperature {e3.t_min}..{e3.t_max} from T0 {run.keys.rollout_temperature}; "
                f"n {e3.n_min}..{e3.n_max}; length bias on the easiest {e3.penalty_threshold} of prompts)")

    @classmethod
    def table_columns(cls, metric_keys: Collection[str]) -> list[tuple[str, str, str]]:
        """The temperature, the mean rollout budget and the mean length-bias factor."""
        return [("E3 T", "e3/temperature", "{:.3f}"), ("E3 n mean", "e3/rollout_n/mean", "{:.1f}"),
                ("E3 bias", "e3/length_bias/mean", "{:.3f}")]

    @classmethod
    def from_config(cls, run: RunConfig, context: AlgorithmContext) -> "E3":
        """Raises ValueError: :meth:`check` fails, or the temperature part has no vocabulary size
        (``rlec.e3.temperature.vocab_size`` or ``context.vocab_size``)."""
        cls.raise_first_error(run)
        settings = cls.settings_of(run)
        controller = E3Controller(settings, n=int(run.keys.rollout_n), temperature=float(run.keys.rollout_temperature),
                                  vocab_size=settings.vocab_size or context.vocab_size)
        return cls(settings, controller)

    def plan_rollout(self, step: int, prompts: Sequence[Mapping[str, Any] | None], plan: RolloutPlan) -> None:
        """The step's temperature T_t, each prompt's rollout n (sum kept at n x prompts) and length-bias mu."""
        keys = [prompt_key_of(info, f"{step}:{i}") for i, info in enumerate(prompts)]
        e3 = self.controller.plan(keys)
        plan.temperature, plan.n_per_prompt = e3.temperature, list(e3.rollout_n)
        plan.prompt_fields[PROMPT_KEY] = keys
        plan.prompt_fields[LENGTH_MU_KEY] = list(e3.length_mu)

    @classmethod
    def adjust_reward(cls, score: float, info: dict[str, Any], fields: Mapping[str, Any], response_length: int) -> float:
        """The length bias (:func:`rlec.algorithms.e3.length_bias_factor`) on one graded response.

        Returns ``score`` unchanged when the prompt carries no ``rlec_e3_length_mu`` (E3 off,
        validation); else ``score`` x 1 / (1 + mu l) for a correct response of an easy prompt
        (mu > 0), with ``info["score"]`` set to it and ``e3_length_mu`` / ``e3_length_bias``
        (the factor, 1.0 when not applied) added to ``info``.
        """
        mu = fields.get(LENGTH_MU_KEY)
        if mu is None:
            return score
        mu = float(mu)
        factor = length_bias_factor(int(response_length), mu) if mu > 0 and float(info.get("correct", 0.0)) > 0 else 1.0
        score = float(score) * factor
        info["score"] = score
        info["e3_length_mu"], info["e3_length_bias"] = mu, factor
        return score

    def observe(self, step: int, total_steps: int, record: StepRecord) -> dict[str, float]:
        """Update the temperature from ``actor/entropy`` and the prompt history from the outcomes; ``e3/...`` metrics."""
        infos = record.reward_info
        return self.controller.observe(
            step, total_steps, record.entropy, [f.get(PROMPT_KEY) for f in record.fields], record.correct,
            [float(i.get("e3_length_mu", 0.0)) for i in infos], [float(i.get("e3_length_bias", 1.0)) for i in infos])

    def state_dict(self) -> dict[str, Any]:
        """The controller's temperature and prompt history (JSON-friendly)."""
        return self.controller.state_dict()

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output ({} leaves a fresh controller)."""
        if state:
            self.controller.load_state_dict(state)
