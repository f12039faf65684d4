"""Extension points of the local step, where E3, Pass@k Training and RLVE plug into the local run.

A step of :mod:`rlec.local.runner` calls, in order::

    plan = RolloutPlan(temperature=rollout.temperature, n_per_prompt=[rollout.n] * prompts)
    hook.plan_rollout(step, batch, plan)            # E3: the step's temperature and per-prompt n
    ... rollout at plan.temperature, grading, R_p^(b) ...
    scores = hook.adjust_scores(step, data, scores, infos)   # E3: length bias on easy correct answers
    algorithm = hook.advantage_config(step, algorithm)       # Pass@k: the entropy switch's active k
    ... advantage, old log-probs (actor/entropy), Megatron update at plan.temperature ...
    metrics |= hook.after_step(step, data, infos, metrics)   # E3 scheduler, prompt history, RLVE controller
    checkpoint user state: {hook.name: hook.state_dict()}

The same pure functions (``rlec.algorithms``, ``rlec.environments``) are called here and by the
verl trainer mixins of ``rlec.verl_plugin``; a hook only adapts them to the local loop. Hooks
are built from the config by :func:`build_hooks`: each registered factory returns a hook when its
config section enables it, or None.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

# (name, enabled(cfg), factory(cfg, loader), settings section, doc) in registration order
_HOOKS: list[tuple[str, Callable[[Any], bool], Callable[[Any, Any], "StepHook"], str, str]] = []


@dataclass
class RolloutPlan:
    """How one step rolls out.

    Attributes:
        temperature: sampling temperature (> 0); also divides the logits of the step's
            log-probs, so the importance ratio stays exact.
        n_per_prompt: responses per prompt (each >= 2 for a group baseline); their sum must stay
            ``rollout.n x prompts`` (verl sizes mini-batches by it).
    """

    temperature: float
    n_per_prompt: list[int]


class StepHook:
    """Base class of a local-run algorithm adapter; every method defaults to "no change".

    Attributes:
        name: the key of its state in the checkpoint's user state.
    """

    name = "hook"

    def plan_rollout(self, step: int, batch: dict[str, Any], plan: RolloutPlan) -> None:
        """Adjust ``plan`` in place before the rollout of ``step`` (``batch``: verl's collated prompts)."""

    def adjust_scores(self, step: int, data: Any, scores: list[float], infos: list[dict[str, Any]]) -> list[float]:
        """The rewards to use, given the graded ``infos`` (one per response)."""
        return scores

    def advantage_config(self, step: int, algorithm: Any) -> Any:
        """The ``algorithm`` config the advantage estimator sees this step."""
        return algorithm

    def after_step(self, step: int, data: Any, infos: list[dict[str, Any]], metrics: dict[str, float]) -> dict[str, float]:
        """Update state after the update (``metrics`` holds ``actor/entropy``); return metrics to log."""
        return {}

    def state_dict(self) -> dict[str, Any]:
        """State saved with every checkpoint (JSON-friendly)."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output on resume."""


def register_hook(
    name: str, enabled: Callable[[Any], bool], *, section: str, doc: str
) -> Callable[[Callable[[Any, Any], "StepHook"]], Callable[[Any, Any], "StepHook"]]:
    """Decorator: register ``factory(cfg, loader) -> StepHook`` under the algorithm ``name``, built
    when ``enabled(cfg)`` is true (the switch its config overlay sets); ``section`` is the dotted
    config key holding its settings and ``doc`` its page under ``docs/`` (both shown by ``--help``)."""

    def add(factory: Callable[[Any, Any], "StepHook"]) -> Callable[[Any, Any], "StepHook"]:
        _HOOKS.append((name, enabled, factory, section, doc))
        return factory

    return add


def enabled_algorithms(cfg: Any) -> list[tuple[str, str, str]]:
    """``(name, settings section, doc)`` of the registered algorithm hooks the config enables, in registration order."""
    import rlec.local.algorithms  # noqa: F401 - registers rlec's hooks

    return [(name, section, doc) for name, enabled, _, section, doc in _HOOKS if enabled(cfg)]


def build_hooks(cfg: Any, loader: Any) -> list[StepHook]:
    """The hooks the config enables, in registration order.

    Raises:
        ValueError: two hooks share a name (their checkpoint state would collide).
    """
    hooks = [factory(cfg, loader) for _, enabled, factory, _, _ in _HOOKS if enabled(cfg)]
    names = [h.name for h in hooks]
    if len(set(names)) != len(names):
        raise ValueError(f"local-run hooks with the same name: {names}")
    return hooks
