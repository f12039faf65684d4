"""An experiment's summary: per-arm table with 95% bootstrap intervals, the PNG figure, the results JSON.

Intervals (percentile bootstrap, 95%):

- a per-step curve, in the table: each seed's mean over the last quarter of the steps, resampled over seeds;
- a held-out figure: a two-level bootstrap, seeds resampled, then questions (the same questions for
  every seed: the held-out set is fixed), the mean over both;
- a seed spread: the std over seeds of each seed's mean of the metric (no interval: one number per arm).
"""

from __future__ import annotations

import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np

from rlec.experiments.spec import Experiment, Run

N_BOOT = 1000


def _interval(values: np.ndarray, point: float) -> list[float | None]:
    values = values[~np.isnan(values)]
    if not len(values) or np.isnan(point):
        return [None if np.isnan(point) else float(point), None, None]
    lo, hi = np.percentile(values, [2.5, 97.5])
    return [float(point), float(lo), float(hi)]


def seed_interval(per_seed: Sequence[float], *, n_boot: int = N_BOOT, seed: int = 0) -> list[float | None]:
    """``[mean, lo, hi]`` of per-seed values, seeds resampled with replacement (NaN seeds dropped)."""
    x = np.asarray(per_seed, dtype=float)
    x = x[~np.isnan(x)]
    if not len(x):
        return [None, None, None]
    rng = np.random.default_rng(seed)
    boots = x[rng.integers(0, len(x), size=(n_boot, len(x)))].mean(axis=1)
    return _interval(boots, float(x.mean()))


def seed_question_interval(values: np.ndarray, *, n_boot: int = N_BOOT, seed: int = 0) -> list[float | None]:
    """``[mean, lo, hi]`` of an (S seeds, Q questions) array: seeds resampled, then questions; NaN cells ignored."""
    v = np.asarray(values, dtype=float)
    if v.size == 0 or np.isnan(v).all():
        return [None, None, None]
    rng = np.random.default_rng(seed)
    s, q = v.shape
    boots = np.empty(n_boot)
    with np.errstate(invalid="ignore"), _quiet():
        for b in range(n_boot):
            boots[b] = np.nanmean(v[rng.integers(0, s, s)][:, rng.integers(0, q, q)])
        return _interval(boots, float(np.nanmean(v)))


@contextmanager
def _quiet() -> Iterator[None]:
    """Silence numpy's mean-of-empty warnings (those cells stay NaN)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        yield


def _nulls(values: np.ndarray) -> list:
    """``values.tolist()`` with NaN as None."""
    return [_nulls(v) if isinstance(v, np.ndarray) else (None if np.isnan(v) else float(v)) for v in values]


def tail_mean(values: Sequence[float]) -> float:
    """Mean of the last quarter of the steps (at least one), NaN steps ignored; NaN when none is measured."""
    x = np.asarray(values, dtype=float)
    if not len(x):
        return float("nan")
    x = x[-max(1, len(x) // 4):]
    return float(np.nanmean(x)) if (~np.isnan(x)).any() else float("nan")


def summarise(exp: Experiment, runs: dict[str, list[Run]], *, quick: bool) -> dict[str, Any]:
    """The results JSON: per arm, per-step curves (mean over seeds), table cells with intervals, spreads."""
    arms: dict[str, Any] = {}
    for arm in exp.arms:
        rs = runs.get(arm.name, [])
        if not rs:
            continue
        cell: dict[str, Any] = {"what": arm.what, "seeds": [r.seed for r in rs], "curves": {}, "table": {}}
        for curve in exp.curves:
            per_run = [curve.values(r) for r in rs]
            length = max(len(v) for v in per_run)
            grid = np.full((len(rs), length), np.nan)
            for i, v in enumerate(per_run):
                grid[i, :len(v)] = v
            with _quiet():
                mean = np.nanmean(grid, axis=0)
            # NaN (a step without the metric) as null: results.json stays strict JSON
            cell["curves"][curve.name] = {"per_seed": _nulls(grid), "mean": _nulls(mean)}
            cell["table"][f"{curve.name} (last quarter)"] = seed_interval([tail_mean(v) for v in per_run])
        for name in (exp.heldout.figures if exp.heldout else {}):
            cell["table"][f"held-out {name}"] = seed_question_interval(np.array([r.heldout[name] for r in rs]))
        for key in exp.seed_spread:
            with _quiet():
                means = [float(np.nanmean(r.series(key))) if r.metrics else np.nan for r in rs]
                spread = float(np.nanstd(means)) if len(rs) > 1 else np.nan
            cell["table"][f"{key}: std over seeds"] = [None if np.isnan(spread) else spread, None, None]
        arms[arm.name] = cell
    return {"experiment": exp.name, "claim": exp.claim, "paper": exp.paper, "quick": quick, "arms": arms,
            "figures": [c.name for c in exp.curves] + [f"held-out {n}" for n in (exp.heldout.figures if exp.heldout else {})]}


def _fmt(v: list[float | None]) -> str:
    if v[0] is None:
        return "n/a"
    return f"{v[0]:.3f}" if v[1] is None else f"{v[0]:.3f} [{v[1]:.3f}, {v[2]:.3f}]"


def format_table(result: dict[str, Any]) -> str:
    """A Markdown table: one row per arm, one column per figure (95% intervals in brackets)."""
    arms = result["arms"]
    cols = list(dict.fromkeys(c for a in arms.values() for c in a["table"]))
    lines = ["| arm | seeds | " + " | ".join(cols) + " |", "|---|---|" + "---|" * len(cols)]
    for name, a in arms.items():
        lines.append(f"| {name} | {len(a['seeds'])} | " + " | ".join(_fmt(a["table"].get(c, [None])) for c in cols) + " |")
    return "\n".join(lines)


def plot(exp: Experiment, result: dict[str, Any], path: Path) -> Path:
    """One PNG: a panel per curve (mean over seeds, thin lines per seed) and one of the held-out figures."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from rlec.io import save_figure

    held = [f"held-out {n}" for n in (exp.heldout.figures if exp.heldout else {})]
    panels = len(exp.curves) + (1 if held else 0)
    fig, axes = plt.subplots(1, panels, figsize=(5 * panels, 3.8), squeeze=False)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, curve in zip(axes[0], exp.curves):
        for i, (name, a) in enumerate(result["arms"].items()):
            c = a["curves"][curve.name]
            steps = np.arange(1, len(c["mean"]) + 1)
            for seed_line in c["per_seed"]:
                ax.plot(steps, np.array(seed_line, dtype=float), color=colors[i % len(colors)], alpha=0.25, lw=0.8)
            ax.plot(steps, np.array(c["mean"], dtype=float), color=colors[i % len(colors)], lw=2, label=name)
        ax.set_xlabel("step")
        ax.set_title(curve.label, fontsize=10)
        ax.legend(fontsize=8)
    if held:
        ax = axes[0][-1]
        width = 0.8 / max(1, len(result["arms"]))
        for i, (name, a) in enumerate(result["arms"].items()):
            vals = [a["table"][h] for h in held]
            x = np.arange(len(held)) + i * width
            point = [v[0] if v[0] is not None else np.nan for v in vals]
            err = [[p - (v[1] if v[1] is not None else p) for p, v in zip(point, vals)],
                   [(v[2] if v[2] is not None else p) - p for p, v in zip(point, vals)]]
            ax.bar(x, point, width, yerr=err, capsize=2, color=colors[i % len(colors)], label=name)
        ax.set_xticks(np.arange(len(held)) + 0.4 - width / 2)
        ax.set_xticklabels([h.replace("held-out ", "") for h in held], fontsize=8, rotation=20)
        ax.set_title("held-out (95% CI over seeds x questions)", fontsize=10)
        ax.legend(fontsize=8)
    fig.suptitle(f"{exp.name}{' (--quick: a few steps, not a result)' if result['quick'] else ''}", fontsize=11)
    fig.tight_layout()
    save_figure(fig, path)
    plt.close(fig)
    return path
