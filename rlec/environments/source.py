"""The environment prompt source: verl rows generated on the fly, difficulty adapted per environment.

Row k of a run is a pure function of (the config, k, the controllers' current upper bounds)::

    rng        = random.Random("rlec.environments.source/<seed>/<k>")     # one generator per row
    env        ~ the configured environments, uniformly or by weight
    difficulty ~ U{max(0, h_env - w + 1), ..., h_env}                      # rlec.environments.controller
    seed       = 2 * rng.getrandbits(47)                                  # even: training problems
    objective  = binary with probability 0.1 (no target in the prompt), else RLEC with
                 p ~ U{0.01, ..., 0.90}                                    # like the static data (rlec.data.mix)
    row        = verl's row for env.generate(seed, difficulty) at that target

Environments that generate elsewhere (RLVE-Gym's, in :mod:`rlec.environments.gym_pool`) are
generated ahead: when row k is asked for and was not planned, the first draws of rows
k, ..., k + ``lookahead`` - 1 are computed at the controllers' current h and their problems submitted
to the pool together, so they generate in parallel and one slow problem delays only its own row.
A row taken later looks its draw up among the submitted problems by (environment, seed,
difficulty); a draw that changed meanwhile (h rose) or a problem that did not generate is drawn
and generated as without look-ahead. So the rows are the same with and without look-ahead, in
every order the problems finish.

Evaluation sets use odd seeds (:mod:`rlec.environments.testset`), so no test problem is ever a
training problem. After each training step :meth:`EnvironmentSource.update` feeds every sample's
(environment, difficulty, correct) to the environment's controller and returns the step's
``rlve/<env>/difficulty``, ``rlve/<env>/accuracy_at_h`` and ``rlve/<env>/share`` metrics.
:meth:`EnvironmentSource.state_dict` (row counter + controllers) is all a resumed run needs to
continue exactly as an uninterrupted one.

The rows follow rlec's data contract (``rlec.data.contract``, docs/data.md) with three more
``extra_info`` keys: ``environment``, ``difficulty`` and ``env_seed``; ``data_source`` is
``rlve/<env>`` and ``reward_model.ground_truth`` the problem as JSON (``Problem.to_json``).
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from rlec.data.mix import BINARY, RLEC, draw_targets, target_grid
from rlec.environments.base import Environment, Problem
from rlec.config_base import Finding
from rlec.environments.controller import DEFAULT_THRESHOLD, DEFAULT_WINDOW, DifficultyController
from rlec.environments.gym_pool import GenerationFailed
from rlec.environments.registry import data_source_of, get_environment, parse_environment_names
from rlec.prompts import build_messages
from rlec.reward.formula import check_target
from rlec.settings import EXACT_INT, plain, read_section

ABILITY = "rlve"
DEFAULT_LOOKAHEAD = 256  # rows submitted together (rlec's cluster batch: 256 prompts)
# the most rows submitted ahead: 16 cluster batches. The rows ahead are generated and held before the first is
# served (a lookahead of 1,000,000 held 330 MB after 40 s and served nothing)
MAX_LOOKAHEAD = 4096
MAX_REDRAWS = 16  # problems drawn for one row before giving up (only RLVE-Gym's can fail to generate)
METRIC_PREFIX = "rlve"
IGNORED_KEYS = ("enable", "rows_per_epoch")
_EXACT = {EXACT_INT: True}  # a level or a count of the source: a whole float (1e9) is refused, not rounded
SETTINGS_KEY = "rlec.rlve"  # the key users set (data.rlve is ${rlec.rlve}): every error names rlec.rlve.<key>

__all__ = ["ABILITY", "EnvironmentSource", "SourceConfig", "problem_row", "question_id"]


@dataclass(frozen=True)
class SourceConfig:
    """Settings of an :class:`EnvironmentSource` (``rlec.rlve`` in the verl config).

    Read by the generic reader (:func:`rlec.settings.read_section`, types) and validated by
    :meth:`check` (ranges, names, caps), both in :meth:`from_mapping` (or
    :meth:`rlec.algorithms.rlve.RLVESettings.from_config`); construction itself checks nothing, so
    an :class:`EnvironmentSource` takes settings already validated. Defaults: the dataclass; the
    overlay ``megatron_configs/algorithm/rlve.yaml`` repeats them for its readers
    (``tests/environments/test_source.py`` pins them equal).

    Attributes:
        environments: names of registered environments, ``all`` (the built-in ones), RLVE-Gym's
            names or globs; a list or a comma-separated string (resolved to names by :meth:`resolved`).
        weights: sampling weights, one per environment (or ``{name: weight}``); None = uniform.
        seed: the seed of every random choice of the source.
        samples_per_prompt: n, the rollouts per prompt (verl's ``actor_rollout_ref.rollout.n``).
        min_samples_factor: a decision at h needs ``min_samples_factor * n`` samples at h (RLVE: 8).
        window: w, the width of the difficulty range [h - w + 1, h] (RLVE: 4).
        threshold: the accuracy at h that raises h (RLVE: 0.9).
        initial_difficulty: the starting h of every environment.
        difficulty: per-environment ``{"initial": int, "maximum": int}`` overrides, e.g. the Maze's
            training sizes 9..15 are ``{"maze": {"initial": 2, "maximum": 5}}``.
        binary_fraction: share of rows with the binary objective (no target, p = 0).
        target_min, target_max: the RLEC target range; p is uniform on its 0.01 grid, 0 excluded.
        max_prompt_tokens: the prompt-token budget (verl's ``data.max_prompt_length``): an
            environment's cap is the highest difficulty whose prompts fit it
            (:meth:`Environment.cap`; RLVE-Gym's from its level table); None: the environments' own caps.
        lookahead: rows whose problems are submitted together to environments that generate
            elsewhere (RLVE-Gym's), about one training batch; 0 or 1: one row at a time.
    """

    environments: str | tuple[str, ...] = ("all",)
    weights: tuple[float, ...] | Mapping[str, float] | None = None
    seed: int = field(default=0, metadata=_EXACT)
    samples_per_prompt: int = field(default=8, metadata=_EXACT)
    min_samples_factor: int = field(default=8, metadata=_EXACT)
    window: int = field(default=DEFAULT_WINDOW, metadata=_EXACT)
    threshold: float = DEFAULT_THRESHOLD
    initial_difficulty: int = field(default=0, metadata=_EXACT)
    difficulty: Mapping[str, Any] = field(default_factory=dict)
    binary_fraction: float = 0.1
    target_min: float = 0.0
    target_max: float = 0.9
    max_prompt_tokens: int | None = field(default=None, metadata=_EXACT)
    lookahead: int = field(default=DEFAULT_LOOKAHEAD, metadata=_EXACT)

    def check(self, prefix: str = SETTINGS_KEY) -> list[Finding]:
        """One error per value out of range, each naming its full key (``rlec.rlve.<key>``): environment
        names (unknown, none, twice), weights, counts, lookahead, difficulty overrides, targets, caps."""
        out: list[Finding] = []

        def error(key: str, message: str) -> None:
            out.append(Finding("error", f"{prefix}.{key}", f"{prefix}.{message}"))

        given = [str(g).strip() for g in _items(self.environments)]
        names: tuple[str, ...] | None = None
        if not any(given):
            error("environments", f"environments {_shown(self.environments)!r} names no environment: list them, or "
                  "[all] for the built-in ones (an empty list never means all)")
        elif sorted({g for g in given if g and given.count(g) > 1}):
            twice = sorted({g for g in given if g and given.count(g) > 1})
            error("environments", f"environments name {twice} more than once: list each environment once")
        else:
            try:
                names = tuple(parse_environment_names(self.environments))
            except ValueError as exc:
                error("environments", f"environments: {exc}")
        for key in ("seed", "samples_per_prompt", "min_samples_factor", "window", "initial_difficulty", "lookahead"):
            value = getattr(self, key)
            low = 0 if key in ("seed", "initial_difficulty", "lookahead") else 1
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                error(key, f"{key} must be an int >= {low}, got {value!r}")
        if isinstance(self.lookahead, int) and self.lookahead > MAX_LOOKAHEAD:
            error("lookahead", f"lookahead must be <= {MAX_LOOKAHEAD} rows (about one training batch: the rows ahead "
                  f"are generated and held before the first is served), got {self.lookahead}")
        if not 0.0 < self.threshold <= 1.0:
            error("threshold", f"threshold must be in (0, 1], got {self.threshold!r}")
        if self.max_prompt_tokens is not None and self.max_prompt_tokens < 1:
            error("max_prompt_tokens", f"max_prompt_tokens must be an int >= 1 or null, got {self.max_prompt_tokens!r}")
        if not 0.0 <= self.binary_fraction <= 1.0:
            error("binary_fraction", f"binary_fraction must be in [0, 1], got {self.binary_fraction}")
        targets_ok = True
        for key in ("target_min", "target_max"):
            try:
                check_target(getattr(self, key))
            except ValueError as exc:
                error(key, f"{key}: {exc}")
                targets_ok = False
        if targets_ok:
            lo, hi = target_grid(self.target_min, self.target_max)
            if lo > hi and self.binary_fraction < 1.0:
                error("target_max", f"target_min, target_max = [{self.target_min}, {self.target_max}]: no target on the "
                      "0.01 grid of that range other than 0")
        if names is None:
            return out
        weights = self.weights
        if isinstance(weights, Mapping):
            unknown = sorted(set(weights) - set(names))
            if unknown:
                error("weights", f"weights name environments that are not configured: {unknown}")
            weights = tuple(float(weights.get(n, 0.0)) for n in names)
        if weights is not None and (len(weights) != len(names) or any(w < 0 for w in weights) or sum(weights) <= 0):
            error("weights", f"weights must be {len(names)} non-negative numbers with a positive sum "
                  f"(one per environment {list(names)}), got {list(weights)}")
        unknown = sorted(set(self.difficulty) - set(names))
        if unknown:
            error("difficulty", f"difficulty overrides name environments that are not configured: {unknown}")
        overrides_ok = not unknown
        for name, override in self.difficulty.items():
            if not isinstance(override, Mapping):
                error(f"difficulty.{name}", f"difficulty.{name} must be a mapping {{initial, maximum}}, got {override!r}")
                overrides_ok = False
                continue
            extra = sorted(set(override) - {"initial", "maximum"})
            if extra:
                error(f"difficulty.{name}", f"difficulty.{name}: unknown keys {extra} (allowed: initial, maximum)")
                overrides_ok = False
            for key, value in override.items():
                if value is None and key == "maximum":
                    continue
                if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                    error(f"difficulty.{name}.{key}", f"difficulty.{name}.{key} must be an int >= 0, got {value!r} (a "
                          "difficulty is a level, never rounded)")
                    overrides_ok = False
        if overrides_ok and not out:
            resolved = self.resolved(names)
            for name in names:
                try:
                    resolved.controller(name)  # initial / maximum against the environment's cap
                except ValueError as exc:
                    out.append(Finding("error", f"{prefix}.difficulty", f"{prefix}: {exc}"))
        return out

    def resolved(self, names: tuple[str, ...] | None = None) -> "SourceConfig":
        """These settings with ``environments`` as registered names and ``weights`` as one per name
        (settings :meth:`check` accepted)."""
        names = tuple(parse_environment_names(self.environments)) if names is None else names
        weights = self.weights
        if isinstance(weights, Mapping):
            weights = tuple(float(weights.get(n, 0.0)) for n in names)
        elif weights is not None:
            weights = tuple(float(w) for w in weights)
        return dataclasses.replace(self, environments=names, weights=weights)

    @classmethod
    def from_mapping(cls, mapping: Mapping[str, Any] | None, ignore: tuple[str, ...] = IGNORED_KEYS) -> "SourceConfig":
        """Read (:func:`rlec.settings.read_section`), check (:meth:`check`) and resolve a config section
        (``rlec.rlve``; a plain dict or a resolved DictConfig): the entry of direct callers.

        Args:
            mapping: the settings; keys are the field names.
            ignore: keys of the section that belong to its users, not to the source
                (default: ``enable``, read by the trainer, and ``rows_per_epoch``, read by the dataset).

        Raises:
            ValueError: an unknown key (the message lists the allowed ones) or a bad value (the first
                error of :meth:`check`, naming the full key).
        """
        data = {k: v for k, v in dict(plain(mapping) or {}).items() if k not in ignore}
        allowed = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - allowed)
        if unknown:
            raise ValueError(f"unknown rlve settings {unknown}; allowed: {sorted(allowed)}")
        data = {k: v for k, v in data.items() if v is not None or k in ("weights", "max_prompt_tokens")}
        settings = read_section(cls, {"section": data}, "section", name=SETTINGS_KEY)
        return settings.validated()

    def validated(self) -> "SourceConfig":
        """:meth:`resolved` once :meth:`check` finds no error.

        Raises:
            ValueError: the first error of :meth:`check` (its message names the full key).
        """
        for finding in self.check():
            if finding.level == "error":
                raise ValueError(finding.message)
        return self.resolved()

    @property
    def min_samples(self) -> int:
        """Samples at h per decision: ``min_samples_factor * samples_per_prompt``."""
        return self.min_samples_factor * self.samples_per_prompt

    def controller(self, name: str) -> DifficultyController:
        """A fresh controller for environment ``name`` (its cap: the tighter of the config's and the environment's)."""
        override = self.difficulty.get(name, {})
        env_max = get_environment(name).cap(self.max_prompt_tokens)
        if env_max is not None and env_max < 0:
            raise ValueError(f"rlve environment {name!r} is refused: its easiest prompts exceed "
                             f"max_prompt_tokens {self.max_prompt_tokens}")
        maximum = override.get("maximum", env_max)
        if maximum is not None and env_max is not None and maximum > env_max:
            raise ValueError(f"rlve difficulty.{name}.maximum {maximum} is above the environment's cap {env_max}")
        try:
            return DifficultyController(self.min_samples, initial=int(override.get("initial", self.initial_difficulty)),
                                        window=self.window, threshold=self.threshold,
                                        maximum=None if maximum is None else int(maximum))
        except ValueError as exc:
            raise ValueError(f"rlve controller of {name!r}: {exc}") from None


def _items(spec: Any) -> list[Any]:
    return spec.split(",") if isinstance(spec, str) else list(spec)


def _shown(spec: Any) -> Any:
    return list(spec) if isinstance(spec, tuple) else spec


def question_id(problem: Problem) -> str:
    """``<env>-d<difficulty>-s<seed>``: unique per problem."""
    return f"{problem.environment}-d{problem.difficulty}-s{problem.seed}"


def problem_row(problem: Problem, *, index: int, split: str, objective: str = BINARY, target_p: float = 0.0) -> dict[str, Any]:
    """The verl row of one problem (rlec's data contract plus ``environment``, ``difficulty``, ``env_seed``).

    ``extra_info.source`` is ``<env>/d<difficulty>``, the group evaluation metrics report.

    Raises:
        ValueError: an unknown objective, or a target outside [0, 1) (the prompt's check,
            :func:`rlec.prompts.instruction`).
    """
    if objective not in (BINARY, RLEC):
        raise ValueError(f"objective must be {BINARY!r} or {RLEC!r}, got {objective!r}")
    p = 0.0 if objective == BINARY else target_p  # checked where the prompt states it (build_messages, below)
    return {
        "data_source": data_source_of(problem.environment),
        "prompt": build_messages(problem.prompt, None if objective == BINARY else p),
        "ability": ABILITY,
        "reward_model": {"style": "rule", "ground_truth": problem.to_json()},
        "extra_info": {
            "index": int(index),
            "split": split,
            "question_id": question_id(problem),
            "source": f"{problem.environment}/d{problem.difficulty}",
            "target_p": float(p),
            "objective": objective,
            "repeat": 0,
            "task_text": problem.prompt,
            "drop_scheme": "",
            "dropped_titles": [],
            "environment": problem.environment,
            "difficulty": problem.difficulty,
            "env_seed": problem.seed,
        },
    }


class EnvironmentSource:
    """Training rows from environments, with a difficulty controller per environment.

    Args:
        config: a :class:`SourceConfig` (or a mapping for :meth:`SourceConfig.from_mapping`).

    Attributes:
        controllers: ``{environment name: DifficultyController}``.
        counter: rows generated so far (row k is generated from k).
    """

    def __init__(self, config: SourceConfig | Mapping[str, Any] | None = None):
        self.config = config if isinstance(config, SourceConfig) else SourceConfig.from_mapping(config)
        self.environments: dict[str, Environment] = {n: get_environment(n) for n in self.config.environments}
        self.controllers = {n: self.config.controller(n) for n in self.config.environments}
        self.counter = 0
        self.skipped: dict[str, int] = {}  # problems skipped because they did not generate, per environment
        # look-ahead: rows planned up to (excluded), and the submitted problems by (environment, seed, difficulty)
        self._planned_until = 0
        self._ahead: dict[tuple[str, int, int], Any] = {}
        self._ahead_on = any(env.generates_elsewhere for env in self.environments.values())

    def _rng(self, index: int) -> random.Random:
        return random.Random(f"rlec.environments.source/{self.config.seed}/{index}")

    def _draw(self, rng: random.Random) -> tuple[str, int, int]:
        """(environment, seed, difficulty) of the next problem drawn from a row's ``rng``."""
        name = rng.choices(self.config.environments, weights=self.config.weights)[0]
        difficulty = self.controllers[name].sample(rng)
        return name, 2 * rng.getrandbits(47), difficulty

    def _submit_ahead(self, index: int) -> None:
        """Submit the first problems of rows [index, index + lookahead) that generate elsewhere (module docstring)."""
        end = index + max(1, self.config.lookahead)
        ahead: dict[tuple[str, int, int], Any] = {}
        for k in range(index, end):
            name, seed, difficulty = key = self._draw(self._rng(k))
            env = self.environments[name]
            if env.generates_elsewhere:  # an earlier plan's problem is reused; those no longer drawn are dropped
                ahead[key] = self._ahead.get(key) or env.submit(seed, difficulty)
        self._ahead, self._planned_until = ahead, end

    @property
    def pending(self) -> int:
        """Problems submitted ahead (look-ahead) and not taken by a row yet."""
        return len(self._ahead)

    def _problem(self, name: str, seed: int, difficulty: int) -> Problem:
        """The problem of a draw: its submitted future's when there is one, else generated now."""
        future = self._ahead.pop((name, seed, difficulty), None)
        if future is None:
            return self.environments[name].generate(seed, difficulty)
        return future.result()

    def row(self, index: int) -> dict[str, Any]:
        """Row ``index`` at the controllers' current state (does not advance the counter)."""
        cfg = self.config
        rng = self._rng(index)
        for _ in range(MAX_REDRAWS):
            name, seed, difficulty = self._draw(rng)
            try:
                problem = self._problem(name, seed, difficulty)
                break
            except GenerationFailed:  # RLVE-Gym: counted and logged by the pool; draw another problem from the same rng
                self.skipped[name] = self.skipped.get(name, 0) + 1
        else:
            raise RuntimeError(f"rlve row {index}: {MAX_REDRAWS} drawn problems in a row did not generate")
        if rng.random() < cfg.binary_fraction:
            return problem_row(problem, index=index, split="train")
        p = draw_targets(rng, cfg.target_min, cfg.target_max)
        return problem_row(problem, index=index, split="train", objective=RLEC, target_p=p)

    def next_row(self) -> dict[str, Any]:
        """The next row (row :attr:`counter`), advancing the counter; submits the next ``lookahead``
        rows' problems first when this row was not planned yet (module docstring)."""
        if self._ahead_on and not self.counter < self._planned_until:
            self._submit_ahead(self.counter)
        row = self.row(self.counter)
        self.counter += 1
        return row

    def update(self, samples: Iterable[Mapping[str, Any]]) -> dict[str, float]:
        """Feed one training step's samples to the controllers; return the step's metrics.

        Args:
            samples: one mapping per sample (every response, not every prompt) with
                ``environment`` (None or absent for a static-data sample), ``difficulty`` and
                ``correct`` (bool or 0/1). Samples of environments this source does not run are
                counted as other samples.

        Returns:
            ``rlve/<env>/difficulty`` (h after the update), ``rlve/<env>/accuracy_at_h`` (accuracy
            of the samples counted at h since the last decision, this step's included; absent
            while none), ``rlve/<env>/share`` (the environment's share of all the step's samples)
            for every configured environment, ``rlve/share`` (all environments together), and with
            RLVE-Gym environments the pool's counters since start, ``rlve/gym/<Identifier>/<counter>``
            (generated, gen_failures, gen_timeouts, slow_retries, retries, skipped, verified, verify_timeouts,
            verify_errors; :mod:`rlec.environments.gym_pool`).
        """
        per_env: dict[str, list[tuple[int, bool]]] = {name: [] for name in self.controllers}
        total = 0
        for sample in samples:
            total += 1
            name = sample.get("environment")
            if name in per_env:
                per_env[name].append((int(sample["difficulty"]), bool(float(sample["correct"]))))
        metrics: dict[str, float] = {}
        for name, outcomes in per_env.items():
            result = self.controllers[name].update(outcomes)
            if result.raised:
                self._planned_until = 0  # the next row plans again at the new h
            metrics[f"{METRIC_PREFIX}/{name}/difficulty"] = float(result.h)
            if result.accuracy_at_h is not None:
                metrics[f"{METRIC_PREFIX}/{name}/accuracy_at_h"] = result.accuracy_at_h
            metrics[f"{METRIC_PREFIX}/{name}/share"] = len(outcomes) / total if total else 0.0
        metrics[f"{METRIC_PREFIX}/share"] = sum(len(o) for o in per_env.values()) / total if total else 0.0
        pools = {id(p): p for p in (getattr(env, "pool", None) for env in self.environments.values()) if p is not None}
        for pool in pools.values():  # RLVE-Gym's: the counters of the pool(s) its environments run in
            metrics.update(pool.metrics(f"{METRIC_PREFIX}/gym"))
        return metrics

    def difficulties(self) -> dict[str, int]:
        """``{environment: current upper bound h}``."""
        return {name: c.h for name, c in self.controllers.items()}

    def state_dict(self) -> dict[str, Any]:
        """``{"counter": int, "controllers": {name: controller state}}`` (plain Python values)."""
        return {"counter": self.counter, "controllers": {n: c.state_dict() for n, c in self.controllers.items()}}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output.

        Controllers of environments no longer configured are dropped; newly configured ones keep
        their fresh state (so a resumed run may add an environment).

        Raises:
            ValueError: a missing key or a bad controller state.
        """
        try:
            counter, controllers = int(state["counter"]), dict(state["controllers"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"environment source state needs 'counter' and 'controllers' ({exc})") from None
        for name, controller_state in controllers.items():
            if name in self.controllers:
                self.controllers[name].load_state_dict(controller_state)
        self.counter = counter
        self._planned_until = 0  # plan again from the restored counter and h

    def __repr__(self) -> str:
        return f"EnvironmentSource(counter={self.counter}, h={self.difficulties()})"
