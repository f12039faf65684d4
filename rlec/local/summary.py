"""End of the local run: the training summary table, the curves plot, the final evaluation."""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

from rlec.algorithms import registry
from rlec.config import select
from rlec.io import save_figure
from rlec.local.logger import read_metrics
from rlec.settings import RlecSettings

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


def _fmt(fmt: str, value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
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
        lines.append("| " + " | ".join(_fmt(fmt, rec.get(key)) for _, key, fmt in columns) + " |")
    return "\n".join(lines)


# the timed phases of a local step, in order (rlec/local/runner.py); "other" is the rest of timing_s/step
STEP_PHASES = ("gen", "reward", "adv", "old_log_prob", "update_actor", "update_weights")
REWARD_NOTE = ("reward at the step's b follows the b schedule (0 -> 1: R_p^(b) of an answer changes with b),\n"
               "so it moves without any learning; reward at b = 1 is comparable across steps")


def step_time_split(record: dict[str, Any]) -> dict[str, float]:
    """Seconds of one step per phase of :data:`STEP_PHASES`, plus ``other`` (the step's untimed rest).

    Args:
        record: one step's metrics (``timing_s/<phase>``, ``timing_s/step``; missing = 0).

    Returns:
        ``{phase: seconds}`` for every phase and ``"other"`` = ``timing_s/step`` minus the phases
        (broadcast, learning-rate set-up, hooks; >= 0), so the values sum to ``timing_s/step``
        (to the phases' sum when the step time is missing or smaller).
    """
    split = {phase: float(record.get(f"timing_s/{phase}") or 0.0) for phase in STEP_PHASES}
    step = float(record.get("timing_s/step") or 0.0)
    split["other"] = max(0.0, step - sum(split.values()))
    return split


def time_split(records: list[dict[str, Any]]) -> str:
    """Total seconds per phase over the run (:func:`step_time_split`), with shares of the step time."""
    totals: dict[str, float] = {}
    for rec in records:
        for phase, seconds in step_time_split(rec).items():
            totals[phase] = totals.get(phase, 0.0) + seconds
    step_total = sum(totals.values()) or 1.0
    parts = [f"{phase} {t:.1f}s ({100 * t / step_total:.0f}%)" for phase, t in totals.items()]
    tokens = sum((r.get("rollout/tokens_per_s") or 0.0) * (r.get("timing_s/gen") or 0.0) for r in records)
    gen = totals.get("gen") or 1.0
    return f"time split over {len(records)} steps: " + ", ".join(parts) + f"; rollout {tokens / gen:.0f} tokens/s"


def curve_series(records: list[dict[str, Any]]) -> dict[str, list[float]]:
    """The per-step lines of the training-signals panel: ``{label: values}`` (NaN where a step lacks one).

    ``reward (b of the step)`` is ``rlec/reward/mean``; ``reward at b = 1`` is ``rlec/reward_b1/mean``
    (the evaluation reward, fixed b: the one to read for learning); then ``b`` and ``coverage``.
    """
    keys = (("rlec/reward/mean", "reward (b of the step)"), ("rlec/reward_b1/mean", "reward at b = 1"),
            ("rlec/b", "b"), ("rlec/coverage", "coverage"))
    return {label: [float(r.get(key, float("nan"))) for r in records] for key, label in keys
            if any(key in r for r in records)}


def plot_curves(records: list[dict[str, Any]], path: Path) -> Path | None:
    """Reward (at the step's b and at b = 1), b and coverage per step, and the full step-time split, as one PNG.

    The reward panel carries :data:`REWARD_NOTE`; the time panel stacks :func:`step_time_split`, so each
    bar is the whole ``timing_s/step``.
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


def print_training_summary(metrics_path: Path) -> None:
    """Print the per-step table and time split; save ``training_curves.png`` beside the metrics."""
    records = read_metrics(metrics_path)
    print("\n## Training (local run)\n")
    print(training_table(records))
    print("\n" + time_split(records))
    png = plot_curves(records, Path(metrics_path).with_name("training_curves.png"))
    if png:
        print(f"curves: {png}")
    sys.stdout.flush()


def evaluation_args(cfg: Any, model_dir: Path, records: Path) -> list[str]:
    """The ``rlec.eval.evaluate`` arguments of the local run's evaluation of ``model_dir``.

    Greedy, on ``data.val_files`` (the first ``rlec.local.eval.max_questions`` questions), every
    target of the default grid, ``rlec.local.eval.max_new_tokens`` tokens, seeded by ``data.seed``:
    one definition, so a warm start and the model trained from it are scored alike.
    """
    local = RlecSettings.from_config(cfg).local
    args = ["--model", str(model_dir), "--data", str(cfg.data.val_files), "--limit", str(local.eval.max_questions),
            "--out", str(records), "--engine", "hf",
            "--max-new-tokens", str(local.eval.max_new_tokens), "--seed", str(cfg.data.seed), "--temperature", "0"]
    if int(local.threads):
        args += ["--threads", str(local.threads)]
    return args


def evaluate_final(cfg: Any, out_dir: Path, model_dir: Path) -> int:
    """Evaluate the final policy on the evaluation sample across the target grid, then score it.

    Runs ``rlec.eval.evaluate`` (records to ``<out_dir>/eval/records.jsonl``) and ``rlec.eval.metrics``
    (tables, ``metrics.json`` and plots in ``<out_dir>/eval/metrics``) in this process.

    Returns:
        The metrics command's exit code (0 on success); 0 without an evaluation file.
    """
    from rlec.eval import evaluate, metrics

    eval_file = Path(str(cfg.data.val_files))
    if not eval_file.is_file():
        print(f"[rlec.local] no evaluation file {eval_file}: skipping the final evaluation", file=sys.stderr)
        return 0
    records = Path(out_dir) / "eval" / "records.jsonl"
    records.parent.mkdir(parents=True, exist_ok=True)
    if records.exists():
        records.unlink()  # a new final model: regenerate rather than resume stale records
    random_model = not select(cfg, "actor_rollout_ref.model.path")
    print("\n## Final evaluation (the trained tiny model: random text, so expect 'incorrect')\n" if random_model
          else "\n## Final evaluation\n", flush=True)
    code = evaluate.main(evaluation_args(cfg, model_dir, records))
    if code:
        return code
    return metrics.main([str(records), "--bootstrap", "200", "--out-dir", str(records.parent / "metrics")])
