"""What an experiment is: its arms, its shared settings, its per-step curves and held-out figures.

Each ``rlec/experiments/<name>.py`` defines one :class:`Experiment`; :mod:`rlec.experiments.core`
runs it (arms x seeds, one launch of ``tools/run_megatron_rlec.sh`` each) and
:mod:`rlec.experiments.report` summarises it. Pure: no torch, no verl.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping, Sequence

import numpy as np


@dataclass
class Run:
    """One finished arm-seed: what the curves and held-out figures read.

    Attributes:
        arm, seed: which run.
        metrics: one dict per training step (``{"step": N, <verl metric>: value}``), steps 1..S in order.
        groups: per step, the rewards of each rollout group (prompt): ``groups[t][g]`` = that group's scores.
        heldout: held-out values per question, ``{figure name: [value per question]}`` (questions in one
            fixed order for every run of the experiment).
    """

    arm: str
    seed: int
    metrics: list[dict[str, Any]]
    groups: list[list[list[float]]] = field(default_factory=list)
    heldout: dict[str, list[float]] = field(default_factory=dict)

    def series(self, key: str) -> list[float]:
        """The metric ``key`` per step (NaN where a step did not log it)."""
        return [float(row.get(key, np.nan)) for row in self.metrics]


@dataclass(frozen=True)
class Curve:
    """A per-step figure: ``values(run)`` -> one float per step (NaN = not measured that step)."""

    name: str
    label: str
    values: Callable[[Run], list[float]]


@dataclass(frozen=True)
class Arm:
    """One arm: the settings it names, as launcher overrides over the experiment's shared ones.

    Attributes:
        name: short id (``--arms``, folder name).
        what: one line: the setting this arm names.
        overrides: ``key=value`` / ``algorithm=<overlay>`` for the launch.
        then: a second stage's overrides, trained from the first stage's final weights for the
            remaining steps (``None``: one stage); the optimizer state starts fresh there.
        switch_fraction: the share of the steps the first stage takes when ``then`` is set.
    """

    name: str
    what: str
    overrides: tuple[str, ...]
    then: tuple[str, ...] | None = None
    switch_fraction: float = 0.5

    def stages(self, steps: int) -> list[tuple[tuple[str, ...], int]]:
        """``[(overrides, steps)]`` per stage: one, or the switch split (each stage at least 1 step)."""
        if self.then is None:
            return [(self.overrides, steps)]
        first = min(max(1, round(steps * self.switch_fraction)), steps - 1)
        return [(self.overrides, first), (self.then, steps - first)]


@dataclass(frozen=True)
class HeldOut:
    """Held-out evaluation of each trained model (``rlec.eval.evaluate`` + the same grading).

    Attributes:
        targets: evaluation targets (None = the binary prompt, no target).
        n_samples: responses per question and target (>= max k).
        temperature: sampling temperature (0 = greedy).
        figures: ``{name: f(per_question, keys, records)}``: ``per_question`` is the (Q, T, 5) count array of
            :func:`rlec.eval.metrics.question_counts`, ``keys`` its question keys, ``records`` the raw
            evaluation records; returns one value per question (NaN = not defined for it).
        data: ``"demo"`` (the addition questions) or ``"environments"`` (the RLVE test set).
    """

    targets: tuple[float | None, ...]
    n_samples: int
    temperature: float
    figures: Mapping[str, Callable[[np.ndarray, Sequence[tuple[str, str]], Sequence[dict]], np.ndarray]]
    data: str = "demo"


@dataclass(frozen=True)
class Experiment:
    """An experiment: paired arms trained from the same warm start, data, seeds, lr, batch and steps.

    Attributes:
        name: ``python -m rlec.experiments <name>``.
        claim: the paper's claim this checks, one line.
        paper: the paper and figure it corresponds to.
        arms: the arms (names unique).
        settings: overrides shared by every arm (batch, lr, lengths ...).
        data: training data: ``"binary"`` (additions, plain correctness: no target in the prompt),
            ``"targets"`` (additions at targets 0.1 / 0.8, RLEC's reward) or ``"environments"`` (RLVE's).
        curves: per-step figures (plotted, averaged over the last quarter of steps in the table).
        heldout: held-out figures (None: none).
        seed_spread: metrics whose spread across seeds is reported (std over seeds of each seed's mean).
        steps, quick_steps: steps per arm-seed in a full and a ``--quick`` run.
        train_rows: addition training rows (``data`` binary / targets): fewer rows, more visits per prompt.
        quick_train_rows: the rows of a ``--quick`` run (None: ``train_rows`` scaled with its batch).
    """

    name: str
    claim: str
    paper: str
    arms: tuple[Arm, ...]
    settings: Mapping[str, Any]
    data: str
    curves: tuple[Curve, ...]
    heldout: HeldOut | None = None
    seed_spread: tuple[str, ...] = ()
    steps: int = 40
    quick_steps: int = 2
    train_rows: int = 2000
    quick_train_rows: int | None = None

    def arm(self, name: str) -> Arm:
        """The arm called ``name``.

        Raises:
            ValueError: no such arm (the message lists the arms).
        """
        for arm in self.arms:
            if arm.name == name:
                return arm
        raise ValueError(f"unknown arm {name!r} of experiment {self.name!r}: expected one of {', '.join(a.name for a in self.arms)}")

    def quick(self, batch: int) -> "Experiment":
        """The ``--quick`` variant: ``batch`` prompts per step (every arm alike) and :attr:`quick_train_rows` rows.

        A quick run checks the wiring, not the claim: fewer rollouts per step cost less on CPU. The PPO
        mini-batch shrinks with the batch, so a quick step makes as many updates as a full one (the second and
        later against the rollout's old log-probs, as in the full run). Without ``quick_train_rows`` the rows
        scale with the batch, so a prompt comes back at the same step as in the full run.

        Args:
            batch: prompts per step, >= 1; one no smaller than the full run's keeps the full batch.

        Returns:
            a copy with the batch, mini-batch and training rows of a quick run (the arms unchanged).

        Raises:
            ValueError: ``batch`` below 1, or :attr:`settings` without the batch key
                (``data.train_batch_size``) to scale.
        """
        from rlec.experiments import keys as K

        if batch < 1:
            raise ValueError(f"experiment {self.name!r}: a quick batch of {batch} prompts: expected at least 1")
        if K.BATCH not in self.settings:
            raise ValueError(f"experiment {self.name!r}: settings have no {K.BATCH} to scale for --quick")
        full = int(self.settings[K.BATCH])
        batch = min(batch, full)
        settings = {**self.settings, K.BATCH: batch}
        if K.MINI_BATCH in settings:
            settings[K.MINI_BATCH] = max(1, int(settings[K.MINI_BATCH]) * batch // full)
        rows = self.quick_train_rows or max(batch, self.train_rows * batch // full)
        return replace(self, settings=settings, train_rows=rows)


# ---- figures shared by several experiments ------------------------------------------------------

def metric_curve(key: str, label: str | None = None) -> Curve:
    """The verl metric ``key`` per step."""
    return Curve(key, label or key, lambda run: run.series(key))


def all_wrong_share(run: Run) -> list[float]:
    """Per step: the share of groups with no correct response (every score <= 0)."""
    return [float(np.mean([max(g) <= 0 for g in step])) if step else np.nan for step in run.groups]


def effective_prompt_ratio(run: Run) -> list[float]:
    """Per step: the share of groups with a rewarded response (reward > 0) and an unrewarded one (<= 0).

    RLVE's effective prompt ratio (Sec. 3: the groups whose rewards are not all equal), under plain
    correctness (rewards 1 / 0) exactly that; at a small RLEC target (the ``rlve`` experiment's p = 0.01) a
    wrong answer (-0.01) and ``I don't know`` (0) differ by a hundredth and count as the same outcome. Partial
    credit (``sorting``: rewards in (0, 1)) counts as rewarded, so a group of unequal partial scores is not
    effective here though its rewards differ.

    Returns:
        One share in [0, 1] per step; NaN for a step with no rollout dump.
    """
    return [float(np.mean([max(g) > 0 >= min(g) for g in step])) if step else np.nan for step in run.groups]


def pass_at(k: int, target_index: int = 0) -> Callable[[np.ndarray, Sequence, Sequence], np.ndarray]:
    """Held-out figure: each question's unbiased pass@k (Chen et al. 2021) at the ``target_index``-th target."""
    def figure(per_question: np.ndarray, keys: Sequence, records: Sequence) -> np.ndarray:
        from rlec.eval.selective import pass_at_k_by_question

        return pass_at_k_by_question(per_question, [k])[:, target_index, 0]
    return figure


def coverage_at(target_index: int) -> Callable[[np.ndarray, Sequence, Sequence], np.ndarray]:
    """Held-out figure: each question's answered share (1 - abstentions / samples) at the ``target_index``-th target."""
    def figure(per_question: np.ndarray, keys: Sequence, records: Sequence) -> np.ndarray:
        from rlec.eval.selective import A, N

        cell = per_question[:, target_index]
        return np.where(cell[:, N] > 0, 1.0 - cell[:, A] / np.maximum(cell[:, N], 1), np.nan)
    return figure


def coverage_gap(low_index: int, high_index: int) -> Callable[[np.ndarray, Sequence, Sequence], np.ndarray]:
    """Held-out figure: coverage at the low target minus coverage at the high one, per question."""
    low, high = coverage_at(low_index), coverage_at(high_index)
    return lambda pq, keys, records: low(pq, keys, records) - high(pq, keys, records)


def shared_settings(**extra: Any) -> dict[str, Any]:
    """The settings every arm of every experiment trains with (``extra`` adds an experiment's own).

    From the demo (:data:`rlec.demo.pipeline.DEMO_SETTINGS`, one home): top-k 5 (the warm start's flat
    logits outside its 85 tokens, see there), lr 1e-4, responses of at most 24 tokens, mini-batches of 4
    prompts. Here: 8 prompts x 8 responses per step (rollout.n 8 so Pass@k's k = 4 < n), prompts of at most
    256 tokens (the environment prompts fit; verl pads to it on CPU).
    """
    from rlec.demo.pipeline import DEMO_SETTINGS

    from rlec.experiments import keys as K

    out = {K.BATCH: 8, K.ROLLOUT_N: 8, K.MAX_PROMPT: 256}
    out.update({k: DEMO_SETTINGS[k] for k in (K.TOP_K, K.LR, K.MAX_RESPONSE, K.MINI_BATCH)})
    out[K.MICRO_BATCH] = 16
    out.update(extra)
    return out
