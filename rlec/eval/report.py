"""Markdown tables of a metrics result (one run, or two side by side) and the run-to-run deltas.

Input is the JSON-like dict written by ``python -m rlec.eval.metrics`` (``runs -> label -> groups ->
group -> headline / per_target``, and ``runs -> label -> calibration -> strata``). Undefined values (null) print as "n/a".
"""

from __future__ import annotations

from typing import Any, Sequence

HEADLINE_TITLES = {"accuracy": "accuracy (binary)", "rlec_score": "RLEC score", "aoc": "AOC", "aurc": "AURC"}
TARGET_COLUMNS = (
    ("coverage", "coverage"),
    ("selective_accuracy", "sel. acc."),
    ("accuracy", "accuracy"),
    ("abstention_rate", "abstain"),
    ("reward", "reward"),
    ("compliance", "sel. acc. - p"),
)


def _f(x: float | None, signed: bool = False) -> str:
    if x is None:
        return "n/a"
    if abs(x) < 5e-4:
        x = 0.0  # no "-0.000" for a value that rounds to zero
    return f"{x:+.3f}" if signed else f"{x:.3f}"


def _with_ci(h: dict[str, float | None]) -> str:
    if h["ci_low"] is None:
        return _f(h["value"])
    return f"{_f(h['value'])} [{_f(h['ci_low'])}, {_f(h['ci_high'])}]"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    return lines + ["| " + " | ".join(r) + " |" for r in rows]


def comparison(result: dict[str, Any]) -> dict[str, dict[str, float | None]]:
    """Headline deltas (second run minus first) per group present in both runs; {} for one run."""
    runs = list(result["runs"].values())
    if len(runs) != 2:
        return {}
    a, b = runs[0]["groups"], runs[1]["groups"]
    out = {}
    for group in a:
        if group in b:
            out[group] = {}
            for name in HEADLINE_TITLES:
                va, vb = a[group]["headline"][name]["value"], b[group]["headline"][name]["value"]
                out[group][name] = None if va is None or vb is None else vb - va
    return out


CALIBRATION_TITLES = {"smece": "smECE", "ece": "ECE (10 bins)", "brier": "Brier", "auroc": "AUROC", "agreement": "agreement",
                      "regret": "regret (b = 1)", "monotonicity": "monotonicity viol."}
DECISION_COLUMNS = (
    ("coverage", "coverage"),
    ("hallucination_rate", "halluc."),
    ("abstention_rate", "abstain"),
    ("hallucination_to_abstention", "halluc./abstain"),
    ("accuracy_to_hallucination", "acc./halluc."),
    ("riskeval_utility", "RiskEval utility"),
)
DECISION_INTERVALS = (("agreement", "agreement"), ("regret", "regret"), ("monotonicity_violations", "monot. viol."))


def calibration_comparison(result: dict[str, Any]) -> dict[str, dict[str, float | None]]:
    """Calibration headline deltas (second run minus first) per stratum present in both runs; {} otherwise."""
    runs = list(result["runs"].values())
    if len(runs) != 2 or not all(run.get("calibration") for run in runs):
        return {}
    a, b = (run["calibration"]["strata"] for run in runs)
    out = {}
    for stratum in a:
        if stratum in b:
            out[stratum] = {}
            for name in CALIBRATION_TITLES:
                va, vb = a[stratum]["headline"][name]["value"], b[stratum]["headline"][name]["value"]
                out[stratum][name] = None if va is None or vb is None else vb - va
    return out


def _calibration_tables(result: dict[str, Any], per_target_groups: Sequence[str] | None) -> list[str]:
    """The per-question calibration tables (docs/metrics.md, "Per-question calibration"): one headline row per
    stratum, then the decisions per target of the strata shown (``per_target_groups``; every stratum when None)."""
    runs = {label: run["calibration"] for label, run in result["runs"].items() if run.get("calibration")}
    if not runs:
        return []
    ci = result["settings"]["ci"]
    labels = list(runs)
    lines: list[str] = []
    first = runs[labels[0]]
    notes = []
    for label, cal in runs.items():
        q = f"q_i from {cal['q_source']} ({cal['q_interval']} intervals)" if cal["q_source"] else "no q_i (agreement, regret: n/a)"
        q = f"labels and q_i at the {'binary prompt' if cal['reference'] == 'binary' else 'target p = ' + cal['reference']}; {q}"
        notes.append(f"- {label}: c_i = {cal['c_rule']} over p = {', '.join(f'{p:g}' for p in cal['grid'])}; {q}"
                     + (f"; {len(cal['left_out'])} questions without a record at every target left out" if cal["left_out"] else ""))
    if len(labels) == 1:
        lines += ["", f"## per-question calibration: c_i against correctness; decisions against 'answer iff q_i > p' "
                  f"({ci:.0%} bootstrap intervals over questions)", ""]
        rows = [[name, str(fig["n_questions"])] + [_with_ci(fig["headline"][k]) for k in CALIBRATION_TITLES]
                for name, fig in first["strata"].items()]
        lines += _table(["stratum", "questions", *CALIBRATION_TITLES.values()], rows)
        lines += [""] + notes
        for name, fig in first["strata"].items():
            if per_target_groups is not None and name not in per_target_groups:
                continue
            lines += ["", f"### {name}: decisions per target", ""]
            rows = [[f"{t['target_p']:g}"] + [_f(t[k]) for k, _ in DECISION_COLUMNS] + [_with_ci(t[k]) for k, _ in DECISION_INTERVALS]
                    for t in fig["per_target"]]
            lines += _table(["target", *(title for _, title in DECISION_COLUMNS), *(title for _, title in DECISION_INTERVALS)], rows)
        return lines
    if len(labels) != 2:
        return lines
    a, b = (runs[label]["strata"] for label in labels)
    deltas = calibration_comparison(result)
    lines += ["", f"## per-question calibration, {labels[0]} vs {labels[1]} ({ci:.0%} bootstrap intervals over questions)", ""]
    rows = []
    for stratum, delta in deltas.items():
        rows.append([stratum, "questions", str(a[stratum]["n_questions"]), str(b[stratum]["n_questions"]), ""])
        for name, title in CALIBRATION_TITLES.items():
            rows.append([stratum, title, _with_ci(a[stratum]["headline"][name]), _with_ci(b[stratum]["headline"][name]), _f(delta[name], signed=True)])
    lines += _table(["stratum", "figure", labels[0], labels[1], f"{labels[1]} - {labels[0]}"], rows)
    lines += [""] + notes
    for stratum in deltas:
        if per_target_groups is not None and stratum not in per_target_groups:
            continue
        lines += ["", f"### {stratum}: decisions per target (A / B)", ""]
        rows = []
        for ta, tb in zip(a[stratum]["per_target"], b[stratum]["per_target"]):
            cells = [f"{_f(ta[k])} / {_f(tb[k])}" for k in ("hallucination_rate", "abstention_rate", "riskeval_utility")]
            cells += [f"{_f(ta[k]['value'])} / {_f(tb[k]['value'])}" for k, _ in DECISION_INTERVALS]
            rows.append([f"{ta['target_p']:g}"] + cells)
        lines += _table(["target", "halluc. (A / B)", "abstain (A / B)", "RiskEval utility (A / B)", "agreement (A / B)",
                         "regret (A / B)", "monot. viol. (A / B)"], rows)
    return lines


def _pass_at_k_table(group: str, rows_a: list[dict[str, Any]], rows_b: list[dict[str, Any]] | None = None) -> list[str]:
    """The pass@k table of a group: one row per target, one column per k (``A / B`` when comparing)."""
    ks = sorted({r["k"] for r in rows_a})
    targets = list(dict.fromkeys(r["target"] for r in rows_a))
    cell_a = {(r["target"], r["k"]): r for r in rows_a}
    cell_b = {(r["target"], r["k"]): r for r in rows_b or []}
    rows = []
    for t in targets:
        if rows_b is None:
            rows.append([t] + [_with_ci(cell_a[(t, k)]) for k in ks])
        else:
            rows.append([t] + [f"{_f(cell_a[(t, k)]['value'])} / {_f(cell_b.get((t, k), {}).get('value'))}" for k in ks])
    title = f"### {group}: pass@k (unbiased estimator; questions with at least k samples; abstaining is not correct)"
    return ["", title, ""] + _table(["target", *(f"pass@{k}" for k in ks)], rows)


def _diagnostics(label: str, run: dict[str, Any]) -> str:
    rec, grading = run["records"], run["grading"]
    parts = [f"{rec['kept']} of {rec['read']} records scored"]
    if rec["invalid"]:
        parts.append(f"{len(rec['invalid'])} invalid lines skipped (first: line {rec['invalid'][0]['line']})")
    if rec["unknown_source"]:
        parts.append(f"unknown data_source: {rec['unknown_source']}")
    if rec["outside_grid"]:
        parts.append(f"targets outside the grid: {rec['outside_grid']}")
    if rec["duplicates"]:
        parts.append(f"{rec['duplicates']} duplicate records")
    truncated = grading["finish_reasons"].get("length", 0)
    parts.append(f"outcomes {grading['outcomes']}, boxed format {grading['format_ok_rate']:.1%}, cut at max tokens {truncated}")
    if grading["timed_out"]:
        parts.append(f"{grading['timed_out']} grader timeouts")
    return f"- {label}: " + "; ".join(parts)


def markdown_report(result: dict[str, Any], per_target_groups: Sequence[str] | None = None) -> str:
    """The Markdown tables of a metrics result: headlines with intervals, then per-target tables.

    Args:
        result: the metrics dict.
        per_target_groups: the groups that get a per-target table (default: every group).
    """
    runs = result["runs"]
    labels = list(runs)
    ci = result["settings"]["ci"]
    lines: list[str] = []
    if len(labels) == 1:
        run = runs[labels[0]]
        lines += [f"## {labels[0]}: headline figures ({ci:.0%} bootstrap intervals over questions)", ""]
        rows = [
            [g, str(fig["n_questions"]), str(fig["n_records"])] + [_with_ci(fig["headline"][n]) for n in HEADLINE_TITLES]
            for g, fig in run["groups"].items()
        ]
        lines += _table(["group", "questions", "records", *HEADLINE_TITLES.values()], rows)
        for group, fig in run["groups"].items():
            if per_target_groups is not None and group not in per_target_groups:
                continue
            lines += ["", f"### {group}: per target", ""]
            rows = [[t["target"], str(t["n"])] + [_f(t[k]) for k, _ in TARGET_COLUMNS] for t in fig["per_target"]]
            lines += _table(["target", "n", *(title for _, title in TARGET_COLUMNS)], rows)
            if fig.get("pass_at_k"):
                lines += _pass_at_k_table(group, fig["pass_at_k"])
    else:
        a, b = (runs[label] for label in labels)
        deltas = comparison(result)
        lines += [f"## {labels[0]} vs {labels[1]}: headline figures ({ci:.0%} bootstrap intervals over questions)", ""]
        rows = []
        for group, delta in deltas.items():
            na, nb = a["groups"][group]["n_questions"], b["groups"][group]["n_questions"]
            rows.append([group, "questions", str(na), str(nb), f"{nb - na:+d}"])
            for name, title in HEADLINE_TITLES.items():
                ha, hb = a["groups"][group]["headline"][name], b["groups"][group]["headline"][name]
                rows.append([group, title, _with_ci(ha), _with_ci(hb), _f(delta[name], signed=True)])
        lines += _table(["group", "figure", labels[0], labels[1], f"{labels[1]} - {labels[0]}"], rows)
        overlap = result.get("question_overlap")
        if overlap and (overlap["only_first"] or overlap["only_second"]):
            lines += ["", f"**Different question sets**: {overlap['common']} questions in both, {overlap['only_first']} only in "
                      f"{labels[0]}, {overlap['only_second']} only in {labels[1]}; the figures above are over each run's own questions."]
        only = sorted(set(a["groups"]) ^ set(b["groups"]))
        if only:
            lines += ["", f"Groups in one run only (not compared): {', '.join(only)}."]
        for group in deltas:
            if per_target_groups is not None and group not in per_target_groups:
                continue
            lines += ["", f"### {group}: per target", ""]
            rows = []
            for ta, tb in zip(a["groups"][group]["per_target"], b["groups"][group]["per_target"]):
                rows.append([ta["target"]] + [f"{_f(ta[k])} / {_f(tb[k])}" for k in ("coverage", "selective_accuracy", "reward")])
            lines += _table(["target", "coverage (A / B)", "sel. acc. (A / B)", "reward (A / B)"], rows)
            pass_a, pass_b = a["groups"][group].get("pass_at_k"), b["groups"][group].get("pass_at_k")
            if pass_a and pass_b:
                lines += _pass_at_k_table(f"{group} (A / B)", pass_a, pass_b)
    lines += _calibration_tables(result, per_target_groups)
    lines += ["", "Records:"] + [_diagnostics(label, run) for label, run in runs.items()]
    return "\n".join(lines) + "\n"
