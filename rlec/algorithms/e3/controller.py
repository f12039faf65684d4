"""E3's per-step bookkeeping in verl's trainer: plan a batch, observe the step, keep the state.

A trainer calls, each step t (verl counts from 1)::

    plan = controller.plan(prompt_keys)        # before rollout: n_i, mu_i per prompt, T_t
    ... rollout at plan.temperature with plan.rollout_n[i] responses per prompt; grade; reward
        (a correct response of prompt i gets its reward x length_bias_factor(l, plan.length_mu[i]))
    metrics = controller.observe(t, total_steps, entropy_t, response_keys, correct, ...)
    controller.state_dict()                    # saved with every checkpoint

:meth:`E3Controller.observe` updates the per-prompt history (the ranks of step t + 1) and the
temperature (T_{t+1}) and returns the ``e3/...`` metrics of step t. Pure Python: the trainer
drives it through :class:`rlec.algorithms.e3.algorithm.E3`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Hashable, Mapping, Sequence

from rlec.algorithms.e3.budget import PromptHistory, allocate_rollouts
from rlec.algorithms.e3.settings import E3Settings
from rlec.algorithms.e3.temperature import TemperatureScheduler

__all__ = ["BatchPlan", "E3Controller"]


@dataclass(frozen=True)
class BatchPlan:
    """What E3 decides for a batch of prompts before rollout.

    Attributes:
        ranks: difficulty rank per prompt in [0, 1], None for a prompt never seen.
        rollout_n: responses per prompt (sum = n x prompts; all n when the budget is off).
        length_mu: the length-bias coefficient per prompt: mu for an easy prompt
            (:meth:`PromptHistory.easiest`), else 0.
        temperature: the sampling temperature of this step.
    """

    ranks: list[float | None]
    rollout_n: list[int]
    length_mu: list[float]
    temperature: float


class E3Controller:
    """E3's state and per-step decisions (formulas: :mod:`rlec.algorithms.e3`).

    Args:
        settings: ``rlec.e3`` (:class:`E3Settings`).
        n: the mean rollout budget per prompt (verl's ``rollout.n``).
        temperature: T_0, the configured sampling temperature (``rollout.temperature``).
        vocab_size: the policy's vocabulary size V (needed when the temperature part is on).

    The settings and the cross-key rules (n_min <= n <= n_max, T_0 in [T_min, T_max]) are checked once,
    before this is built (:meth:`rlec.algorithms.e3.algorithm.E3.check`); nothing here checks them again.

    Raises:
        ValueError: the temperature part is on without a vocabulary size (the model's, known only now).
    """

    def __init__(self, settings: E3Settings, n: int, temperature: float, vocab_size: int | None) -> None:
        self.settings, self.n, self.initial_temperature = settings, int(n), float(temperature)
        self.scheduler: TemperatureScheduler | None = None
        if settings.temperature_enable:
            if vocab_size is None:
                raise ValueError("rlec.e3.temperature needs the vocabulary size: set rlec.e3.temperature.vocab_size "
                                 "or a model folder whose config.json has vocab_size")
            self.scheduler = TemperatureScheduler.from_settings(settings.temperature, int(vocab_size), self.initial_temperature)
        self.history = PromptHistory()
        self._planned_n: list[int] = []

    @property
    def temperature(self) -> float:
        """The sampling temperature of the next step (T_0 when the temperature part is off)."""
        return self.scheduler.temperature if self.scheduler is not None else self.initial_temperature

    def plan(self, prompt_keys: Sequence[Hashable]) -> BatchPlan:
        """Ranks, rollout counts and length-bias coefficients of a batch of prompts (one key per prompt)."""
        s = self.settings
        ranks = self.history.ranks(prompt_keys)
        counts = allocate_rollouts(ranks, self.n, s.n_min, s.n_max) if s.budget_enable else [self.n] * len(ranks)
        easy = self.history.easiest(s.penalty_threshold) if s.length_bias_enable else frozenset()
        mus = [float(s.mu) if str(key) in easy else 0.0 for key in prompt_keys]
        self._planned_n.extend(counts)
        return BatchPlan(ranks=ranks, rollout_n=counts, length_mu=mus, temperature=self.temperature)

    def observe(
        self,
        step: int,
        total_steps: int,
        entropy: float | None,
        response_keys: Sequence[Hashable],
        correct: Sequence[bool | float],
        length_mu: Sequence[float] | None = None,
        length_bias: Sequence[float] | None = None,
    ) -> dict[str, float]:
        """Record step ``step``; returns its ``e3/...`` metrics.

        Args:
            step: the global step just trained (from 1).
            total_steps: the run's total steps (for the annealing of the target).
            entropy: the step's policy entropy (nats; verl's ``actor/entropy``); None skips the
                temperature update (e.g. no actor update at this step).
            response_keys: the prompt key of each graded response of the step.
            correct: each response's graded outcome (abstentions are not correct).
            length_mu, length_bias: per response, the coefficient of its prompt and the factor
                applied to its reward (to report ``e3/length_bias/mean`` over the biased responses).

        Returns:
            ``e3/temperature`` (T of this step), ``e3/entropy``, ``e3/target_entropy`` (once
            known), ``e3/temperature_clipped`` (1 when the safety bound changed the next T),
            ``e3/rollout_n/{min,mean,max}`` (over the prompts planned since the last
            call), ``e3/length_bias/{mean,count}`` (mean factor over the correct responses of
            biased prompts; 1.0 when there were none), ``e3/seen_prompts``.
        """
        metrics: dict[str, float] = {"e3/temperature": self.temperature}
        self.history.update(response_keys, correct)
        if self._planned_n:
            planned, self._planned_n = self._planned_n, []
            metrics.update({"e3/rollout_n/min": float(min(planned)), "e3/rollout_n/mean": sum(planned) / len(planned),
                            "e3/rollout_n/max": float(max(planned))})
        if length_mu is not None and length_bias is not None:
            factors = [float(f) for m, f, ok in zip(length_mu, length_bias, correct) if float(m) > 0 and bool(ok)]
            metrics["e3/length_bias/mean"] = sum(factors) / len(factors) if factors else 1.0
            metrics["e3/length_bias/count"] = float(len(factors))
        if entropy is not None:
            metrics["e3/entropy"] = float(entropy)
            if self.scheduler is not None:
                target = self.scheduler.target(step, total_steps)
                self.scheduler.update(float(entropy), step, total_steps)
                target = target if target is not None else self.scheduler.target(step, total_steps)
                if target is not None:
                    metrics["e3/target_entropy"] = target
                metrics["e3/temperature_clipped"] = float(self.scheduler.clipped)
        metrics["e3/seen_prompts"] = float(len(self.history))
        return metrics

    def state_dict(self) -> dict[str, Any]:
        """JSON-safe state: ``{"temperature": scheduler state or None, "history": ...}``."""
        return {"temperature": None if self.scheduler is None else self.scheduler.state_dict(),
                "history": self.history.state_dict()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` output (a scheduler state is ignored when the part is now off)."""
        if self.scheduler is not None and state.get("temperature") is not None:
            self.scheduler.load_state_dict(state["temperature"])
        self.history.load_state_dict(state["history"])
