"""The final evaluation's metric step with and without the per-question calibration figures, same records, side by side.

    python benchmarks/eval_metrics.py OUTPUT_DIR/eval/records.jsonl [--repeats 3] [--json out.json]

``make run``'s final evaluation (:func:`rlec.report.evaluate_final`) scores its records with ``python -m
rlec.eval.metrics`` and the arguments of :func:`rlec.report.final_metrics_args` (200 bootstrap replicates, plots, the
calibration figures: smECE by relplot, ECE, Brier, AUROC within strata, agreement, regret, monotonicity). This times
that call as it is (``calibration on``) and with ``--no-calibration`` added (``off``), on the same records, each in a
fresh Python process that has imported ``rlec.eval.metrics`` first (the launch's driver has; relplot it has not: its
import is part of the calibration's cost). Per process two calls: the first (what ``make run`` pays once) and a second
(warm: imports and grader pool ready). The processes alternate (on, off, off, on, ...) so a load change hits both
variants alike; the table shows the median and every value, with the 1-minute load average before each process (the box
may be shared: the figures are upper bounds under load). The metrics are written into a temporary folder (never beside
the records). Run it under the heavy-job lock.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

VARIANTS = ("on", "off")  # calibration on (make run's call as it is), off (--no-calibration added)


def order(repeats: int) -> list[str]:
    """The processes' variants: on, off, off, on, on, off, ... (``2 * repeats`` entries; ABBA pairs)."""
    return [v for i in range(repeats) for v in (VARIANTS if i % 2 == 0 else VARIANTS[::-1])]


def child(records: Path, out_dir: Path, calibration: bool) -> dict[str, float]:
    """Times :func:`rlec.eval.metrics.main` on ``records`` with make run's arguments, twice in this process.

    Returns ``{"first_s", "warm_s"}`` (wall seconds). Raises RuntimeError when a call exits non-zero.
    """
    from rlec.eval import metrics
    from rlec.report import final_metrics_args

    args = final_metrics_args(records, out_dir) + ([] if calibration else ["--no-calibration"])
    times = []
    for _ in range(2):
        start = time.perf_counter()
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            code = metrics.main(args)
        times.append(time.perf_counter() - start)
        if code:
            raise RuntimeError(f"rlec.eval.metrics exited {code} on {records} ({' '.join(args)})")
    return {"first_s": times[0], "warm_s": times[1]}


def summarize(runs: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per variant the medians and every value of ``first_s`` and ``warm_s``, and the calibration's cost (on - off).

    ``runs``: ``[{"variant": "on"|"off", "first_s", "warm_s", "load"}]``. Returns ``{"on"|"off": {"first_s", "warm_s":
    median, "first_all", "warm_all", "load": [...]}, "cost": {"first_s", "warm_s": median(on) - median(off)}}``.
    """
    out: dict[str, dict[str, Any]] = {}
    for variant in VARIANTS:
        rows = [r for r in runs if r["variant"] == variant]
        out[variant] = {**{k: statistics.median(r[k] for r in rows) for k in ("first_s", "warm_s")},
                        "first_all": [r["first_s"] for r in rows], "warm_all": [r["warm_s"] for r in rows],
                        "load": [r["load"] for r in rows]}
    out["cost"] = {k: out["on"][k] - out["off"][k] for k in ("first_s", "warm_s")}
    return out


def table(summary: dict[str, dict[str, Any]]) -> str:
    """Markdown: one row per variant (median [every value] of each call, load), then the calibration's cost."""
    vals = lambda xs: ", ".join(f"{x:.2f}" for x in xs)  # noqa: E731
    lines = ["| rlec.eval.metrics on the final evaluation's records | first call s, median [each] | warm call s, median "
             "[each] | 1-min load before each process |", "|---|---|---|---|"]
    for variant, name in (("on", "calibration on (make run's call)"), ("off", "--no-calibration")):
        s = summary[variant]
        lines.append(f"| {name} | {s['first_s']:.2f} [{vals(s['first_all'])}] | {s['warm_s']:.2f} [{vals(s['warm_all'])}] | "
                     f"{vals(s['load'])} |")
    c = summary["cost"]
    lines.append(f"| calibration's cost (on - off) | {c['first_s']:+.2f} | {c['warm_s']:+.2f} | |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point; returns the exit status (2: bad input, one line on stderr)."""
    p = argparse.ArgumentParser(prog="python benchmarks/eval_metrics.py", description=__doc__.split("\n\n")[0])
    p.add_argument("records", help="a final evaluation's records (OUTPUT_DIR/eval/records.jsonl); read only")
    p.add_argument("--repeats", type=int, default=3, help="processes per variant, >= 1")
    p.add_argument("--json", default=None, help="also write every figure here")
    p.add_argument("--child", choices=VARIANTS, help=argparse.SUPPRESS)
    p.add_argument("--child-out", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    records = Path(args.records)
    if args.child:
        print(json.dumps(child(records, Path(args.child_out), args.child == "on")))
        return 0
    if not records.is_file():
        print(f"error: records {records}: no such file", file=sys.stderr)
        return 2
    if args.repeats < 1:
        print(f"error: --repeats must be >= 1, got {args.repeats}", file=sys.stderr)
        return 2
    runs = []
    with tempfile.TemporaryDirectory(prefix="eval_metrics_bench.") as tmp:
        for k, variant in enumerate(order(args.repeats)):
            load = round(os.getloadavg()[0], 2)
            proc = subprocess.run([sys.executable, __file__, str(records), "--child", variant,
                                   "--child-out", str(Path(tmp) / f"{k}-{variant}")],
                                  cwd=REPO, capture_output=True, text=True, check=False)
            if proc.returncode:
                print(f"error: process {k} ({variant}) exited {proc.returncode}:\n{proc.stderr[-2000:]}", file=sys.stderr)
                return 1
            runs.append({"variant": variant, "load": load, **json.loads(proc.stdout.strip().splitlines()[-1])})
            print(f"{k + 1}/{len(order(args.repeats))} {variant}: first {runs[-1]['first_s']:.2f} s, warm "
                  f"{runs[-1]['warm_s']:.2f} s (load {load})", file=sys.stderr, flush=True)
    summary = summarize(runs)
    print(f"records: {records}\n")
    print(table(summary))
    if args.json:
        from rlec.io import atomic_write_text

        atomic_write_text(Path(args.json), json.dumps({"records": str(records), "runs": runs, "summary": summary}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
