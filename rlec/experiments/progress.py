"""An experiment folder's raw per-step values so far, finished arm-seeds or not: what a long run has measured.

    python -m rlec.experiments.progress outputs/experiments/e3 --out <file>.json

A long run (800 steps per arm-seed) spans sessions; its ``results.json`` is written only when the command finishes.
This reads every ``<arm>/seed<k>/`` (or ``stage<i>/``) ``metrics.jsonl`` as verl wrote it (the same reader as
:func:`rlec.demo.verl_run.read_metrics`) and keeps, per step, the keys of :data:`KEYS` plus the experiment's probe and
primary-metric keys; per arm-seed also the probe metric's first and latest measurement. Reads only.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Sequence

from rlec.experiments import keys as K
from rlec.experiments.spec import Probe

# the per-step values results.json keeps (docs/experiments.md "Raw values"), plus the step time
KEYS = (K.M_ENTROPY, K.M_REWARD, K.M_CLIPFRAC, K.M_CLIPFRAC_LOWER, K.M_PPO_KL, K.M_GRAD_NORM, K.M_STEP_TIME,
        K.M_PROBE_ENTROPY, K.M_PROBE_RESPONSE_LENGTH, K.M_PROBE_TIME)

__all__ = ["KEYS", "main", "progress"]


def progress(out: Path, keys: Sequence[str] = KEYS) -> dict[str, Any]:
    """``{"experiment": stamp, "runs": {"<arm>/seed<k>": {"steps", "finished", "probe_first", "probe_latest",
    "metrics": [{step, key: value}]}}}`` for every arm-seed folder under ``out`` (steps in order).

    Raises:
        ValueError: ``out`` has no ``experiment.json`` (not an experiment folder).
    """
    from rlec.demo.verl_run import read_metrics
    from rlec.experiments.core import RUN_FILE, STAMP

    stamp_path = out / STAMP
    if not stamp_path.is_file():
        raise ValueError(f"{out}: no {STAMP}: not an experiment folder (python -m rlec.experiments writes it)")
    stamp = json.loads(stamp_path.read_text())
    probe = (stamp.get("probe") or {}).get("metric", K.M_PROBE_ENTROPY)
    graded = Probe(pass_k=(stamp.get("probe") or {}).get("pass_k")).metrics()[1:]  # the graded probe's, where stamped
    wanted = tuple(dict.fromkeys([*keys, probe, *graded]))
    runs: dict[str, Any] = {}
    for folder in sorted(p for p in out.glob("*/seed*") if p.is_dir()):
        stages = sorted(folder.glob("stage*")) or [folder]
        rows: list[dict[str, Any]] = []
        for stage in stages:
            offset = len(rows)
            rows += [{"step": r["step"] + offset, **{k: r[k] for k in wanted if k in r}} for r in read_metrics(stage)]
        measured = [(r["step"], r[probe]) for r in rows if probe in r]
        runs[f"{folder.parent.name}/{folder.name}"] = {
            "steps": len(rows), "finished": (folder / RUN_FILE).is_file(),
            "probe_first": list(measured[0]) if measured else None, "probe_latest": list(measured[-1]) if measured else None,
            "metrics": rows}
    # raw values of runs in progress: the verdict is results.json's (paired seeds, t-interval on the primary metric)
    return {"experiment": stamp, "primary": stamp.get("primary"),
            "verdict": None, "why_no_verdict": "progress of unfinished arm-seeds: no paired (method - baseline) comparison yet",
            "keys": list(wanted), "runs": runs}


def main(argv: Sequence[str] | None = None) -> int:
    """CLI; 2 on bad input (named)."""
    from rlec.io import atomic_write_text

    p = argparse.ArgumentParser(prog="python -m rlec.experiments.progress", description=__doc__.split("\n\n")[0])
    p.add_argument("folder", help="the experiment's --out folder")
    p.add_argument("--out", default=None, help="write the JSON here (default: print a summary only)")
    args = p.parse_args(argv)
    try:
        result = progress(Path(args.folder))
    except ValueError as exc:
        print(f"rlec.experiments.progress: error: {exc}", file=sys.stderr)
        return 2
    for name, run in result["runs"].items():
        print(f"{name}: {run['steps']} steps{' (finished)' if run['finished'] else ''}; probe first {run['probe_first']}, "
              f"latest {run['probe_latest']}")
    if args.out:
        atomic_write_text(Path(args.out), json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
