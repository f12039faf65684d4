"""What a CPU training run shows and keeps (verl's trainer on ``layout=cpu``: ``make run``, the demo, the experiments).

- the per-step metrics file it reads, ``<dir>/metrics.jsonl``, is :mod:`rlec.metrics_log`'s (the trainer writes it
  there without importing this console report);
- :func:`quiet_third_party`: third-party warnings, INFO logs and progress bars off (``RLEC_VERBOSE=1`` keeps them).
- the summary: :func:`training_table` (with each enabled algorithm's columns,
  :func:`rlec.algorithms.registry.table_columns`), :func:`time_split`, :func:`plot_curves`
  (``training_curves.png``), :func:`print_training_summary`;
- the final evaluation: :func:`evaluate_final` (``eval/records.jsonl`` and ``eval/metrics``).
"""

from __future__ import annotations

import json
import logging
import math
import os
import sys
import warnings
from pathlib import Path
from typing import Any, Sequence

from rlec.algorithms import registry
from rlec.flags import flag
from rlec.io import atomic_write_text, save_figure
from rlec.run_config import RunConfig
from rlec.metrics_log import METRICS_FILE, MetricsFile, read_metrics  # the file it reports (also named here, as before)

CURVES_FILE = "training_curves.png"

__all__ = ["COLUMNS", "CURVES_FILE", "METRICS_FILE", "MetricsFile", "REWARD_NOTE", "STEP_PHASES", "curve_series",
           "evaluate_final", "evaluation_args", "final_metrics_args", "format_cell", "plot_curves", "print_training_summary", "quiet_third_party",
           "read_metrics", "step_time_split", "time_split", "training_table", "verbose"]


# ---------------------------------------------------------------------------------------------- quiet logs
QUIET_LOGGERS = ("megatron", "mbridge", "transformers", "datasets", "verl", "torch.distributed", "root", "ray")


def verbose() -> bool:
    """``RLEC_VERBOSE`` is on (:mod:`rlec.flags`): keep third-party warnings, logs and prints.

    Raises:
        ValueError: a spelling :mod:`rlec.flags` refuses (names the variable).
    """
    return flag("RLEC_VERBOSE")  # rlec.flags' spellings: RLEC_VERBOSE=false is off


def quiet_third_party() -> None:
    """Silence third-party warnings, info logs and progress bars that flood a CPU run.

    Kept with ``RLEC_VERBOSE=1``. rlec's own warnings stay; Python warnings of other packages
    (Apex / Transformer Engine fallbacks, optional verl engines, deprecations), their INFO logs
    (Megatron's bucket lists, optimizer config dumps) and the progress bars of datasets,
    transformers and the Hugging Face hub are dropped: the run's own progress bar and step table
    say what happens.

    Raises:
        ValueError: a bad ``RLEC_VERBOSE`` spelling (:func:`verbose`).
    """
    if verbose():
        return
    warnings.filterwarnings("ignore")
    warnings.filterwarnings("default", module=r"rlec(\.|$)")
    os.environ.setdefault("VERL_LOGGING_LEVEL", "ERROR")  # verl's modules set their level from it at import
    for name in [*QUIET_LOGGERS, *(n for n in logging.root.manager.loggerDict if n.startswith(QUIET_LOGGERS))]:
        logging.getLogger(name).setLevel(logging.ERROR)
    for var in ("HF_DATASETS_DISABLE_PROGRESS_BARS", "HF_HUB_DISABLE_PROGRESS_BARS", "TRANSFORMERS_NO_ADVISORY_WARNINGS"):
        os.environ.setdefault(var, "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    import datasets
    import transformers

    datasets.disable_progress_bars()
    transformers.utils.logging.disable_progress_bar()
    transformers.utils.logging.set_verbosity_error()


# ---------------------------------------------------------------------------------------------- summary
COLUMNS = [
    ("step", "step", "{:d}"),
    ("b", "rlec/b", "{:.2f}"),
    ("reward", "rlec/reward/mean", "{:+.3f}"),
    ("coverage", "rlec/coverage", "{:.2f}"),
    ("accuracy", "rlec/accuracy", "{:.2f}"),
    ("entropy", "actor/entropy", "{:.3f}"),
    ("pg_loss", "actor/pg_loss", "{:+.4f}"),
    ("grad_norm", "actor/grad_norm", "{:.3f}"),
    ("gen s", "timing_s/gen", "{:.1f}"),
    ("update s", "timing_s/update_actor", "{:.1f}"),
    ("sync s", "timing_s/update_weights", "{:.1f}"),
    ("step s", "timing_s/step", "{:.1f}"),
]


def format_cell(fmt: str, value: Any) -> str:
    """``value`` in a table column's format (``"{:d}"`` takes a float that holds an integer, as JSON logs
    it); "-" for a missing or NaN value, a string as it is."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, str):
        return value
    return fmt.format(int(value) if fmt == "{:d}" else value)


def _columns(records: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    """The generic columns plus each registered algorithm's whose metrics the run logged
    (:meth:`rlec.algorithms.base.Algorithm.table_columns`), before the timings."""
    keys = {k for rec in records for k in rec}
    return COLUMNS[:-4] + registry.table_columns(keys) + COLUMNS[-4:]


def training_table(records: list[dict[str, Any]]) -> str:
    """A Markdown table of the per-step metrics, with each enabled algorithm's columns (missing values '-')."""
    columns = _columns(records)
    lines = ["| " + " | ".join(c[0] for c in columns) + " |", "|" + "---|" * len(columns)]
    for rec in records:
        lines.append("| " + " | ".join(format_cell(fmt, rec.get(key)) for _, key, fmt in columns) + " |")
    return "\n".join(lines)


# the timed phases inside a step, in order: verl's ``timing_s/<name>`` (verl times ``save_checkpoint`` inside the step);
# "other" is the rest of timing_s/step
STEP_PHASES = ("gen", "reward", "adv", "old_log_prob", "update_actor", "update_weights", "save_checkpoint")
# timed after the step (verl's validation): listed in the split, not part of the step
OUTSIDE_PHASES = ("testing",)
REWARD_NOTE = ("reward at the step's b follows the b schedule (0 -> 1: R_p^(b) of an answer changes with b),\n"
               "so it moves without any learning; reward at b = 1 is comparable across steps")


def step_time_split(record: dict[str, Any], phases: Sequence[str] = STEP_PHASES) -> dict[str, float]:
    """Seconds of one step per phase, plus ``other`` (the step's untimed rest).

    Args:
        record: one step's metrics (``timing_s/<phase>``, ``timing_s/step``; missing = 0).
        phases: the phases timed inside ``timing_s/step`` (:data:`STEP_PHASES`).

    Returns:
        ``{phase: seconds}`` for every phase and ``"other"`` = ``timing_s/step`` minus the phases
        (broadcast, learning-rate set-up, hooks; >= 0), so the values sum to ``timing_s/step``
        (to the phases' sum when the step time is missing or smaller).
    """
    split = {phase: float(record.get(f"timing_s/{phase}") or 0.0) for phase in phases}
    step = float(record.get("timing_s/step") or 0.0)
    split["other"] = max(0.0, step - sum(split.values()))
    return split


def time_split(records: list[dict[str, Any]]) -> str:
    """Total seconds per phase over the run (:func:`step_time_split`), with shares of the step time; then the
    seconds outside the steps (:data:`OUTSIDE_PHASES`: verl's validation) when any."""
    totals: dict[str, float] = {}
    for rec in records:
        for phase, seconds in step_time_split(rec).items():
            totals[phase] = totals.get(phase, 0.0) + seconds
    step_total = sum(totals.values()) or 1.0
    parts = [f"{phase} {t:.1f}s ({100 * t / step_total:.0f}%)" for phase, t in totals.items()]
    outside = {p: sum(float(r.get(f"timing_s/{p}") or 0.0) for r in records) for p in OUTSIDE_PHASES}
    extra = "".join(f"; {p} (after the step) {t:.1f}s" for p, t in outside.items() if t)
    return f"time split over {len(records)} steps: " + ", ".join(parts) + extra


def curve_series(records: list[dict[str, Any]]) -> dict[str, list[float]]:
    """The per-step lines of the training-signals panel: ``{label: values}`` (NaN where a step lacks one).

    ``reward (b of the step)`` is ``rlec/reward/mean``; ``reward at b = 1`` is ``rlec/reward_b1/mean``
    (the evaluation reward, fixed b: the one to read for learning); then ``b`` and ``coverage``.
    """
    keys = (("rlec/reward/mean", "reward (b of the step)"), ("rlec/reward_b1/mean", "reward at b = 1"),
            ("rlec/b", "b"), ("rlec/coverage", "coverage"))
    return {label: [float("nan") if r.get(key) is None else float(r[key]) for r in records] for key, label in keys
            if any(key in r for r in records)}


def plot_curves(records: list[dict[str, Any]], path: Path) -> Path | None:
    """Reward (at the step's b and at b = 1), b and coverage per step, and the full step-time split, as one PNG.

    The reward panel carries :data:`REWARD_NOTE`; the time panel stacks :func:`step_time_split`, so each
    bar is the whole ``timing_s/step``. Returns the PNG's path, None without records.
    """
    if not records:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [r["step"] for r in records]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    for label, values in curve_series(records).items():
        ax1.plot(steps, values, marker="o", label=label, linestyle="--" if label.startswith("reward (") else "-")
    ax1.set_xlabel("step")
    ax1.legend(fontsize=7)
    ax1.set_title("training signals")
    ax1.text(0.0, -0.2, REWARD_NOTE, transform=ax1.transAxes, fontsize=7, va="top")
    splits = [step_time_split(r) for r in records]
    bottom = [0.0] * len(records)
    for phase in (*STEP_PHASES, "other"):
        vals = [sp[phase] for sp in splits]
        ax2.bar(steps, vals, bottom=bottom, label=phase)
        bottom = [b + v for b, v in zip(bottom, vals)]
    ax2.set_xlabel("step")
    ax2.set_ylabel("seconds")
    ax2.legend(fontsize=7)
    ax2.set_title("step time split (whole step)")
    fig.tight_layout()
    return save_figure(fig, path, dpi=110)


def print_training_summary(metrics_path: Path, title: str = "verl's trainer") -> list[dict[str, Any]]:
    """Print the per-step table and time split; save :data:`CURVES_FILE` beside the metrics. Returns the records."""
    records = read_metrics(metrics_path)
    print(f"\n## Training ({title})\n")
    print(training_table(records))
    print("\n" + time_split(records))
    png = plot_curves(records, Path(metrics_path).with_name(CURVES_FILE))
    if png:
        print(f"curves: {png}")
    sys.stdout.flush()
    return records


# ---------------------------------------------------------------------------------------------- evaluation
def _evaluation_file(run: RunConfig) -> Path:
    """The final evaluation's questions: ``data.val_files`` (a path, or its list's first)."""
    val = run.keys.val_files
    return Path(str(val if isinstance(val, str) else list(val)[0]))


def evaluation_args(run: RunConfig, model_dir: Path, records: Path) -> list[str]:
    """The ``rlec.eval.evaluate`` arguments of the final evaluation of ``model_dir``.

    Greedy, on ``data.val_files`` (the first ``rlec.cpu.eval.max_questions`` questions), every
    target of the default grid, ``rlec.cpu.eval.max_new_tokens`` tokens, seeded by ``data.seed``:
    one definition, so a warm start and the model trained from it are scored alike (``run``: the caller's
    :class:`rlec.run_config.RunConfig`).
    """
    settings, cfg = run.rlec.cpu.eval, run.tree
    return ["--model", str(model_dir), "--data", str(_evaluation_file(run)), "--limit", str(settings.max_questions),
            "--out", str(records), "--engine", "hf",
            "--max-new-tokens", str(settings.max_new_tokens), "--seed", str(cfg.data.seed), "--temperature", "0"]


def final_metrics_args(records: Path, out_dir: Path | None = None) -> list[str]:
    """The arguments of ``python -m rlec.eval.metrics`` in the final evaluation (:func:`evaluate_final`).

    200 bootstrap replicates, the per-question calibration figures on (``--no-calibration`` not passed), plots on;
    ``out_dir`` None: ``<records folder>/metrics``. ``benchmarks/eval_metrics.py`` times this call.
    """
    return [str(records), "--bootstrap", "200", "--out-dir", str(out_dir if out_dir is not None else records.parent / "metrics")]


def evaluate_final(run: RunConfig, out_dir: Path, model_dir: Path, *, random_model: bool | None = None) -> int:
    """Evaluate the final policy on the evaluation sample across the target grid, then score it.

    Runs ``rlec.eval.evaluate`` (records to ``<out_dir>/eval/records.jsonl``) and ``rlec.eval.metrics``
    (tables, ``metrics.json`` and plots in ``<out_dir>/eval/metrics``) in this process; with
    ``rlec.cpu.eval.goal_check``, then the demo's goal on the trained model (:func:`rlec.eval.goal.target_check`,
    printed and written to ``<out_dir>/eval/target_check.json``; a missed goal is a measurement, not a failure).
    The records file's output lock (:func:`rlec.io.output_lock`, the one ``python -m rlec.eval.evaluate --out``
    takes) is held from before the file is looked at until the records are scored: another process writing there
    is refused by name, nothing touched. Records already in the file (an earlier final evaluation, or a user's own
    ``--out OUTPUT_DIR/eval/records.jsonl``) are a finished command's output: they are moved aside
    (:func:`rlec.io.move_aside`, the new name printed), never deleted, and the new model is evaluated afresh.

    Args:
        run: the run's config, converted once by the caller (``data.val_files``, ``data.seed``, ``rlec.cpu.eval``).
        out_dir: the run's output folder.
        model_dir: the trained model as a Hugging Face folder.
        random_model: the tiny random model (the heading says to expect 'incorrect'); None: the
            config names no model path.

    Returns:
        The metrics command's exit code (0 on success); 0 without an evaluation file; 2 when the records
        file is another process's (``error:`` line naming its pid) or cannot be written (``error:`` line
        naming the path), nothing changed.
    """
    from rlec.eval import evaluate, metrics
    from rlec.io import LockHeld, move_aside, output_lock

    eval_file = _evaluation_file(run)
    if not eval_file.is_file():
        print(f"[rlec] no evaluation file {eval_file}: skipping the final evaluation", file=sys.stderr)
        return 0
    records = Path(out_dir) / "eval" / "records.jsonl"
    lock = output_lock(records, what=f"the final evaluation's records {records}")
    try:
        lock.acquire()  # before anything in eval/ is looked at (creates the folder)
        kept = move_aside(records)  # a new final model: evaluate afresh, keeping what was there
    except (LockHeld, OSError) as exc:
        lock.release()
        print(f"error: {exc}; the final evaluation did not run", file=sys.stderr, flush=True)
        return 2
    try:
        if kept is not None:
            print(f"[rlec] {records} held records written before this evaluation: kept as {kept}", flush=True)
        if random_model is None:
            random_model = not run.keys.model_path
        print("\n## Final evaluation (the trained tiny model: random text, so expect 'incorrect')\n" if random_model
              else "\n## Final evaluation\n", flush=True)
        code = evaluate.main(evaluation_args(run, model_dir, records), lock=lock)
        if code:
            return code
        code = metrics.main(final_metrics_args(records))
        if code or not run.rlec.cpu.eval.goal_check:
            return code
        from rlec.eval.goal import format_check, target_check

        check = target_check(None, records)
        atomic_write_text(records.parent / "target_check.json", json.dumps(check, indent=1) + "\n")
        print("\n## The demo's goal: coverage falls as the target rises (95% question-bootstrap intervals)\n\n"
              + format_check(check) + f"\n\n{check['why']} ({records.parent / 'target_check.json'})", flush=True)
        return 0
    finally:
        lock.release()
