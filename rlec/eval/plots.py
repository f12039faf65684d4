"""PNG plots of a metrics result (matplotlib, Agg backend, written atomically).

- ``coverage_selective_accuracy.png``: coverage and selective accuracy against the target p, with
  the diagonal y = p (a model that follows its target has selective accuracy above it);
- ``risk_coverage.png``: the closed risk-coverage curve of the target sweep whose area is AURC;
- ``reward_vs_target.png``: mean RLEC reward at b = 1 against p, per source (0 = always abstain);
- ``hallucination_abstention.png``: abstention and hallucination rates against p per calibration stratum;
- ``reliability.png``: relplot's reliability diagram of c_i against correctness at the reference prompt, per run.

Colours are groups (all, then each source); line styles are runs (solid = first, dashed =
second), so two runs compare in the same figure.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from rlec.io import save_figure  # noqa: E402

STYLES = ("-", "--")
MARKERS = ("o", "s")


def _colors(groups: list[str]) -> dict[str, str]:
    palette = plt.get_cmap("tab10").colors
    return {g: ("black" if g == "all" else palette[i % len(palette)]) for i, g in enumerate(groups)}


_FIGURE_FILE = {"dpi": 120, "bbox_inches": "tight"}  # how every plot of this module is written


def _swept(fig: dict[str, Any], key: str) -> tuple[list[float], list[float]]:
    pts = [(t["target_p"], t[key]) for t in fig["per_target"] if t["target_p"] is not None and t[key] is not None]
    return [p for p, _ in pts], [v for _, v in pts]


def _iter(result: dict[str, Any]):
    runs = result["runs"]
    groups: list[str] = []
    for run in runs.values():
        groups += [g for g in run["groups"] if g not in groups]
    colors = _colors(groups)
    for r, (label, run) in enumerate(runs.items()):
        for group, fig in run["groups"].items():
            name = group if len(runs) == 1 else f"{label}: {group}"
            style = {"color": colors[group], "linestyle": STYLES[r % 2], "marker": MARKERS[r % 2], "linewidth": 2.4 if group == "all" else 1.3}
            yield name, fig, style


def _rate_axes(panels: Any) -> None:
    """Each ``(axes, title)`` panel as a rate (0-1) against the target p (0-1), with a light grid."""
    for ax, title in panels:
        ax.set(xlim=(-0.02, 1.0), ylim=(-0.02, 1.02), xlabel="target p", title=title)
        ax.grid(alpha=0.3)


def plot_coverage_selective_accuracy(result: dict[str, Any], path: Path) -> Path:
    """Coverage (left) and selective accuracy with y = p (right) against the target p."""
    figure, (ax_c, ax_s) = plt.subplots(1, 2, figsize=(11, 4.2))
    for name, fig, style in _iter(result):
        ax_c.plot(*_swept(fig, "coverage"), label=name, **style)
        ax_s.plot(*_swept(fig, "selective_accuracy"), label=name, **style)
    ax_s.plot([0, 1], [0, 1], ":", color="grey", label="y = p")
    _rate_axes(((ax_c, "coverage (answered / all)"), (ax_s, "selective accuracy (correct / answered)")))
    ax_s.legend(fontsize=8, loc="lower right")
    return save_figure(figure, path, **_FIGURE_FILE)


def plot_risk_coverage(result: dict[str, Any], path: Path) -> Path:
    """The closed risk-coverage curves (area = AURC), sweep points marked."""
    figure, ax = plt.subplots(figsize=(5.8, 4.4))
    single = len(result["runs"]) == 1
    for name, fig, style in _iter(result):
        x, y = fig["risk_coverage"]["coverage"], fig["risk_coverage"]["risk"]
        aurc = fig["headline"]["aurc"]["value"]
        color, marker = style["color"], style["marker"]
        line = {k: v for k, v in style.items() if k != "marker"}
        ax.plot(x, y, label=f"{name} (AURC {aurc:.3f})" if aurc is not None else name, **line)
        points: dict[tuple[float, float], list[str]] = {}
        for t in fig["per_target"]:
            if t["target_p"] is not None and t["selective_accuracy"] is not None:
                points.setdefault((round(t["coverage"], 6), round(1 - t["selective_accuracy"], 6)), []).append(t["target"])
        ax.scatter([c for c, _ in points], [r for _, r in points], color=color, marker=marker, s=18, zorder=3)
        if single and name == "all":
            ax.fill_between(x, y, alpha=0.12, color=color)
            for (c, r), labels in points.items():
                text = f"p={labels[0]}" if len(labels) == 1 else f"p={labels[0]}..{labels[-1]}"
                ax.annotate(text, (c, r), fontsize=7, xytext=(-4, 4), textcoords="offset points", ha="right")
    ax.set(xlim=(0, 1.02), ylim=(-0.02, 1.02), xlabel="coverage", ylabel="selective risk (1 - selective accuracy)", title="risk-coverage curve of the target sweep")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    return save_figure(figure, path, **_FIGURE_FILE)


def plot_reward_vs_target(result: dict[str, Any], path: Path) -> Path:
    """Mean RLEC reward (b = 1) against the target p, per source."""
    figure, ax = plt.subplots(figsize=(5.8, 4.4))
    for name, fig, style in _iter(result):
        ax.plot(*_swept(fig, "reward"), label=name, **style)
    ax.axhline(0.0, color="grey", linestyle=":", label="always abstain (0)")
    ax.set(xlabel="target p", ylabel="mean reward, b = 1", title="RLEC reward per target")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return save_figure(figure, path, **_FIGURE_FILE)


def _calibrated_runs(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {label: run["calibration"] for label, run in result["runs"].items() if run.get("calibration")}


def plot_hallucination_abstention(result: dict[str, Any], path: Path) -> Path:
    """Abstention rate (left) and hallucination (wrong-answer) rate (right) against the target p, per
    calibration stratum (``all`` thick, black); runs as line styles."""
    runs = _calibrated_runs(result)
    strata: list[str] = []
    for cal in runs.values():
        strata += [s for s in cal["strata"] if s not in strata]
    colors = _colors(strata)
    figure, (ax_a, ax_h) = plt.subplots(1, 2, figsize=(11, 4.2))
    for r, (label, cal) in enumerate(runs.items()):
        for name, fig in cal["strata"].items():
            tag = name if len(runs) == 1 else f"{label}: {name}"
            style = {"color": colors[name], "linestyle": STYLES[r % 2], "marker": MARKERS[r % 2], "linewidth": 2.4 if name == "all" else 1.2}
            ps = [t["target_p"] for t in fig["per_target"]]
            ax_a.plot(ps, [t["abstention_rate"] for t in fig["per_target"]], label=tag, **style)
            ax_h.plot(ps, [t["hallucination_rate"] for t in fig["per_target"]], label=tag, **style)
    _rate_axes(((ax_a, "abstention rate (abstained / all)"), (ax_h, "hallucination rate (wrong answers / all)")))
    ax_h.legend(fontsize=7, loc="best")
    return save_figure(figure, path, **_FIGURE_FILE)


def plot_reliability(result: dict[str, Any], path: Path) -> Path:
    """relplot's reliability diagram (smoothed, Blasiok & Nakkiran 2024) of c_i against the correctness of
    the run's answers at the reference prompt (binary unless ``--q-target``), one panel per run, one
    observation per answered record."""
    import numpy as np
    import relplot

    runs = _calibrated_runs(result)
    with matplotlib.rc_context():  # relplot restyles matplotlib globally: keep it to this figure
        figure, axes = plt.subplots(1, len(runs), figsize=(5.2 * len(runs), 5.0), squeeze=False)
        for ax, (label, cal) in zip(axes[0], runs.items()):
            rows = [q for q in cal["questions"] if q["label_answered"]]
            f = np.concatenate([[q["c"]] * q["label_answered"] for q in rows]) if rows else np.array([])
            y = np.concatenate([[1.0] * q["label_correct"] + [0.0] * (q["label_answered"] - q["label_correct"]) for q in rows]) if rows else np.array([])
            if len(f) >= 2:
                diagram = relplot.prepare_rel_diagram(f, y, num_bootstrap=100, report_CE_std=False)
                relplot.plot_rel_diagram(diagram, fig=figure, ax=ax)
            ax.set_title(f"{label}: c_i ({cal['c_rule']}) vs correctness at {cal['reference']}", fontsize=9)
        return save_figure(figure, path, **_FIGURE_FILE)


def write_plots(result: dict[str, Any], out_dir: str | Path) -> list[Path]:
    """Write the PNG files into ``out_dir`` (the calibration plots when a run has calibration figures); returns their paths."""
    out_dir = Path(out_dir)
    written = [
        plot_coverage_selective_accuracy(result, out_dir / "coverage_selective_accuracy.png"),
        plot_risk_coverage(result, out_dir / "risk_coverage.png"),
        plot_reward_vs_target(result, out_dir / "reward_vs_target.png"),
    ]
    if _calibrated_runs(result):
        written += [plot_hallucination_abstention(result, out_dir / "hallucination_abstention.png"),
                    plot_reliability(result, out_dir / "reliability.png")]
    return written
