"""rlec's own settings outside the algorithms, as one typed schema read once from the composed config.

The sections ``rlec.schedule``, ``rlec.grading``, ``rlec.metrics``, ``rlec.checkpoint``,
``rlec.check`` and ``rlec.cpu`` of the config (``megatron_configs/recipe.yaml``,
``layout/cpu.yaml``: the places users read the defaults; ``tests/test_settings.py``
checks that every field's default below equals the composed YAML) become frozen dataclasses,
as verl turns its ``algorithm`` section into ``AlgoConfig`` with ``omega_conf_to_dataclass``:

    settings = RlecSettings.from_config(cfg)   # reads, type-checks and range-checks every field
    settings.grading.timeout_s                  # 5.0

:meth:`RlecSettings.from_config` refuses, naming the full key, the value and the rule
(:class:`SettingError`): a key the schema does not know (``+rlec.grading.timout_s=1``), an
unknown ``rlec.<section>``, a value of the wrong type (``rlec.grading.timeout_s=abc``, a string
for a switch) and a value out of range (each dataclass's ``check()``). The algorithms' sections
(``rlec.e3``, ``rlec.rlve``, any registered algorithm's ``rlec.<name>``) are read and checked by the algorithms
themselves; a section neither owns is refused by :func:`rlec.rules.settings_rules.settings_rules`.
This module imports neither verl nor torch; verl's own keys are checked by
:mod:`rlec.rules.settings_rules`.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import math
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Mapping, TypeVar

from rlec.config_base import CONFIG_DIR, select

T = TypeVar("T")
# field metadata key: the int field refuses a whole float too (RLVE's levels and counts: never rounded)
EXACT_INT = "exact_int"

__all__ = [
    "EXACT_INT", "CheckSettings", "CheckpointSettings", "CpuEvalSettings", "CpuSettings", "GradingSettings",
    "MetricsSettings", "ProbeSettings", "RlecSettings", "ScheduleSettings", "SettingError", "compute_capability",
    "plain", "read_section",
]



class SettingError(ValueError):
    """A setting is refused: ``key`` (full dotted key), ``value`` (as given) and ``rule`` (what is expected)."""

    def __init__(self, key: str, value: Any, rule: str) -> None:
        self.key, self.value, self.rule = key, value, rule
        super().__init__(f"{key}={value!r}: {rule}")


def _finite(value: float) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


def compute_capability(arch: str) -> int | None:
    """``sm_90`` / ``sm90`` / ``9.0`` / ``90`` -> 90 (a GPU's compute capability x 10); None when unreadable."""
    text = str(arch).strip().lower().removeprefix("sm_").removeprefix("sm")
    if "." in text:
        major, _, minor = text.partition(".")
        text = major + minor
    return int(text) if text.isdigit() else None


@dataclass(frozen=True)
class ScheduleSettings:
    """``rlec.schedule``: b moves linearly from ``start_value`` to ``end_value`` over [``start_step``, ``end_step``].

    b values in [0, 1] (the reward family R_p^(b), :mod:`rlec.reward.formula`); steps are verl's global steps (from 1);
    ``end_step`` None = the run's total training steps (:func:`rlec.reward.schedule.schedule_length`).
    """

    start_value: float = 0.0
    end_value: float = 1.0
    start_step: int = 1
    end_step: int | None = None

    def check(self, prefix: str = "rlec.schedule") -> None:
        """Raises :class:`SettingError` for b outside [0, 1] (or NaN), a negative start, end <= start."""
        for name in ("start_value", "end_value"):
            value = getattr(self, name)
            if not (_finite(value) and 0.0 <= value <= 1.0):
                raise SettingError(f"{prefix}.{name}", value, "b must be a number in [0, 1]")
        if self.start_step < 0:
            raise SettingError(f"{prefix}.start_step", self.start_step, "must be a global step >= 0")
        if self.end_step is not None and self.end_step <= self.start_step:
            raise SettingError(f"{prefix}.end_step", self.end_step,
                               f"must be > start_step = {self.start_step} (or null: the run's total training steps)")


MAX_GRADING_TIMEOUT_S = 60.0
"""The longest per-item grading limit a run accepts (seconds). The limit is the grader's hang guard: math-verify
compares a legitimate answer in milliseconds (its own default limit is 5 s), and an item that runs into the limit
holds a grading worker that long, every step it recurs; at 60 s a few such items already stall a step by minutes,
and a larger limit (``1e308`` was accepted) turns the guard off."""


@dataclass(frozen=True)
class GradingSettings:
    """``rlec.grading``: ``timeout_s`` is math-verify's per-item limit in seconds, in (0, :data:`MAX_GRADING_TIMEOUT_S`]."""

    timeout_s: float = 5.0

    def check(self, prefix: str = "rlec.grading") -> None:
        """Raises :class:`SettingError` for a limit that is not a finite number in (0, :data:`MAX_GRADING_TIMEOUT_S`]."""
        if not (_finite(self.timeout_s) and 0 < self.timeout_s <= MAX_GRADING_TIMEOUT_S):
            raise SettingError(f"{prefix}.timeout_s", self.timeout_s,
                               f"must be a finite number of seconds > 0 and <= {MAX_GRADING_TIMEOUT_S:g}: the grader's per-item "
                               "hang guard (math-verify takes milliseconds on a legitimate answer; a larger limit lets "
                               "a hung item stall its worker for minutes every step)")


@dataclass(frozen=True)
class MetricsSettings:
    """``rlec.metrics``: ``target_bucket_edges`` split the target p into the buckets of the ``rlec/...`` metrics.

    Edges are strictly increasing, start at 0 and end at 1 (buckets [e_0, e_1), ..., [e_{k-1}, 1]).
    """

    target_bucket_edges: tuple[float, ...] = (0.0, 0.3, 0.6, 1.0)

    def check(self, prefix: str = "rlec.metrics") -> None:
        """Raises :class:`SettingError` for fewer than 2 edges, edges outside [0, 1], not increasing, not from 0 to 1."""
        edges, key = self.target_bucket_edges, f"{prefix}.target_bucket_edges"
        if len(edges) < 2 or not all(_finite(e) and 0.0 <= e <= 1.0 for e in edges):
            raise SettingError(key, list(edges), "must be at least 2 numbers in [0, 1]")
        if any(b <= a for a, b in zip(edges, edges[1:])):
            raise SettingError(key, list(edges), "must be strictly increasing")
        if edges[0] != 0.0 or edges[-1] != 1.0:
            raise SettingError(key, list(edges), "must cover every target p: start at 0 and end at 1")


@dataclass(frozen=True)
class ProbeSettings:
    """``rlec.probe``: the fixed probe set whose entropy the trainer logs as ``rlec/probe/entropy``
    (:mod:`rlec.verl_plugin.probe`).

    Attributes:
        file: a parquet of probe prompts in verl's data format (``prompt`` = chat messages); null: no probe.
        every: steps between measurements (also at the first and the last step), >= 1.
        samples: responses per probe prompt, >= 1.
        temperature: the sampling and measuring temperature, > 0 (1.0: the policy's own distribution).
        pass_k: also grade the probe responses and log ``rlec/probe/pass@<k>`` (null: not graded), 1 <= k <= samples.
    """

    file: str | None = None
    every: int = 20
    samples: int = 8
    temperature: float = 1.0
    pass_k: int | None = None

    def check(self, prefix: str = "rlec.probe") -> None:
        """Raises :class:`SettingError` for a file that is not a ``.parquet`` path, ``every`` or ``samples`` < 1, a
        temperature that is not a finite number > 0, or a ``pass_k`` outside [1, samples]."""
        if self.file is not None and not str(self.file).endswith(".parquet"):
            raise SettingError(f"{prefix}.file", self.file, "must be null or the path of a .parquet file of probe prompts")
        for name in ("every", "samples"):
            if getattr(self, name) < 1:
                raise SettingError(f"{prefix}.{name}", getattr(self, name), "must be an integer >= 1")
        if not (_finite(self.temperature) and self.temperature > 0):
            raise SettingError(f"{prefix}.temperature", self.temperature, "must be a finite number > 0")
        if self.pass_k is not None and not 1 <= self.pass_k <= self.samples:
            raise SettingError(f"{prefix}.pass_k", self.pass_k, f"must be null or an integer in [1, {prefix}.samples = "
                               f"{self.samples}] (the unbiased pass@k needs at least k samples per prompt)")


@dataclass(frozen=True)
class CheckpointSettings:
    """``rlec.checkpoint``: ``manifest`` writes (and checks before resuming) a size + SHA-256 list per checkpoint."""

    manifest: bool = True

    def check(self, prefix: str = "rlec.checkpoint") -> None:
        """Nothing beyond the type (checked when read)."""


@dataclass(frozen=True)
class CheckSettings:
    """``rlec.check``: what ``DRY_RUN`` (:mod:`rlec.cluster.config_check`) assumes about the cluster.

    Attributes:
        model_shape: ``megatron_configs/model/<model_shape>.json``, used when the model folder is not here.
        gpu_memory_gib: memory of one GPU, GiB (80: H100, 141: H200).
        gpu_arch: compute capability of the GPUs (``sm_90``; :func:`compute_capability` reads it).
        memory_fraction: share of GPU memory the update phase may fill, in (0, 1].
        cpus_per_node: logical CPUs Ray has on the head node (None: not checked), >= 1.
        mismatch_kl_alarm: train-inference KL (verl's ``rollout_corr/k3_kl``) above which a step warns
            (:mod:`rlec.verl_plugin.mismatch`), a finite number > 0; NeMo-RL's alarm level 0.004.
        mismatch_kl_stop: such a step stops the run before its update instead of only warning.
    """

    model_shape: str = "qwen3_30b_a3b"
    gpu_memory_gib: float = 80.0
    gpu_arch: str = "sm_90"
    memory_fraction: float = 0.9
    cpus_per_node: int | None = None
    mismatch_kl_alarm: float = 0.004
    mismatch_kl_stop: bool = False

    def check(self, prefix: str = "rlec.check") -> None:
        """Raises :class:`SettingError` for an uncommitted shape, memory <= 0, an unreadable arch, a fraction outside (0, 1],
        a mismatch alarm level that is not a finite number > 0."""
        shapes = sorted(p.stem for p in (CONFIG_DIR / "model").glob("*.json"))
        if self.model_shape not in shapes:
            raise SettingError(f"{prefix}.model_shape", self.model_shape, f"must name megatron_configs/model/<name>.json: one of {shapes}")
        if not (_finite(self.gpu_memory_gib) and self.gpu_memory_gib > 0):
            raise SettingError(f"{prefix}.gpu_memory_gib", self.gpu_memory_gib, "must be a finite number of GiB > 0")
        if compute_capability(self.gpu_arch) is None:
            raise SettingError(f"{prefix}.gpu_arch", self.gpu_arch, "is not a compute capability (sm_90 for H100 / H200, sm_100 for B200)")
        if not (_finite(self.memory_fraction) and 0 < self.memory_fraction <= 1):
            raise SettingError(f"{prefix}.memory_fraction", self.memory_fraction, "must be in (0, 1]")
        if self.cpus_per_node is not None and self.cpus_per_node < 1:
            raise SettingError(f"{prefix}.cpus_per_node", self.cpus_per_node, "must be >= 1 (or null: not checked)")
        if not (_finite(self.mismatch_kl_alarm) and self.mismatch_kl_alarm > 0):
            raise SettingError(f"{prefix}.mismatch_kl_alarm", self.mismatch_kl_alarm, "must be a finite KL > 0 (nats per token)")


@dataclass(frozen=True)
class CpuEvalSettings:
    """``rlec.cpu.eval``: the final evaluation of a CPU run (``make run``: :func:`rlec.report.evaluate_final`; the
    demo's before / after evaluation): greedy, every target of the grid, on the first ``max_questions`` questions of
    ``data.val_files`` (>= 1), at most ``max_new_tokens`` tokens per answer (>= 1). ``EVAL_AT_END=0`` skips it.
    ``goal_check``: also measure the learning demo's goal on the trained model (:func:`rlec.eval.goal.target_check`:
    coverage at p = 0.1 at least 0.3 above coverage at p = 0.8, separated intervals; ``make run``'s addition task)."""

    max_questions: int = 8
    max_new_tokens: int = 64
    goal_check: bool = False

    def check(self, prefix: str = "rlec.cpu.eval") -> None:
        """Raises :class:`SettingError` for a count < 1."""
        for name in ("max_questions", "max_new_tokens"):
            if getattr(self, name) < 1:
                raise SettingError(f"{prefix}.{name}", getattr(self, name), "must be an integer >= 1")


@dataclass(frozen=True)
class CpuSettings:
    """``rlec.cpu`` (verl's trainer on CPU, ``layout=cpu``; meaning in ``megatron_configs/layout/cpu.yaml``).

    Attributes:
        scripted_fraction: share of each group answered by script, in [0, 1).
        rollout_weight_noise: an induced train-inference mismatch: the rollout's copy of the weights gets
            ``sigma * rms(W) * N(0, 1)`` noise after every weight sync (:mod:`rlec.cpu.induced_mismatch`);
            sigma in [0, 1], 0 = off.
        rollout_noise_seed: the noise's seed (>= 0).
        eval: the final evaluation (:class:`CpuEvalSettings`).
    """

    scripted_fraction: float = 0.0
    rollout_weight_noise: float = 0.0
    rollout_noise_seed: int = 0
    eval: CpuEvalSettings = field(default_factory=CpuEvalSettings)

    def check(self, prefix: str = "rlec.cpu") -> None:
        """Raises :class:`SettingError` for a share outside [0, 1), a noise scale outside [0, 1], a negative seed,
        an evaluation count < 1."""
        if not (_finite(self.scripted_fraction) and 0.0 <= self.scripted_fraction < 1.0):
            raise SettingError(f"{prefix}.scripted_fraction", self.scripted_fraction, "must be in [0, 1)")
        if not (_finite(self.rollout_weight_noise) and 0.0 <= self.rollout_weight_noise <= 1.0):
            raise SettingError(f"{prefix}.rollout_weight_noise", self.rollout_weight_noise,
                               "must be a relative noise scale in [0, 1] (0 = the rollout serves the exact weights)")
        if self.rollout_noise_seed < 0:
            raise SettingError(f"{prefix}.rollout_noise_seed", self.rollout_noise_seed, "must be an integer >= 0")
        self.eval.check(f"{prefix}.eval")


@dataclass(frozen=True)
class RlecSettings:
    """Every non-algorithm ``rlec.*`` setting; ``cpu`` holds its defaults when the config has no such section (a GPU layout)."""

    schedule: ScheduleSettings = field(default_factory=ScheduleSettings)
    grading: GradingSettings = field(default_factory=GradingSettings)
    metrics: MetricsSettings = field(default_factory=MetricsSettings)
    checkpoint: CheckpointSettings = field(default_factory=CheckpointSettings)
    probe: ProbeSettings = field(default_factory=ProbeSettings)
    check_: CheckSettings = field(default_factory=CheckSettings, metadata={"key": "check"})
    cpu: CpuSettings = field(default_factory=CpuSettings)

    @classmethod
    def from_config(cls, cfg: Any) -> "RlecSettings":
        """Read and check ``rlec.*`` of a composed config (``DictConfig``) or nested dict; missing keys take the defaults.

        rlec's code reads it as ``run.rlec`` of the process's :class:`rlec.run_config.RunConfig` (the early rules, the
        reward manager, the trainer's mixins, ...), which calls this once; this function keeps nothing (each call
        parses). The algorithms' sections are not part of it (each algorithm reads its own, ``run.section``).

        Raises:
            SettingError: an unknown ``rlec`` section or key, a value of the wrong type, or out of range.
        """
        section = plain((cfg or {}).get("rlec") if hasattr(cfg, "get") else None) or {}
        if not isinstance(section, Mapping):
            raise SettingError("rlec", section, "must be a mapping of rlec's settings")
        known = cls.sections()
        return _read(cls, {k: v for k, v in section.items() if k in known}, "rlec")

    @classmethod
    def sections(cls) -> frozenset[str]:
        """The ``rlec.<name>`` sections this schema owns; any other is an algorithm's or unknown
        (:func:`rlec.rules.settings_rules.settings_rules` tells them apart with the algorithm registry)."""
        return frozenset(_key(f) for f in dataclasses.fields(cls))

    def check(self, prefix: str = "rlec") -> None:
        """Check every section (:meth:`from_config` already did); raises :class:`SettingError`."""
        for f in dataclasses.fields(self):
            getattr(self, f.name).check(f"{prefix}.{_key(f)}")


def _key(f: dataclasses.Field) -> str:
    """The config key of a field (``check_`` is ``check``: the name would shadow the method)."""
    return f.metadata.get("key", f.name)


def plain(node: Any) -> Any:
    """A ``DictConfig`` / ``ListConfig`` as plain containers (resolved); anything else unchanged."""
    try:
        from omegaconf import OmegaConf
    except ImportError:  # pragma: no cover - omegaconf is a dependency
        return node
    return OmegaConf.to_container(node, resolve=True) if OmegaConf.is_config(node) else node


def read_section(cls: type[T], cfg: Any, section: str, name: str | None = None) -> T:
    """The generic typed reader: ``section`` of ``cfg`` (dotted, e.g. ``rlec.e3``) as the frozen settings
    dataclass ``cls``, a nested dataclass field reading the sub-section of its name.

    Every value is type-checked against its field's type (bool, int, float, str, a tuple, a settings
    dataclass, ``Mapping[str, X]`` (a mapping, each value an X), ``Any`` (taken as given, for the
    class's ``check()`` to judge), a union of these (``str | tuple[str, ...]``: the alternative of
    the value's shape, a mapping, a list or a scalar) or X | None: an explicit null is None, a missing
    key the field's default; an int field takes a whole float, ``1e9``, as its int unless its metadata
    sets :data:`EXACT_INT`); no range checks
    (a float must be finite): the algorithms' settings classes return those from ``check()`` as findings.

    Args:
        cls: the settings dataclass.
        cfg: a composed ``DictConfig`` or nested dict (interpolations resolved); an absent section is ``{}``.
        section: the dotted key of the section.
        name: the prefix of every key in an error (default ``section``; RLVE's ``data.rlve`` is
            ``${rlec.rlve}``, the key users set).

    Keeps nothing (each call parses): a process reads each section once through its
    :class:`rlec.run_config.RunConfig` (``run.section``).

    Raises:
        SettingError: a key ``cls`` does not know, or a value of the wrong type (naming the full key).
    """
    return _read(cls, plain(select(cfg, section, {})), name or section, validate=False)


def _read(cls: type, section: Mapping[str, Any], prefix: str, validate: bool = True) -> Any:
    """An instance of the settings dataclass ``cls`` from ``section``, each value type-checked, then
    (``validate``) ``check()``-ed."""
    if not isinstance(section, Mapping):
        raise SettingError(prefix, section, "must be a mapping")
    fields = {_key(f): f for f in dataclasses.fields(cls)}
    hints = typing.get_type_hints(cls)
    values = {}
    for key, value in section.items():
        if key not in fields:
            raise SettingError(f"{prefix}.{key}", value, f"is not a setting of {prefix} (known: {sorted(fields)})")
        f = fields[key]
        values[f.name] = _convert(hints[f.name], value, f"{prefix}.{key}", validate, f.metadata.get(EXACT_INT, False))
    settings = cls(**values)
    if validate and cls is not RlecSettings:
        settings.check(prefix)
    return settings


def _shape(kind: Any) -> str:
    origin = typing.get_origin(kind)
    return "mapping" if origin is collections.abc.Mapping else "list" if origin is tuple else "scalar"


def _of_shape(alternatives: list[Any], value: Any, key: str) -> Any:
    """The alternative of a union whose shape (mapping, list, scalar) is the value's."""
    shape = "mapping" if isinstance(value, Mapping) else "list" if isinstance(value, (list, tuple)) else "scalar"
    for kind in alternatives:
        if _shape(kind) == shape:
            return kind
    named = {"mapping": "a mapping", "list": "a list", "scalar": "a single value"}
    raise SettingError(key, value, "must be " + " or ".join(named[_shape(k)] for k in alternatives))


def _convert(kind: Any, value: Any, key: str, validate: bool = True, exact: bool = False) -> Any:
    """``value`` as the field type ``kind`` (bool, int, float, str, tuple[float, ...], a settings dataclass, or X | None)."""
    args = typing.get_args(kind)
    if typing.get_origin(kind) in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        alternatives = [a for a in args if a is not type(None)]
        kind = alternatives[0] if len(alternatives) == 1 else _of_shape(alternatives, value, key)
    if kind is Any:
        return value
    if dataclasses.is_dataclass(kind):
        return _read(kind, value if value is not None else {}, key, validate)
    if typing.get_origin(kind) is tuple:
        if not isinstance(value, (list, tuple)):
            raise SettingError(key, value, "must be a list")
        return tuple(_convert(typing.get_args(kind)[0], v, key, validate) for v in value)
    if typing.get_origin(kind) is collections.abc.Mapping:
        if not isinstance(value, Mapping):
            raise SettingError(key, value, "must be a mapping")
        inner = typing.get_args(kind)[1]
        return {str(k): _convert(inner, v, f"{key}.{k}", validate) for k, v in value.items()}
    if kind is bool:
        if not isinstance(value, bool):
            raise SettingError(key, value, "must be true or false")
        return value
    if kind is int:
        if not validate and not exact and isinstance(value, float) and math.isfinite(value) and value.is_integer():
            return int(value)  # the algorithms' settings read a whole float (1e9) as the int, as their readers did
        if isinstance(value, bool) or not isinstance(value, int):
            raise SettingError(key, value, "must be an integer")
        return value
    if kind is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise SettingError(key, value, "must be a number")
        if not validate and not math.isfinite(value):  # the algorithms' settings: their checks compare, NaN passes those
            raise SettingError(key, value, "must be a finite number")
        return float(value)
    if kind is str:  # a number is read as its text: Hydra parses rlec.check.gpu_arch=9.0 as a float
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise SettingError(key, value, "must be a string")
        return str(value)
    raise TypeError(f"{key}: no reader for the field type {kind!r}")  # pragma: no cover - a schema error
