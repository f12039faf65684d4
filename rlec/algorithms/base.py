"""The one interface of an algorithm rlec adds to RLEC training, driven by verl's trainer (the one loop).

An algorithm (E3, Pass@k Training, RLVE: :mod:`rlec.algorithms.registry`) is a subclass of
:class:`Algorithm`. Its class methods read the process's typed configuration, a :class:`rlec.run_config.RunConfig`
(``run``: verl's keys in ``run.keys``, the algorithm's own section parsed once by ``run.section``; never the
config tree): :meth:`Algorithm.enabled` (its switch),
:meth:`Algorithm.check` (the only validator of its settings, cross-key rules included, called by
DRY_RUN and the launcher before anything is written and by verl's trainer at construction) and
:meth:`Algorithm.from_config`; and what the pipeline shows or protects of it, so no pipeline module
names an algorithm: :meth:`Algorithm.verdict` (its part of DRY_RUN's ``algo`` line),
:meth:`Algorithm.table_columns` (its columns of the CPU run's step table and, the first
:attr:`Algorithm.step_line_columns` of them, of its console line per step), :attr:`Algorithm.verl_keys`
(the keys it adds to verl's own sections) and :attr:`Algorithm.verl_values` (the values it gives verl's); a resume may change none of its settings (the allow-list
:data:`rlec.config.RESUME_ALLOWED` names none of them). An instance holds the algorithm's state across steps. verl's trainer
(:class:`rlec.verl_plugin.trainers.AlgorithmsMixin`, the one training loop)
calls, at each step t (counted from 1), for every enabled algorithm in registry order::

    plan = RolloutPlan(temperature=rollout.temperature, n_per_prompt=[rollout.n] * prompts)
    algorithm.plan_rollout(t, extra_infos, plan)       # temperature, per-prompt n, per-prompt fields
    ... rollout; grading; R_p^(b) ...
    score = type(algorithm).adjust_reward(score, info, fields, length)   # per response, stateless
    overrides = algorithm.step_overrides(t)            # dotted keys the advantage / update must see
    ... advantage, log-probs (actor/entropy), update ...
    metrics |= algorithm.observe(t, total_steps, StepRecord(...))
    state = algorithm.state_dict()                     # saved with every checkpoint

:meth:`Algorithm.adjust_reward` is a class method of the response alone: verl runs it in the
reward workers, which hold no trainer state; what it needs travels with the prompt
(:attr:`RolloutPlan.prompt_fields`). Pure Python (no verl, no torch.distributed).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar, Collection, Mapping, Sequence

from rlec.config_base import Finding
from rlec.run_config import RunConfig, VerlKeys

__all__ = ["TEMPERATURE_FIELD", "Algorithm", "AlgorithmContext", "Finding", "RolloutPlan", "RunConfig", "StepRecord",
           "first_error"]

# the batch field carrying the plan's temperature to verl's agent loop (each rollout worker samples with its own
# config copy, which the trainer's config value never reaches; rlec.verl_plugin.e3's agent loop reads it)
TEMPERATURE_FIELD = "rlec_temperature"


@dataclass
class RolloutPlan:
    """How one step rolls out; algorithms adjust it in place in :meth:`Algorithm.plan_rollout`.

    Attributes:
        temperature: the sampling temperature (> 0), its one carrier: the loop samples at it and the
            step's log-probs divide the logits by it (verl's trainer writes it into its config's
            ``actor_rollout_ref.rollout.temperature`` and the batch field :data:`TEMPERATURE_FIELD`
            the agent loop samples at).
        n_per_prompt: responses per prompt (each >= 2 for a group baseline); their sum must stay
            ``rollout.n x prompts`` (verl sizes mini-batches by it).
        prompt_fields: ``{name: one value per prompt}``: fields that travel with the prompt to the
            agent loop, the reward manager (``fields`` of :meth:`Algorithm.adjust_reward`) and back
            in the step's record (:attr:`StepRecord.fields`).
        batch_fields: ``{name: value}`` for every prompt of the batch.
    """

    temperature: float
    n_per_prompt: list[int]
    prompt_fields: dict[str, list[Any]] = field(default_factory=dict)
    batch_fields: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class StepRecord:
    """A training step's responses, read once per step, and the step's metrics.

    Attributes:
        fields: per response, the planned fields of its prompt (:attr:`RolloutPlan.prompt_fields`).
        extra_info: per response, its prompt row's ``extra_info`` ({} when absent).
        reward_info: per response, the reward manager's ``reward_extra_info`` (``correct``: the
            graded outcome, 1.0 or 0.0; abstentions are not correct; plus what
            :meth:`Algorithm.adjust_reward` added).
        metrics: the step's metrics so far (``actor/entropy``: the policy's mean token entropy in
            nats at the step's temperature; absent when the step had no actor update).
    """

    fields: list[dict[str, Any]]
    extra_info: list[dict[str, Any]]
    reward_info: list[dict[str, Any]]
    metrics: Mapping[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not len(self.fields) == len(self.extra_info) == len(self.reward_info):
            raise ValueError(f"StepRecord: fields, extra_info and reward_info need one entry per response, got "
                             f"{len(self.fields)}, {len(self.extra_info)}, {len(self.reward_info)}")

    @property
    def correct(self) -> list[float]:
        """The graded outcome of each response (1.0 correct, else 0.0)."""
        return [float(info.get("correct", 0.0)) for info in self.reward_info]

    @property
    def entropy(self) -> float | None:
        """The step's ``actor/entropy`` (None when absent)."""
        value = self.metrics.get("actor/entropy")
        return None if value is None else float(value)


@dataclass(frozen=True)
class AlgorithmContext:
    """What the loop knows beyond the config when it builds the algorithms.

    Attributes:
        vocab_size: the policy's vocabulary size V (E3's temperature update), None when unknown.
        train_dataset: verl's training dataset (an algorithm that serves prompts reads its own source from
            it: RLVE's ``rlve_source``), None when the loop has none yet.
    """

    vocab_size: int | None = None
    train_dataset: Any = None


BYPASS_KEY = VerlKeys.key_of("bypass_mode")


def entropy_findings(run: RunConfig, reader: str) -> list[Finding]:
    """An error when ``run`` turns on verl's bypass mode (:data:`BYPASS_KEY`), whose trainer skips the old-log-prob
    pass and with it ``actor/entropy`` (verl 0.9.1 ``trainer_base._compute_old_log_prob``), which ``reader`` (the
    part of an algorithm that reads it, e.g. "rlec.e3.temperature") needs; empty otherwise."""
    if run.keys.bypass_mode is not True:
        return []
    return [Finding("error", BYPASS_KEY, f"true: verl's bypass mode computes no actor/entropy, which {reader} reads; "
                    f"set {BYPASS_KEY}=false (the recipe's)")]


def first_error(findings: Sequence[Finding]) -> Finding | None:
    """The first finding of level "error", or None."""
    return next((f for f in findings if f.level == "error"), None)


class Algorithm(ABC):
    """An algorithm that plugs into RLEC training (module docstring); every per-step method is a no-op by default.

    Class attributes:
        name: the registry name (the hydra overlay ``algorithm=<name>``; the key of its state).
        section: its settings home, ``rlec.<name>`` (every setting and the switch live there; readers read
            it, never verl's copies).
        switch: the dotted config key (and value) that turns it on, ``rlec.<name>.enable=true``, for docs and ``--help``.
        doc: its page under ``docs/``.
        record_fields: the prompt fields :meth:`observe` reads back with the step's responses
            (``extra_info`` fills :attr:`StepRecord.extra_info`, planned fields :attr:`StepRecord.fields`;
            the reward info always comes with them); None: :meth:`observe` reads only the step's
            metrics, so verl's trainer reads no responses for it.
        verl_keys: the dotted keys it adds to verl's own sections, set by its overlay from the home because
            verl hands a plugin only that section (``algorithm.passk``: the estimator's copy of
            ``rlec.passk.k`` and the runtime ``active_k``; ``data.rlve``: ``${rlec.rlve}`` for the
            dataset): verl's dataclasses know none of them, so the keys under ``algorithm`` are
            dropped before verl's ``AlgoConfig`` reads the section
            (:func:`rlec.algorithms.registry.verl_algorithm_keys`).
        serves_prompts: its data source serves training prompts of its own (RLVE's environment rows), so
            an empty ``data.train_files`` is a run on those alone (:func:`rlec.algorithms.registry.serves_prompts`).
        verl_values: ``{dotted key: value}`` its overlay gives verl's own settings where RLEC's plain run has
            another (Pass@k's ``algorithm.adv_estimator: rlec_passk`` for RLEC's ``grpo``): the generic
            rules accept the value (:func:`rlec.algorithms.registry.sets_verl_value`) and its :meth:`check`
            judges it.
        step_line_columns: how many of its leading :meth:`table_columns` the console's line per step shows
            (:func:`rlec.algorithms.registry.step_line_columns`); the step table at the end shows them all.
    """

    name: ClassVar[str] = ""
    section: ClassVar[str] = ""
    switch: ClassVar[str] = ""
    doc: ClassVar[str] = ""
    record_fields: ClassVar[tuple[str, ...] | None] = None
    verl_keys: ClassVar[tuple[str, ...]] = ()
    serves_prompts: ClassVar[bool] = False
    verl_values: ClassVar[Mapping[str, Any]] = {}
    step_line_columns: ClassVar[int] = 1

    @classmethod
    @abstractmethod
    def enabled(cls, run: RunConfig) -> bool:
        """Whether the config turns this algorithm on (its :attr:`switch`: ``run.enabled(cls.section)``); every
        algorithm defines it."""

    @classmethod
    def check(cls, run: RunConfig) -> list[Finding]:
        """Every finding about this algorithm's settings in ``run`` (empty when disabled)."""
        return []

    @classmethod
    @abstractmethod
    def from_config(cls, run: RunConfig, context: AlgorithmContext) -> "Algorithm":
        """Build the algorithm of an enabled config; every algorithm defines it.

        Raises:
            ValueError: :meth:`check` reports an error (the message is its first error).
        """

    @classmethod
    def verdict(cls, run: RunConfig) -> str:
        """Its part of DRY_RUN's ``algo`` line when enabled, e.g. ``E3 (temperature 0.5..1.5 ...)``;
        by default its name.

        Raises:
            ValueError: its settings do not read (the verdict then names it "settings refused").
        """
        return cls.name

    @classmethod
    def table_columns(cls, metric_keys: Collection[str]) -> list[tuple[str, str, str]]:
        """Its columns of the CPU run's step table, ``(header, metric key, format)`` each (a metric
        key of :meth:`observe`; ``metric_keys``: every key the run logged); none by default."""
        return []

    @classmethod
    def raise_first_error(cls, run: RunConfig) -> None:
        """Raise ValueError with :meth:`check`'s first error, if any."""
        error = first_error(cls.check(run))
        if error is not None:
            raise ValueError(str(error))

    def plan_rollout(self, step: int, prompts: Sequence[Mapping[str, Any] | None], plan: RolloutPlan) -> None:
        """Adjust ``plan`` in place before the rollout of ``step``; ``prompts``: each prompt's ``extra_info``."""

    def step_overrides(self, step: int) -> dict[str, Any]:
        """``{dotted config key: value}`` the advantage and the update of ``step`` must see."""
        return {}

    @classmethod
    def adjust_reward(cls, score: float, info: dict[str, Any], fields: Mapping[str, Any], response_length: int) -> float:
        """The reward of one graded response; may add keys to ``info`` (its ``reward_extra_info``).

        Args:
            score: the reward so far.
            info: the response's ``reward_extra_info`` (``correct``: the graded outcome).
            fields: its prompt's planned fields (:attr:`RolloutPlan.prompt_fields`; absent in validation).
            response_length: response tokens.
        """
        return score

    def observe(self, step: int, total_steps: int, record: StepRecord) -> dict[str, float]:
        """Update the state after ``step``; returns metrics to log."""
        return {}

    def state_dict(self) -> dict[str, Any]:
        """JSON-safe state saved with every checkpoint."""
        return {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output on resume."""

