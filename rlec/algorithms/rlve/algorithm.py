"""RLVE as an :class:`rlec.algorithms.base.Algorithm`: the difficulty controllers verl's trainer updates.

Switched on by ``rlec.rlve.enable``; settings ``rlec.rlve`` (:class:`RLVESettings`, their one home).
``algorithm=rlve`` (``megatron_configs/algorithm/rlve.yaml``) sets the switch and, from the home,
verl's side: ``data.custom_cls`` (the RLVE dataset) and ``data.rlve: ${rlec.rlve}`` (the copy the
dataset reads: verl hands a dataset only the ``data`` section); :meth:`RLVE.check` refuses a verl
side that disagrees with the home. The training dataset (:class:`rlec.verl_plugin.rlve_dataset.RLVEDataset`, verl's
``data.custom_cls``) owns the :class:`rlec.environments.EnvironmentSource`; its state (row counter,
controllers) travels in the dataloader's checkpoint, so :meth:`RLVE.state_dict` is empty.
:meth:`RLVE.observe` feeds every response's ``extra_info.environment``, ``extra_info.difficulty``
and graded outcome to the controllers and returns the ``rlve/...`` metrics. In verl's async modes
prompts are fetched ahead of the update: samples generated at an older h are not counted.
"""

from __future__ import annotations

from typing import Any, Collection

from rlec.algorithms.base import Algorithm, AlgorithmContext, Finding, RunConfig, StepRecord
from rlec.algorithms.rlve.settings import RLVE_DATASET, SECTION, VERL_COPY, RLVESettings
from rlec.settings import SettingError

__all__ = ["RLVE"]


class RLVE(Algorithm):
    """RLVE's per-step update (module docstring).

    Args:
        source: the training dataset's :class:`rlec.environments.EnvironmentSource`.
    """

    name = "rlve"
    section = SECTION
    switch = f"{SECTION}.enable=true"
    doc = "environments.md"
    record_fields = ("extra_info",)
    verl_keys = (VERL_COPY,)  # verl hands the dataset only `data`: the overlay copies the settings there
    serves_prompts = True  # environment rows: data.train_files=[] trains on them alone
    step_line_columns = 0  # one column per environment: the step table at the end shows them

    def __init__(self, source: Any) -> None:
        self.source = source

    @classmethod
    def enabled(cls, run: RunConfig) -> bool:
        """``rlec.rlve.enable`` (the ``algorithm=rlve`` overlay sets it)."""
        return run.enabled(SECTION)

    @classmethod
    def settings_of(cls, run: RunConfig) -> RLVESettings:
        """``rlec.rlve``, read once per ``run`` (types checked; ranges: :meth:`RLVESettings.check`).

        Raises:
            rlec.settings.SettingError: an unknown key or a value not of its type.
        """
        return run.section(RLVESettings, SECTION)

    @classmethod
    def check(cls, run: RunConfig) -> list[Finding]:
        """Errors: ``data.dataloader_num_workers`` != 0 (a worker process would keep its own copy of
        the controllers, never updated); ``data.custom_cls`` not the RLVE dataset; settings
        :class:`RLVESettings` refuses; verl's copy ``data.rlve`` not equal to ``rlec.rlve``;
        ``data.train_files`` equal to ``data.val_files``; a trainer
        mode without rlec's trainer. Warning: an async rlec mode (prompts generated ahead of the
        controller update, so resume is no longer exact)."""
        if not cls.enabled(run):
            return []
        out, keys = [], run.keys
        workers = keys.dataloader_num_workers
        if workers != 0:
            out.append(Finding("error", "data.dataloader_num_workers", f"is {workers}; RLVE needs 0: the difficulty "
                               "controllers live in the dataset object the trainer updates, which dataloader worker "
                               "processes would copy"))
        path, name = keys.custom_cls_path, keys.custom_cls_name
        if (path, name) != RLVE_DATASET:
            out.append(Finding("error", "data.custom_cls", f"is path={path!r} name={name!r}; RLVE needs "
                               f"path={RLVE_DATASET[0]!r} name={RLVE_DATASET[1]!r} (megatron_configs/algorithm/rlve.yaml)"))
        try:
            out += cls.settings_of(run).check()
        except SettingError as exc:
            out.append(Finding("error", exc.key, f"{exc.value!r}: {exc.rule}"))
        except Exception as exc:  # a check never crashes: what it could not judge is a finding
            out.append(Finding("error", SECTION, f"{type(exc).__name__}: {exc}"))
        out += _copy_findings(run)
        if _files(keys.train_files) == _files(keys.val_files):
            out.append(Finding("error", "data.val_files", "must differ from data.train_files: the RLVE dataset tells the "
                               "training set (environment rows) from the validation set (static) by its files"))
        mode = run.trainer_mode
        if not mode.startswith("rlec_"):
            out.append(Finding("error", "trainer.v1.trainer_mode", f"is {mode!r}; only rlec's trainers (rlec_sync, ...) "
                               "update the RLVE difficulty controllers after each step"))
        elif mode != "rlec_sync":
            out.append(Finding("warning", "trainer.v1.trainer_mode", f"{mode}: prompts are generated ahead of the "
                               "controller update, so samples at an older difficulty are not counted and a resumed run "
                               "is not exactly an uninterrupted one (exact in rlec_sync)"))
        return out

    @classmethod
    def verdict(cls, run: RunConfig) -> str:
        """``RLVE (environments; difficulty up at accuracy >= threshold)`` (more than the built-in ones: their count)."""
        from rlec.environments import builtin_names

        source = cls.settings_of(run).checked().source
        names = list(source.environments)
        shown = ", ".join(names) if len(names) <= len(builtin_names()) else f"{len(names)} environments ({', '.join(names[:3])}, ...)"
        return f"RLVE ({shown}; difficulty up at accuracy >= {source.threshold})"

    @classmethod
    def table_columns(cls, metric_keys: Collection[str]) -> list[tuple[str, str, str]]:
        """The difficulty h of every environment the run logged (``rlve/<env>/difficulty``)."""
        envs = sorted({k.split("/")[1] for k in metric_keys if k.startswith("rlve/") and k.endswith("/difficulty")})
        return [(f"{env} d", f"rlve/{env}/difficulty", "{:d}") for env in envs]

    @classmethod
    def from_config(cls, run: RunConfig, context: AlgorithmContext) -> "RLVE":
        """Raises ValueError: :meth:`check` fails, or the training dataset has no environment source."""
        cls.raise_first_error(run)
        source = getattr(context.train_dataset, "rlve_source", None)  # rlec.verl_plugin.rlve_dataset.RLVEDataset
        if source is None:
            raise ValueError("rlec.rlve.enable is true but the training dataset has no environment source: set "
                             f"data.custom_cls.path={RLVE_DATASET[0]} and data.custom_cls.name={RLVE_DATASET[1]} "
                             "(megatron_configs/algorithm/rlve.yaml does)")
        return cls(source)

    def observe(self, step: int, total_steps: int, record: StepRecord) -> dict[str, float]:
        """Feed each response's (environment, difficulty, correct) to the difficulty controllers; ``rlve/...`` metrics."""
        samples = [{"environment": info.get("environment"), "difficulty": info.get("difficulty"), "correct": ok}
                   for info, ok in zip(record.extra_info, record.correct)]
        return self.source.update(samples)


def _copy_findings(run: RunConfig) -> list[Finding]:
    """An error when verl's copy ``data.rlve`` (what the dataset reads) differs from the home ``rlec.rlve``
    (the overlay sets it to ``${rlec.rlve}``; an override of the copy would train on settings no check,
    verdict or resume rule saw)."""
    try:
        home, copy = run.plain(SECTION), run.plain(VERL_COPY)
    except Exception as exc:  # an unresolvable interpolation: the settings read reports it
        return [Finding("error", VERL_COPY, f"{type(exc).__name__}: {exc}")]
    if copy == home:
        return []
    differ = sorted(k for k in set(home) | set(copy) if home.get(k, "<absent>") != copy.get(k, "<absent>"))
    return [Finding("error", VERL_COPY, f"differs from {SECTION} ({', '.join(differ)}): it is verl's copy for the dataset "
                    f"(${{{SECTION}}} in megatron_configs/algorithm/rlve.yaml); set {SECTION}.* instead")]


def _files(value: Any) -> list[str]:
    """``data.train_files`` / ``data.val_files`` as a list of paths (a single path, a list, or null: none)."""
    value = [] if value is None else value
    return [value] if isinstance(value, str) else [str(v) for v in value]
