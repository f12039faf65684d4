"""An experiment's summary: paired per-seed differences with 95% t-intervals, the verdict, the figure, results.json.

Statistics (issue 57 item 1):

- **the verdict** rests on one primary metric declared in the spec (:class:`rlec.experiments.spec.Primary`):
  per seed s, ``d_s = primary(method arm, seed s) - primary(baseline arm, seed s)`` (the arms share data order and
  seeds, so their runs are paired), and a 95% t-interval of the mean difference with df = seeds - 1
  (:func:`paired_interval`). Verdict words (:data:`rlec.experiments.spec.VERDICTS`): **reproduced** (the interval
  lies on the side the paper claims), **not reproduced** (it holds 0 or lies on the other side), **premise absent**
  (the baseline did not show what the method counters: the premise gate, :func:`premise_outcome`). No verdict
  below the power note's seeds (:func:`seeds_for_power`), on a ``--quick`` run, or without the primary metric.
- **per-arm cells** (the table): mean over seeds with a 95% t-interval over the seeds of each seed's value (a
  per-step curve: its mean over the last quarter of the steps; a held-out figure: its mean over the questions).
  Two arms' cells are descriptive: whether their intervals overlap is no criterion.
- **raw values**: ``results.json`` keeps each arm-seed's per-step values of the stored keys (:data:`RAW_KEYS`, the
  curves', the primary's) and every held-out figure per question, so every figure can be recomputed.
"""

from __future__ import annotations

import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

import numpy as np

from rlec.experiments import keys as K
from rlec.experiments.spec import Experiment, Run, final_value

CONFIDENCE = 0.95
# per-step metrics every results.json keeps per arm-seed (besides the curves' and the primary's): whether clipping
# acted (verl's compute_policy_loss_vanilla logs them per update, averaged over the step), entropy, reward
RAW_KEYS = (K.M_ENTROPY, K.M_REWARD, K.M_CLIPFRAC, K.M_CLIPFRAC_LOWER, K.M_PPO_KL, K.M_GRAD_NORM)


def t_interval(values: Sequence[float], confidence: float = CONFIDENCE) -> list[float | None]:
    """``[mean, lo, hi]``: the mean of ``values`` (NaN dropped) with its t-interval, df = n - 1 (``scipy.stats.t``).

    One value: ``[value, None, None]`` (no interval); none: ``[None, None, None]``.
    """
    from scipy import stats

    x = np.asarray(values, dtype=float)
    x = x[~np.isnan(x)]
    if not len(x):
        return [None, None, None]
    mean = float(x.mean())
    if len(x) < 2:
        return [mean, None, None]
    half = float(stats.t.ppf(0.5 + confidence / 2, len(x) - 1) * x.std(ddof=1) / np.sqrt(len(x)))
    return [mean, mean - half, mean + half]


def paired_interval(method: Sequence[float], baseline: Sequence[float], confidence: float = CONFIDENCE) -> dict[str, Any]:
    """Per-seed differences ``method[s] - baseline[s]`` and their mean's t-interval (df = seeds - 1).

    Args:
        method, baseline: one value per seed, the same seeds in the same order (NaN: not measured).

    Returns:
        ``{"differences": [...], "seeds": n, "df": n - 1, "mean": m, "lo": lo, "hi": hi}`` over the seeds where both
        are measured (None where undefined).

    Raises:
        ValueError: the two lists differ in length.
    """
    if len(method) != len(baseline):
        raise ValueError(f"paired_interval: {len(method)} method values against {len(baseline)} baseline values")
    d = np.asarray(method, dtype=float) - np.asarray(baseline, dtype=float)
    d = d[~np.isnan(d)]
    mean, lo, hi = t_interval(d, confidence)
    return {"differences": [float(v) for v in d], "seeds": int(len(d)), "df": int(len(d)) - 1 if len(d) else None,
            "mean": mean, "lo": lo, "hi": hi}


def seeds_for_power(sd: float | None, effect: float, *, power: float = 0.8, alpha: float = 0.05, minimum: int = 5,
                    maximum: int = 100) -> int:
    """Seeds for a two-sided paired t-test of level ``alpha`` to detect a mean difference ``effect`` with ``power``.

    Power of n seeds: P(|T| > t_{1 - alpha/2, n-1}) with T noncentral t (df n - 1, noncentrality effect / sd * sqrt(n))
    (``scipy.stats.nct``). Returns the smallest such n, but at least ``minimum`` (5: the issue's floor) and at most
    ``maximum``; ``minimum`` when no SD has been measured (``sd`` None).

    Raises:
        ValueError: ``effect`` <= 0 or ``sd`` <= 0.
    """
    from scipy import stats

    if sd is None:
        return minimum
    if effect <= 0 or sd <= 0:
        raise ValueError(f"seeds_for_power: effect and sd must be > 0, got effect={effect}, sd={sd}")
    for n in range(2, maximum + 1):
        crit = stats.t.ppf(1 - alpha / 2, n - 1)
        nc = effect / sd * np.sqrt(n)
        if stats.nct.sf(crit, n - 1, nc) + stats.nct.cdf(-crit, n - 1, nc) >= power:
            return max(minimum, n)
    return maximum


def power_note(experiments: Sequence[Experiment]) -> dict[str, Any]:
    """The power note: per experiment, the primary metric's measured paired SD, the effect sought and the seeds
    (:func:`seeds_for_power`, 80% power, alpha 0.05, at least 5); committed as ``docs/results/power.json``."""
    out = {}
    for exp in experiments:
        p = exp.primary
        assert p is not None
        out[exp.name] = {"primary": p.name, "sd": p.sd, "sd_source": p.sd_source or None, "effect": p.effect,
                         "seeds": seeds_for_power(p.sd, p.effect) if p.effect > 0 else 5, "spec_seeds": exp.seeds}
    return {"power": 0.8, "alpha": 0.05, "test": "two-sided paired t-test (scipy.stats.nct), at least 5 seeds",
            "experiments": out}


def premise_outcome(exp: Experiment, baseline_runs: Sequence[Run]) -> dict[str, Any] | None:
    """The premise gate on the baseline arm's first seeds: ``{"what", "seeds", "held", "figures"}`` (None: the
    experiment has no premise). ``held`` is None when a figure it needs was not measured (``figures["missing"]``)."""
    if exp.premise is None:
        return None
    runs = sorted(baseline_runs, key=lambda r: r.seed)[:exp.premise.seeds]
    if not runs:
        return {"what": exp.premise.what, "seeds": [], "held": None, "figures": {"missing": f"a run of {exp.baseline!r}"}}
    held, figures = exp.premise.check(runs)
    return {"what": exp.premise.what, "seeds": [r.seed for r in runs], "held": held, "figures": figures}


def _primary_values(exp: Experiment, runs: Sequence[Run]) -> dict[int, float]:
    assert exp.primary is not None
    return {r.seed: float(exp.primary.value(r)) for r in runs}


def compare(exp: Experiment, runs: Mapping[str, Sequence[Run]], *, quick: bool, premise: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Each of the experiment's comparisons (:meth:`Experiment.pairs`): the primary metric per seed in both arms,
    the paired interval and the verdict (or why there is none)."""
    assert exp.primary is not None
    out = []
    for method, base in exp.pairs():
        cell: dict[str, Any] = {"method": method, "baseline": base, "primary": exp.primary.name}
        if premise is not None and premise["held"] is False and not quick:
            cell.update(verdict="premise absent", why=f"the baseline did not show: {premise['what']}")
            out.append(cell)
            continue
        m, b = _primary_values(exp, runs.get(method, [])), _primary_values(exp, runs.get(base, []))
        seeds = sorted(set(m) & set(b))
        cell["per_seed"] = {"seeds": seeds, method: [_null(m[s]) for s in seeds], base: [_null(b[s]) for s in seeds]}
        cell.update(paired_interval([m[s] for s in seeds], [b[s] for s in seeds]))
        verdict, why = None, ""
        if quick:
            why = "--quick: the wiring, not a verdict"
        elif premise is not None and premise["held"] is None:
            why = f"the premise gate could not be read ({premise['figures'].get('missing', '?')} not measured)"
        elif not m or not b:
            untrained = [arm for arm, values in ((method, m), (base, b)) if not values]
            why = f"no paired seeds: {', '.join(repr(a) for a in untrained)} not trained"
        elif any(np.isnan(m[s]) or np.isnan(b[s]) for s in seeds) or not seeds:
            why = f"primary metric not measured (needs {', '.join(exp.primary.requires) or exp.primary.name})"
        elif cell["seeds"] < exp.seeds:
            why = f"{cell['seeds']} paired seeds, fewer than the power note's {exp.seeds}"
        else:
            side = exp.primary.direction * np.array([cell["lo"], cell["hi"]])
            verdict = "reproduced" if side.min() > 0 else "not reproduced"
            why = (f"mean difference {cell['mean']:+.4f}, 95% t-interval [{cell['lo']:+.4f}, {cell['hi']:+.4f}] "
                   f"(df {cell['df']}); the paper claims {'higher' if exp.primary.direction > 0 else 'lower'}")
        cell.update(verdict=verdict, why=why)
        out.append(cell)
    return out


def secondary_comparisons(exp: Experiment, runs: Mapping[str, Sequence[Run]]) -> list[dict[str, Any]]:
    """Each secondary figure (:attr:`Experiment.secondary`) paired per seed like the primary one, for every comparison:
    ``{"method", "baseline", "name", "per_seed", "differences", "seeds", "df", "mean", "lo", "hi"}``; never a verdict."""
    out = []
    for sec in exp.secondary:
        for method, base in exp.pairs():
            m = {r.seed: float(sec.value(r)) for r in runs.get(method, [])}
            b = {r.seed: float(sec.value(r)) for r in runs.get(base, [])}
            seeds = sorted(set(m) & set(b))
            cell: dict[str, Any] = {"method": method, "baseline": base, "name": sec.name,
                                    "per_seed": {"seeds": seeds, method: [_null(m[s]) for s in seeds],
                                                 base: [_null(b[s]) for s in seeds]}}
            cell.update(paired_interval([m[s] for s in seeds], [b[s] for s in seeds]))
            out.append(cell)
    return out


def spread_label(key: str) -> str:
    """The table column of a seed spread: the SD over seeds of each seed's final value of ``key``."""
    return f"{key}: final (last 20%), SD over seeds"


def spread_ratio(method: Sequence[float], baseline: Sequence[float]) -> dict[str, Any]:
    """How the seeds' spread of one figure compares between two arms that share their seeds.

    ``sd_method`` / ``sd_baseline``: sample SDs (ddof 1); ``ratio`` = sd_method / sd_baseline; ``p``: the two-sided
    Pitman-Morgan test of equal variances for paired samples (Pitman 1939, Morgan 1939): the correlation r of the
    per-seed sums and differences (cov(x + y, x - y) = var x - var y), t = r sqrt((n - 2) / (1 - r^2)), df = n - 2.
    Paired because the arms share seeds and data order (an F-test would assume independent arms).

    Args:
        method, baseline: one value per seed, the same seeds in the same order (NaN pairs dropped).

    Returns:
        ``{"seeds", "sd_method", "sd_baseline", "ratio", "r", "t", "df", "p"}``; None where undefined (fewer than 2
        seeds for an SD, 3 for the test; a zero SD in the denominator).

    Raises:
        ValueError: the two lists differ in length.
    """
    from scipy import stats

    if len(method) != len(baseline):
        raise ValueError(f"spread_ratio: {len(method)} method values against {len(baseline)} baseline values")
    x, y = np.asarray(method, dtype=float), np.asarray(baseline, dtype=float)
    keep = ~(np.isnan(x) | np.isnan(y))
    x, y = x[keep], y[keep]
    n = len(x)
    out: dict[str, Any] = {"seeds": n, "sd_method": None, "sd_baseline": None, "ratio": None, "r": None, "t": None,
                           "df": None, "p": None}
    if n < 2:
        return out
    sx, sy = float(np.std(x, ddof=1)), float(np.std(y, ddof=1))
    out.update(sd_method=sx, sd_baseline=sy, ratio=sx / sy if sy > 0 else None)
    total, diff = x + y, x - y
    if n < 3 or np.std(total) == 0 or np.std(diff) == 0:
        return out
    r = float(np.corrcoef(total, diff)[0, 1])
    t = r * np.sqrt((n - 2) / max(1.0 - r * r, 1e-300))
    out.update(r=r, t=float(t), df=n - 2, p=float(2 * stats.t.sf(abs(t), n - 2)))
    return out


def spread_comparisons(exp: Experiment, runs: Mapping[str, Sequence[Run]]) -> list[dict[str, Any]]:
    """For each :attr:`Experiment.seed_spread` key and comparison, :func:`spread_ratio` of the seeds' final values
    (:func:`rlec.experiments.spec.final_value`), with ``method``, ``baseline``, ``key`` and each arm's values."""
    out = []
    for key in exp.seed_spread:
        for method, base in exp.pairs():
            m = {r.seed: final_value(r.series(key)) for r in runs.get(method, [])}
            b = {r.seed: final_value(r.series(key)) for r in runs.get(base, [])}
            seeds = sorted(set(m) & set(b))
            cell: dict[str, Any] = {"method": method, "baseline": base, "key": key, "per_seed": {
                "seeds": seeds, method: [_null(m[s]) for s in seeds], base: [_null(b[s]) for s in seeds]}}
            cell.update(spread_ratio([m[s] for s in seeds], [b[s] for s in seeds]))
            out.append(cell)
    return out


def _null(v: float) -> float | None:
    return None if np.isnan(v) else float(v)


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
    from rlec.experiments.spec import window_mean

    return window_mean(values, 0.75, 1.0)


def raw_keys(exp: Experiment) -> tuple[str, ...]:
    """The per-step metric keys ``results.json`` keeps per arm-seed: :data:`RAW_KEYS`, the probe's (its entropy, and its
    pass@k where graded), the primary's."""
    extra = list(exp.probe.metrics()) if exp.probe else []
    extra += [k for k in (exp.primary.requires if exp.primary else ()) if "/" in k]
    return tuple(dict.fromkeys((*RAW_KEYS, *extra)))


def summarise(exp: Experiment, runs: dict[str, list[Run]], *, quick: bool, premise: dict[str, Any] | None = None,
              differences: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The results JSON: the primary metric, the premise gate, the paired comparisons and verdicts, per-arm cells
    (t-intervals over seeds), curves, the raw per-step and per-question values, and the arm differences not named by
    the arms (``differences``: :func:`rlec.experiments.core.arm_differences` per arm)."""
    assert exp.primary is not None
    arms: dict[str, Any] = {}
    for arm in exp.arms:
        rs = sorted(runs.get(arm.name, []), key=lambda r: r.seed)
        if not rs:
            continue
        cell: dict[str, Any] = {"what": arm.what, "seeds": [r.seed for r in rs], "curves": {}, "table": {}, "raw": {}}
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
            cell["table"][f"{curve.name} (last quarter)"] = t_interval([tail_mean(v) for v in per_run])
        with _quiet():
            for name in (exp.heldout.figures if exp.heldout else {}):
                cell["table"][f"held-out {name}"] = t_interval([np.nanmean(r.heldout[name]) if len(r.heldout.get(name, []))
                                                                else np.nan for r in rs])
            for key in exp.seed_spread:
                finals = np.array([final_value(r.series(key)) for r in rs])
                finals = finals[~np.isnan(finals)]
                spread = float(np.std(finals, ddof=1)) if len(finals) > 1 else np.nan
                cell["table"][spread_label(key)] = [None if np.isnan(spread) else spread, None, None]
        cell["table"][f"primary: {exp.primary.name}"] = t_interval([exp.primary.value(r) for r in rs])
        keys = raw_keys(exp)
        for r in rs:
            cell["raw"][f"seed{r.seed}"] = {
                "metrics": {k: _nulls(np.asarray(r.series(k), dtype=float)) for k in keys},
                "heldout": {n: _nulls(np.asarray(v, dtype=float)) for n, v in r.heldout.items()},
                "groups": r.groups}
        arms[arm.name] = cell
    return {"experiment": exp.name, "claim": exp.claim, "paper": exp.paper, "quick": quick,
            "primary": {"name": exp.primary.name, "direction": exp.primary.direction, "requires": list(exp.primary.requires)},
            "baseline": exp.baseline, "seeds_needed": exp.seeds, "premise": premise,
            "comparisons": compare(exp, runs, quick=quick, premise=premise),
            "secondary": secondary_comparisons(exp, runs), "seed_spread": spread_comparisons(exp, runs),
            "task": exp.task or None,
            "paper_settings": [{"what": s.what, "paper": s.paper, "rlec": s.rlec, "note": s.note} for s in exp.paper_settings],
            "arm_differences": dict(differences or {}), "arms": arms,
            "figures": [c.name for c in exp.curves] + [f"held-out {n}" for n in (exp.heldout.figures if exp.heldout else {})]}


def format_verdicts(result: dict[str, Any]) -> str:
    """The primary metric, the premise gate and each comparison's paired interval and verdict, one line each."""
    lines = [f"primary metric: {result['primary']['name']}"]
    p = result.get("premise")
    if p is not None:
        figs = ", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in p["figures"].items())
        state = {True: "held", False: "ABSENT", None: "not measured"}[p["held"]]
        lines.append(f"premise ({p['what']}): {state} on seeds {p['seeds']}: {figs}")
    for c in result["comparisons"]:
        lines.append(f"{c['method']} - {c['baseline']}: {c['verdict'] or 'no verdict'} ({c['why']})")
    for c in result.get("secondary", []):
        interval = "" if c["lo"] is None else f", 95% t-interval [{c['lo']:+.4f}, {c['hi']:+.4f}] (df {c['df']})"
        mean = "n/a" if c["mean"] is None else f"{c['mean']:+.4f}"
        lines.append(f"secondary, {c['name']}: {c['method']} - {c['baseline']}: mean difference {mean}{interval} (no verdict)")
    for c in result.get("seed_spread", []):
        sds = ("n/a" if c["sd_method"] is None else f"SD {c['sd_method']:.4f} vs {c['sd_baseline']:.4f}"
               + ("" if c["ratio"] is None else f", ratio {c['ratio']:.3g}")
               + ("" if c["p"] is None else f", Pitman-Morgan p = {c['p']:.3g} (df {c['df']})"))
        lines.append(f"seed spread of {c['key']} (final, last 20%): {c['method']} vs {c['baseline']}: {sds} over {c['seeds']} seeds")
    for arm, diff in result.get("arm_differences", {}).items():
        if diff:
            lines.append(f"{arm}: differs from {result['baseline']} in keys the arm does not name: "
                         + ", ".join(f"{k} ({v[0]!r} -> {v[1]!r})" for k, v in diff.items()))
    return "\n".join(lines)


def format_plan(exp: Experiment, arms: Sequence[str], seeds: int, steps: int, out: Path, *, quick: bool = False) -> str:
    """What a run of ``exp`` would do, as Markdown (``--plan``): the claim, task, data, warm start, arms with their
    overrides, the shared settings, the primary metric, premise gate, secondary figures, seed spreads, held-out
    evaluation, and the paper's settings beside rlec's (:func:`format_paper_settings`)."""
    from dataclasses import asdict

    from rlec.experiments.pilot import warm_start_config

    assert exp.primary is not None
    cfg = warm_start_config(exp)
    lines = [f"## {exp.name}{' (--quick)' if quick else ''}: {exp.claim}", "", f"paper: {exp.paper}",
             f"run: {len(arms)} arms x {seeds} seeds, {steps} steps each -> {out}"
             + ("" if seeds >= exp.seeds else f" (a verdict needs {exp.seeds} seeds)"),
             f"task: {exp.task or exp.data}", f"training data: {exp.data}, {exp.train_rows} rows"]
    if exp.pool is not None:
        lines.append(f"pool: {asdict(exp.pool)} (rlec.environments.pool: the distinct right answers per prompt in "
                     "shared/data/summary.json)")
    defaults = type(cfg)()
    changed = {k: v for k, v in asdict(cfg).items() if v != asdict(defaults)[k]}
    lines.append(f"warm start: key {cfg.key()}, " + (f"the demo's recipe with {changed}" if changed else "the demo's"))
    lines += ["", "| arm | setting | overrides |", "|---|---|---|"]
    for name in arms:
        arm = exp.arm(name)
        over = " ".join(arm.overrides) + ("" if arm.then is None else f" then {' '.join(arm.then) or '(none)'} "
                                          f"from {arm.switch_fraction:.0%} of the steps")
        lines.append(f"| {name}{' (baseline)' if name == exp.baseline else ''} | {arm.what} | {over or '-'} |")
    lines += ["", "shared settings: " + ", ".join(f"{k}={v}" for k, v in exp.settings.items()),
              f"primary metric: {exp.primary.name} ({'higher' if exp.primary.direction > 0 else 'lower'} with the method); "
              f"paired: {', '.join(f'{m} - {b}' for m, b in exp.pairs())}",
              f"premise gate: {exp.premise.what if exp.premise else 'none'}"]
    lines += [f"secondary (paired, no verdict): {s.name}" for s in exp.secondary]
    lines += [f"seed spread: {spread_label(k)}, per comparison the SD ratio (Pitman-Morgan)" for k in exp.seed_spread]
    if exp.heldout is not None:
        h = exp.heldout
        lines.append(f"held out: targets {['binary' if t is None else t for t in h.targets]}, {h.n_samples} samples at "
                     f"T = {h.temperature}; figures {', '.join(h.figures)}")
    return "\n".join([*lines, "", format_paper_settings(exp)])


def format_paper_settings(exp: Experiment) -> str:
    """A Markdown table of the experiment's settings beside the paper's (:attr:`Experiment.paper_settings`)."""
    lines = ["| setting | paper | rlec | why rlec differs |", "|---|---|---|---|"]
    lines += [f"| {s.what} | {s.paper} | {s.rlec} | {s.note or '-'} |" for s in exp.paper_settings]
    return "\n".join(lines)


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
            # one seed has no interval: no error bar, rather than caps at the point that read as a tight interval
            ax.bar(x, point, width, yerr=err if len(a["seeds"]) > 1 else None, capsize=2,
                   color=colors[i % len(colors)], label=name)
        ax.set_xticks(np.arange(len(held)) + 0.4 - width / 2)
        ax.set_xticklabels([h.replace("held-out ", "") for h in held], fontsize=8, rotation=20)
        trained = sorted({len(a["seeds"]) for a in result["arms"].values() if a["seeds"]}) or [0]
        ax.set_title("held-out (mean over seeds, 95% t-interval)" if trained[0] > 1
                     else "held-out (an arm with one seed: no interval)", fontsize=10)
        ax.legend(fontsize=8)
    fig.suptitle(f"{exp.name}{' (--quick: a few steps, not a result)' if result['quick'] else ''}", fontsize=11)
    fig.tight_layout()
    save_figure(fig, path)
    plt.close(fig)
    return path
