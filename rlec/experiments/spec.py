"""What an experiment is: its arms, its shared settings, its per-step curves and held-out figures.

Each ``rlec/experiments/<name>.py`` defines one :class:`Experiment`; :mod:`rlec.experiments.core`
runs it (arms x seeds, one launch of ``tools/run_megatron_rlec.sh`` each) and
:mod:`rlec.experiments.report` summarises it. Pure: no torch, no verl.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from rlec.experiments import keys as K
from rlec.experiments.data_kinds import data_kind


VERDICTS = ("reproduced", "not reproduced", "premise absent")  # the only verdict words (docs/experiments.md)


@dataclass
class Run:
    """One finished arm-seed: what the curves and held-out figures read.

    Attributes:
        arm, seed: which run.
        metrics: one dict per training step (``{"step": N, <verl metric>: value}``), steps 1..S in order.
        groups: per step, the rewards of each rollout group (prompt): ``groups[t][g]`` = that group's scores.
        heldout: held-out values per question, ``{figure name: [value per question]}`` (questions in one
            fixed order for every run of the experiment).
        prompts: per step, the prompt text of each group of ``groups`` (same order; ``[]`` where not read): what
            follows one prompt across the steps it comes back at.
    """

    arm: str
    seed: int
    metrics: list[dict[str, Any]]
    groups: list[list[list[float]]] = field(default_factory=list)
    heldout: dict[str, list[float]] = field(default_factory=dict)
    prompts: list[list[str]] = field(default_factory=list)

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
        keys: the resolved-config keys (or key prefixes, ``rlec.e3`` covers ``rlec.e3.*``) this arm may set
            differently from the baseline arm, besides those its overrides name: what an overlay
            (``algorithm=<name>``) sets. Any other difference is a confound, listed in the report
            (:func:`rlec.experiments.core.arm_differences`) and refused by the tests.
    """

    name: str
    what: str
    overrides: tuple[str, ...]
    then: tuple[str, ...] | None = None
    switch_fraction: float = 0.5
    keys: tuple[str, ...] = ()

    def named_keys(self) -> tuple[str, ...]:
        """Every key this arm names: its overrides' and its second stage's keys (``+``/``++``/``~`` dropped), then
        :attr:`keys`; an overlay (``algorithm=...``) names only what :attr:`keys` lists."""
        named = [o.partition("=")[0].lstrip("+~") for o in (*self.overrides, *(self.then or ()))]
        return tuple(dict.fromkeys(k for k in (*named, *self.keys) if k != "algorithm"))

    def names(self, key: str) -> bool:
        """Whether ``key`` (a dotted resolved-config key) is one of :meth:`named_keys` or below one."""
        return any(key == k or key.startswith(k + ".") for k in self.named_keys())

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
class Primary:
    """The one metric an experiment's verdict rests on, declared before the first launch (issue 57 item 1).

    The verdict compares each method arm with the baseline seed by seed: ``d_s = value(method, s) - value(baseline,
    s)`` (the arms share data order and seeds), with a 95% t-interval over the seeds
    (:func:`rlec.experiments.report.paired_interval`).

    Attributes:
        name: what it is, with its unit (``"probe-set entropy at T = 1, last 20% of steps (nats)"``).
        value: ``value(run)`` -> the arm-seed's one number (NaN: not measured; the message of
            :attr:`requires` says why).
        direction: +1 when the paper claims the method raises it, -1 when it lowers it.
        requires: per-step metric keys or held-out figures ``value`` reads: a run without them has no primary
            value, and the report names the missing one.
        sd: the paired per-seed SD measured so far (the power note's input; None: none measured).
        effect: the smallest difference worth detecting (same unit): with ``sd`` it sets the seeds
            (:func:`rlec.experiments.report.seeds_for_power`).
        sd_source: where ``sd`` was measured (a results file and figure).
    """

    name: str
    value: Callable[[Run], float]
    direction: int
    requires: tuple[str, ...] = ()
    sd: float | None = None
    effect: float = 0.0
    sd_source: str = ""


@dataclass(frozen=True)
class Secondary:
    """A secondary figure, paired like the primary one but never read as the verdict (issue 57 item 8).

    Attributes:
        name: what it is, with its unit.
        value: ``value(run)`` -> the arm-seed's one number (NaN: not measured).
    """

    name: str
    value: Callable[[Run], float]


@dataclass(frozen=True)
class Premise:
    """The premise gate (issue 57 item 2): what the baseline arm must show for the method to have something to counter.

    The baseline arm's first :attr:`seeds` seeds train before any method arm; ``check`` reads them. When it fails,
    the verdict is ``"premise absent"`` with the measured figures and the method arms are not trained.

    Attributes:
        what: the condition in words (``"GRPO's probe-set entropy falls by >= 40%"``).
        check: ``check(baseline_runs)`` -> ``(held, figures)``: ``held`` True / False, or None when a figure it needs
            was not measured (``figures`` then names it under ``"missing"``); ``figures`` the measured values, by name.
        seeds: baseline seeds the gate reads (2).
    """

    what: str
    check: Callable[[Sequence[Run]], tuple[bool | None, dict[str, Any]]]
    seeds: int = 2


@dataclass(frozen=True)
class PaperSetting:
    """One setting side by side: the paper's value and rlec's (issue 57 item 3).

    Attributes:
        what: the setting (``"clip ratio low / high"``).
        paper: the paper's value, with its source (section, script).
        rlec: rlec's value in this experiment; when :attr:`keys` is set, it must equal the experiment's settings for
            those keys, joined by ``" / "`` (a test checks it, so the table cannot drift from the runs).
        keys: the config keys that carry rlec's value (``()``: a property of the task or data, not one key).
        note: why rlec differs, where it does.
    """

    what: str
    paper: str
    rlec: str
    keys: tuple[str, ...] = ()
    note: str = ""


@dataclass(frozen=True)
class Probe:
    """Entropy measured on a fixed probe set (issue 57 item 4), not on the step's drawn batch.

    The batch entropy swings with the drawn prompts (its within-run SD was 0.07 nats against 0.004-0.027 between
    arms: ``docs/results/e3.json``); a fixed set of prompts sampled every :attr:`every` steps at T = 1 measures the
    policy. The values are read from the per-step metric :attr:`metric`.

    Attributes:
        prompts, samples: probe prompts (drawn once from the held-out pool, the same for every arm and seed) and
            responses per prompt.
        every: steps between measurements (and at the first and last step).
        temperature: 1.0 (the policy's own distribution; the compact-vocabulary model, no top-k).
        metric: the per-step metric key the measurement is logged under.
        pass_k: also grade the probe responses with the run's grader and log their pass@k (``rlec.probe.pass_k``:
            ``rlec/probe/pass@<k>`` and ``rlec/probe/pass@<k>/low_q``, :mod:`rlec.verl_plugin.probe`); None: not graded.
    """

    prompts: int = 64
    samples: int = 8
    every: int = 20
    temperature: float = 1.0
    metric: str = K.M_PROBE_ENTROPY
    pass_k: int | None = None

    def metrics(self) -> tuple[str, ...]:
        """Every per-step key the probe logs that an experiment stores: :attr:`metric`, and with :attr:`pass_k`
        ``rlec/probe/pass@<k>``, ``rlec/probe/pass@<k>/low_q`` and ``rlec/probe/pass@1``
        (:func:`rlec.probe_keys.pass_at_k_key`'s names; a test checks they agree)."""
        k = self.pass_k
        graded = () if k is None else (K.m_probe_pass_at(k), K.m_probe_pass_at(k, "low_q"), K.m_probe_pass_at(1))
        return (self.metric, *graded)

    def stamp(self) -> dict[str, Any]:
        """Its fields for a folder's ``experiment.json``; ``pass_k`` only where set (a folder stamped before the field
        existed, e3's gate run, stays valid)."""
        from dataclasses import asdict

        out = asdict(self)
        if out["pass_k"] is None:
            del out["pass_k"]
        return out


@dataclass(frozen=True)
class Band:
    """A band of base q the pilot keeps prompts from (:mod:`rlec.experiments.pilot`): the first :attr:`count` candidates
    (candidate order) with ``lo <= q <= hi`` (closed); e3_budget's hard-but-solvable and easy halves.

    Attributes:
        name: what the band is (``"hard"``), in the pilot file.
        lo, hi: the band's edges, 0 <= lo <= hi <= 1.
        count: prompts kept from it (the pilot file names any shortfall).
    """

    name: str
    lo: float
    hi: float
    count: int

    def __post_init__(self) -> None:
        """Refuse edges outside [0, 1], reversed, or a count below 1 (names the band)."""
        if not 0.0 <= self.lo <= self.hi <= 1.0 or self.count < 1:
            raise ValueError(f"pilot band {self.name!r}: [{self.lo}, {self.hi}] x {self.count}: expected "
                             "0 <= lo <= hi <= 1 and count >= 1")


QUICK_PROBE = (8, 4)  # probe prompts and samples of a --quick run (Experiment.quick)


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
            ``"targets"`` (additions at targets 0.1 / 0.8, RLEC's reward), ``"environments"`` (RLVE's) or ``"pool"``
            (a fixed pool of one environment's problems in the binary prompt, :attr:`pool`): one entry each of
            :data:`rlec.experiments.data_kinds.DATA_KINDS`.
        curves: per-step figures (plotted, averaged over the last quarter of steps in the table).
        heldout: held-out figures (None: none).
        seed_spread: per-step metrics whose spread across seeds is reported: the SD over seeds of each seed's final
            value (its mean over the last 20% of the steps, :func:`final_value`), and per comparison the ratio of the
            two arms' SDs with a two-sided F-test (:func:`rlec.experiments.report.spread_ratio`).
        steps, quick_steps: steps per arm-seed in a full and a ``--quick`` run.
        train_rows: addition training rows (``data`` binary / targets): fewer rows, more visits per prompt.
        quick_train_rows: the rows of a ``--quick`` run (None: ``train_rows`` scaled with its batch).
        baseline: the arm every other arm is compared with (the paper's baseline); it trains first.
        primary: the one metric the verdict rests on (printed before the first launch).
        premise: the premise gate (None: the experiment has none, e.g. RLEC's own claims).
        seeds: the seeds a verdict needs (the power note, ``docs/experiments.md``; at least 5): a run with fewer
            gets its paired intervals but no verdict.
        paper_settings: the paper's settings next to rlec's.
        probe: the fixed probe set the entropy is measured on (None: not used).
        pilot: the command that picks the informative-band prompts for this experiment (None: none).
        pilot_bands: the bands the pilot keeps prompts from (:class:`Band`, in order); empty: every candidate with q in
            :data:`INFORMATIVE_BAND` (open).
        pilot_figures: ``f(kept candidates)`` -> figures the pilot file stores beside the selection (an offline
            prediction from the measured q's); None: none.
        comparisons: ``(method, baseline)`` arm pairs the verdict reads (default: each method arm against
            :attr:`baseline`); RLEC's b schedule is compared with fixed b = 0 and with fixed b = 1.
        secondary: figures reported with the same paired intervals as the primary one, no verdict.
        task: the training / held-out task in words where it is not the additions of :attr:`data` (printed before the
            first launch and by ``--plan``).
        pool: with ``data="pool"``, the :class:`rlec.environments.pool.PoolConfig` of the training and held-out rows
            (:attr:`train_rows` training rows; the distinct right answers per prompt in ``shared/data/summary.json``).
        warm_start: the :class:`rlec.demo.warm_start.WarmStartConfig` every arm starts from (None: the demo's).
        quick_warm_start: the warm start of a ``--quick`` run (None: :attr:`warm_start`): a few steps of the same
            recipe, where the full one trains for minutes (the wiring check needs the build path, not the skill).
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
    baseline: str = ""
    primary: Primary | None = None
    premise: Premise | None = None
    seeds: int = 5
    paper_settings: tuple[PaperSetting, ...] = ()
    probe: Probe | None = None
    pilot: str | None = None
    pilot_bands: tuple[Band, ...] = ()
    pilot_figures: Callable[[list[dict[str, Any]]], dict[str, Any]] | None = None
    comparisons: tuple[tuple[str, str], ...] = ()
    secondary: tuple[Secondary, ...] = ()
    task: str = ""
    pool: Any = None
    warm_start: Any = None
    quick_warm_start: Any = None

    def __post_init__(self) -> None:
        """Refuse a spec without a primary metric or baseline, naming an arm it does not have, or with data of no
        known kind (:func:`rlec.experiments.data_kinds.data_kind` raises) or a pool that its data kind does not take."""
        names = [a.name for a in self.arms]
        if len(set(names)) != len(names):
            raise ValueError(f"experiment {self.name!r}: arm names repeat: {names}")
        if self.primary is None:
            raise ValueError(f"experiment {self.name!r}: no primary metric declared (spec.Primary): the verdict needs one")
        if self.baseline not in names:
            raise ValueError(f"experiment {self.name!r}: baseline arm {self.baseline!r} is not one of its arms "
                             f"({', '.join(names)})")
        for method, base in self.comparisons:
            if method not in names or base not in names:
                raise ValueError(f"experiment {self.name!r}: comparison {method!r} - {base!r} names an arm it does not "
                                 f"have ({', '.join(names)})")
        if data_kind(self.data).pool != (self.pool is not None):
            raise ValueError(f"experiment {self.name!r}: data {self.data!r} with pool {self.pool!r}: a pool is the data "
                             "of data='pool' only, and that data needs one")
        if self.seeds < 2:
            raise ValueError(f"experiment {self.name!r}: seeds = {self.seeds}: a paired t-interval needs at least 2")

    def method_arms(self) -> tuple[Arm, ...]:
        """Every arm but the baseline, in declaration order."""
        return tuple(a for a in self.arms if a.name != self.baseline)

    def pairs(self) -> tuple[tuple[str, str], ...]:
        """The paired comparisons ``(method arm, baseline arm)``: :attr:`comparisons`, or each method arm against
        :attr:`baseline`."""
        return self.comparisons or tuple((a.name, self.baseline) for a in self.method_arms())

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
            a copy with the batch, mini-batch, training rows and warm start (:attr:`quick_warm_start`) of a quick run
            (the arms unchanged), sampling with the demo's top-k where :data:`rlec.demo.pipeline.DEMO_SETTINGS` still
            has one, and a probe set of at most :data:`QUICK_PROBE` prompts and samples.

        Raises:
            ValueError: ``batch`` below 1, or :attr:`settings` without the batch key
                (``data.train_batch_size``) to scale.
        """
        if batch < 1:
            raise ValueError(f"experiment {self.name!r}: a quick batch of {batch} prompts: expected at least 1")
        if K.BATCH not in self.settings:
            raise ValueError(f"experiment {self.name!r}: settings have no {K.BATCH} to scale for --quick")
        from rlec.demo.pipeline import DEMO_SETTINGS

        full = int(self.settings[K.BATCH])
        batch = min(batch, full)
        settings = {**self.settings, K.BATCH: batch}
        # the wiring check samples as the demo does: while the toy model keeps its full vocabulary the demo's top-k
        # patch (DEMO_SETTINGS) stays, or untruncated sampling draws unused tokens and every answer is wrong (a quick
        # e3_budget run then had no right answer to rank prompts by); the compact-vocabulary model drops the patch
        if K.TOP_K in DEMO_SETTINGS:
            settings[K.TOP_K] = DEMO_SETTINGS[K.TOP_K]
        if K.MINI_BATCH in settings:
            settings[K.MINI_BATCH] = max(1, int(settings[K.MINI_BATCH]) * batch // full)
        rows = self.quick_train_rows or max(batch, self.train_rows * batch // full)
        # the wiring of the probe set, at a fraction of its cost (a full probe samples 4x a full step's rollouts)
        probe = None if self.probe is None else replace(self.probe, prompts=min(self.probe.prompts, QUICK_PROBE[0]),
                                                        samples=min(self.probe.samples, QUICK_PROBE[1]))
        return replace(self, settings=settings, train_rows=rows, probe=probe,
                       warm_start=self.quick_warm_start or self.warm_start)


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


def window_mean(values: Sequence[float], start: float, stop: float) -> float:
    """Mean of the steps in the fraction ``[start, stop)`` of the run (at least one step), NaN steps ignored.

    ``window_mean(v, 0.8, 1.0)`` is the last 20% of the steps. Returns NaN when none of them is measured.
    """
    x = np.asarray(values, dtype=float)
    if not len(x):
        return float("nan")
    lo = min(int(np.floor(start * len(x))), len(x) - 1)
    hi = max(lo + 1, int(np.ceil(stop * len(x))))
    x = x[lo:hi]
    return float(np.nanmean(x)) if (~np.isnan(x)).any() else float("nan")


def first_measured(values: Sequence[float]) -> float:
    """The first non-NaN value (a metric logged every N steps), NaN when none."""
    x = np.asarray(values, dtype=float)
    measured = x[~np.isnan(x)]
    return float(measured[0]) if len(measured) else float("nan")


FINAL_SHARE = 0.2  # "final": the last 20% of the steps (the primary metrics' window)


def final_value(values: Sequence[float]) -> float:
    """A run's final value of a per-step figure: its mean over the last :data:`FINAL_SHARE` of the steps (NaN steps
    ignored; NaN when none is measured)."""
    return window_mean(values, 1.0 - FINAL_SHARE, 1.0)


def metric_tail(key: str, share: float = 0.2) -> Callable[[Run], float]:
    """Primary value: the per-step metric ``key`` averaged over the last ``share`` of the steps."""
    return lambda run: window_mean(run.series(key), 1.0 - share, 1.0)


def heldout_mean(figure: str) -> Callable[[Run], float]:
    """Primary value: the held-out ``figure`` averaged over the questions (NaN when the run has no such figure)."""
    def value(run: Run) -> float:
        v = np.asarray(run.heldout.get(figure, []), dtype=float)
        return float(np.nanmean(v)) if len(v) and (~np.isnan(v)).any() else float("nan")
    return value


def heldout_gap(high: str, low: str) -> Callable[[Run], float]:
    """Primary value: the mean over the questions of held-out ``high`` minus ``low`` (e.g. pass@4 - pass@1)."""
    a, b = heldout_mean(high), heldout_mean(low)
    return lambda run: a(run) - b(run)


def all_wrong_after_solved(run: Run) -> list[float]:
    """Per step: among the groups whose prompt was solved (a response with reward > 0) at an earlier step, the share
    with no reward > 0 now: the hard-but-solvable prompts the dynamic budget is for (NaN: no such group that step,
    or the run has no prompt texts)."""
    solved: set[str] = set()
    out = []
    for t, step in enumerate(run.groups):
        names = run.prompts[t] if t < len(run.prompts) else []
        if len(names) != len(step):
            out.append(np.nan)
            continue
        again = [max(g) <= 0 for g, p in zip(step, names) if p in solved]
        out.append(float(np.mean(again)) if again else np.nan)
        solved |= {p for g, p in zip(step, names) if max(g) > 0}
    return out


def collapse_events(low_key: str, high_key: str, *, floor: float = 0.05, ceiling: float = 0.95,
                    length: int = 20) -> Callable[[Run], float]:
    """Primary value of RLEC's b-schedule claim: the number of collapse events in a run.

    A collapse event is a run of at least ``length`` consecutive steps in which the training coverage is below
    ``floor`` at both targets, or above ``ceiling`` at both (the policy answers nothing, or everything, whatever the
    target): issue 57 item 8. ``low_key`` / ``high_key``: the per-step coverage at the low and the high target
    (``rlec/p0.0-0.3/coverage``, ``rlec/p0.6-1.0/coverage``). NaN when neither is logged.
    """
    def value(run: Run) -> float:
        low, high = np.asarray(run.series(low_key)), np.asarray(run.series(high_key))
        if np.isnan(low).all() and np.isnan(high).all():
            return float("nan")
        events = 0
        for flags in ((low < floor) & (high < floor), (low > ceiling) & (high > ceiling)):
            streak = 0
            for flag in [*flags, False]:
                if flag:
                    streak += 1
                    continue
                events += streak >= length
                streak = 0
        return float(events)
    return value


def falls_by(curve: Callable[[Run], list[float]], fraction: float, name: str) -> Callable[[Sequence[Run]], tuple[bool | None, dict[str, Any]]]:
    """Premise check: the per-step figure ``curve`` falls by at least ``fraction`` from its first measured value to
    its mean over the last 20% of the steps (the mean over the baseline seeds of each seed's relative fall).

    Returns ``(held, figures)``: figures ``first``, ``last 20%`` and ``fall`` (seed means) named after ``name``;
    held None with ``missing`` when ``curve`` was not measured.
    """
    def check(runs: Sequence[Run]) -> tuple[bool | None, dict[str, Any]]:
        first = np.array([first_measured(curve(r)) for r in runs])
        last = np.array([window_mean(curve(r), 0.8, 1.0) for r in runs])
        if np.isnan(first).any() or np.isnan(last).any():
            return None, {"missing": name}
        fall = float(np.mean(1.0 - last / np.where(first == 0, np.nan, first)))
        figures = {f"{name}: first": float(first.mean()), f"{name}: last 20%": float(last.mean()),
                   f"{name}: fall": fall, f"{name}: fall needed": fraction}
        return bool(fall >= fraction), figures
    return check


def stops_rising(curve: Callable[[Run], list[float]], name: str) -> Callable[[Sequence[Run]], tuple[bool | None, dict[str, Any]]]:
    """Premise check: the per-step figure ``curve`` stops rising: its mean over the last 20% of the steps is no higher
    than over the 20% before (mean over the baseline seeds)."""
    def check(runs: Sequence[Run]) -> tuple[bool | None, dict[str, Any]]:
        before = np.array([window_mean(curve(r), 0.6, 0.8) for r in runs])
        last = np.array([window_mean(curve(r), 0.8, 1.0) for r in runs])
        if np.isnan(before).any() or np.isnan(last).any():
            return None, {"missing": name}
        rise = float(np.mean(last - before))
        return bool(rise <= 0.0), {f"{name}: steps 60-80%": float(before.mean()), f"{name}: last 20%": float(last.mean()),
                                   f"{name}: rise": rise}
    return check


def at_least(curve: Callable[[Run], list[float]], floor: float, name: str) -> Callable[[Sequence[Run]], tuple[bool | None, dict[str, Any]]]:
    """Premise check: the per-step figure ``curve``, averaged over the second half of the steps and the baseline
    seeds, is at least ``floor``."""
    def check(runs: Sequence[Run]) -> tuple[bool | None, dict[str, Any]]:
        vals = np.array([window_mean(curve(r), 0.5, 1.0) for r in runs])
        if np.isnan(vals).any():
            return None, {"missing": name}
        return bool(vals.mean() >= floor), {f"{name}: second half": float(vals.mean()), f"{name}: needed": floor}
    return check


def all_hold(*checks: Callable[[Sequence[Run]], tuple[bool | None, dict[str, Any]]]) -> Callable[[Sequence[Run]], tuple[bool | None, dict[str, Any]]]:
    """Premise check: every one of ``checks`` holds (None when one is unmeasured and none failed)."""
    def check(runs: Sequence[Run]) -> tuple[bool | None, dict[str, Any]]:
        held: list[bool | None] = []
        figures: dict[str, Any] = {}
        for c in checks:
            h, f = c(runs)
            held.append(h)
            missing = [*figures.get("missing", "").split(", "), f.pop("missing", "")]
            figures.update(f)
            if any(missing):
                figures["missing"] = ", ".join(m for m in missing if m)
        if False in held:
            return False, figures
        return (None if None in held else True), figures
    return check


def series_of(key: str) -> Callable[[Run], list[float]]:
    """The per-step metric ``key`` as a figure for the premise checks."""
    return lambda run: run.series(key)


INFORMATIVE_BAND = (0.05, 0.95)  # base q of the prompts a pilot keeps (issue 57 item 5), open interval
PILOT_SAMPLES = 32  # samples per candidate prompt in the pilot


def shared_settings(**extra: Any) -> dict[str, Any]:
    """The settings every arm of every experiment trains with (``extra`` adds or replaces an experiment's own).

    Sampling at T = 1 over the whole vocabulary (top-k -1: no truncation, as the papers sample; the compact-vocabulary
    toy model makes the sampled, trained and measured distributions the same); from the demo
    (:data:`rlec.demo.pipeline.DEMO_SETTINGS`, one home): lr 1e-4, responses of at most 24 tokens. Here: 16 prompts x
    8 responses per step, PPO mini-batches of 8 prompts (2 updates per rollout: Cui et al.'s), verl's default
    symmetric clip 0.2 / 0.2 and GRPO's std-normalised advantage (the papers' baseline, not RLEC's mean-only one),
    prompts of at most 256 tokens (the environment prompts fit; verl pads to it on CPU).
    """
    from rlec.demo.pipeline import DEMO_SETTINGS

    out: dict[str, Any] = {K.BATCH: 16, K.ROLLOUT_N: 8, K.MAX_PROMPT: 256, K.TEMPERATURE: 1.0, K.TOP_K: -1}
    out.update({k: DEMO_SETTINGS[k] for k in (K.LR, K.MAX_RESPONSE)})
    out.update({K.MINI_BATCH: 8, K.MICRO_BATCH: 16, K.CLIP_LOW: 0.2, K.CLIP_HIGH: 0.2, K.NORM_BY_STD: True})
    out.update(extra)
    return out


def common_paper_settings(paper: str) -> tuple[PaperSetting, ...]:
    """The sampling line every experiment shares, with ``paper``'s value."""
    return (PaperSetting("sampling temperature / top-k", f"{paper}: T = 1, no top-k", "1.0 / -1", (K.TEMPERATURE, K.TOP_K),
                         "the compact-vocabulary toy model: sampled = trained = measured distribution"),)
