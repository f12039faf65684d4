"""Check issue 17's target on two evaluation record files (warm start, trained), with per-target intervals.

    python tools/demo/target_check.py WARM.jsonl TRAINED.jsonl [--low 0.1 --high 0.8] [--out check.json]

``rlec.eval.metrics`` reports bootstrap intervals for its headline figures only; the target needs
them per target. This script grades the records with the same functions (``load_run``,
``grade_records``, ``question_counts``), draws question-level bootstrap replicates with the same
stratified weights (``rlec.eval.bootstrap.replicate_weights``) and reports, for each run, coverage
and selective accuracy at p = low and p = high with percentile intervals, and the coverage gap
cov(low) - cov(high) with its interval (paired: the same replicate for both targets).

Pass (exit 0) when, for the trained run, the gap is >= 0.3 and the two coverage intervals do not
overlap, and selective accuracy at high > at low; and, for the warm start, |gap| < 0.1.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from rlec.eval.bootstrap import replicate_weights
from rlec.eval.metrics import grade_records, load_run, question_counts
from rlec.eval.records import parse_targets
from rlec.eval.selective import rates


def run_figures(path: Path, low: float, high: float, *, n_boot: int, seed: int) -> dict[str, Any]:
    """Coverage / selective accuracy at ``low`` and ``high`` with 95% question-bootstrap intervals."""
    targets = parse_targets(f"{low},{high}")
    records, _ = load_run(path, targets)
    graded = grade_records(records, progress=False)
    keys, per_q = question_counts(records, graded, targets)
    sources = sorted({s for s, _ in keys})
    strata = np.array([sources.index(s) for s, _ in keys])
    point = rates(per_q.sum(axis=0), targets)
    w = replicate_weights(strata, n_boot, np.random.default_rng(seed))
    boot = rates(np.einsum("bq,qtk->btk", w, per_q), targets)

    def ci(values: np.ndarray) -> list[float | None]:
        values = values[~np.isnan(values)]
        return [float(np.percentile(values, 2.5)), float(np.percentile(values, 97.5))] if len(values) else [None, None]

    out: dict[str, Any] = {"questions": len(keys)}
    for i, p in enumerate((low, high)):
        for name in ("coverage", "selective_accuracy"):
            out[f"{name}@{p}"] = {"value": float(point[name][i]), "ci": ci(boot[name][:, i])}
    gap = boot["coverage"][:, 0] - boot["coverage"][:, 1]
    out["coverage_gap"] = {"value": float(point["coverage"][0] - point["coverage"][1]), "ci": ci(gap)}
    return out


def verdict(warm: dict[str, Any], trained: dict[str, Any], low: float, high: float) -> dict[str, bool]:
    """The four conditions of the target."""
    lo_ci, hi_ci = trained[f"coverage@{low}"]["ci"], trained[f"coverage@{high}"]["ci"]
    sel_lo, sel_hi = trained[f"selective_accuracy@{low}"]["value"], trained[f"selective_accuracy@{high}"]["value"]
    return {
        "trained: coverage gap >= 0.3": trained["coverage_gap"]["value"] >= 0.3,
        "trained: coverage intervals separated": None not in (lo_ci[0], hi_ci[1]) and hi_ci[1] < lo_ci[0],
        "trained: selective accuracy higher at high p": not np.isnan(sel_hi) and not np.isnan(sel_lo) and sel_hi > sel_lo,
        "warm start: |coverage gap| < 0.1": abs(warm["coverage_gap"]["value"]) < 0.1,
    }


def _fmt(fig: dict[str, Any]) -> str:
    lo, hi = fig["ci"]
    return f"{fig['value']:.3f} [{lo:.3f}, {hi:.3f}]" if lo is not None else f"{fig['value']:.3f}"


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("warm", type=Path, help="records of the warm-start model (rlec.eval.evaluate)")
    p.add_argument("trained", type=Path, help="records of the RLEC-trained model")
    p.add_argument("--low", type=float, default=0.1)
    p.add_argument("--high", type=float, default=0.8)
    p.add_argument("--bootstrap", type=int, default=2000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=None, help="write the figures and the verdict as JSON")
    args = p.parse_args(argv)
    runs = {name: run_figures(path, args.low, args.high, n_boot=args.bootstrap, seed=args.seed)
            for name, path in (("warm start", args.warm), ("trained", args.trained))}
    cols = [f"coverage@{args.low}", f"coverage@{args.high}", "coverage_gap", f"selective_accuracy@{args.low}",
            f"selective_accuracy@{args.high}"]
    print("| run | questions | " + " | ".join(cols) + " |\n|" + "---|" * (len(cols) + 2))
    for name, fig in runs.items():
        print(f"| {name} | {fig['questions']} | " + " | ".join(_fmt(fig[c]) for c in cols) + " |")
    checks = verdict(runs["warm start"], runs["trained"], args.low, args.high)
    print()
    for name, ok in checks.items():
        print(f"{'PASS' if ok else 'FAIL'}  {name}")
    if args.out:
        args.out.write_text(json.dumps({"runs": runs, "checks": checks}, indent=1) + "\n")
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
