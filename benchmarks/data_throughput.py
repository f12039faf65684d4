"""Benchmark of data preparation: 30,000 synthetic input rows, the whole command, time and memory.

    python benchmarks/data_throughput.py [--rows 30000] [--cores 2] [--json results.json]

Builds ``--rows`` synthetic input rows by resampling the shipped samples (half DAPO-Math rows
written as parquet, as DAPO-Math-17k is distributed; half HotpotQA items written as JSON, as
HotpotQA is), each with a unique id and a unique suffix so that de-duplication keeps them all.
Then it runs ``python -m rlec.data.prepare`` on them in a child process pinned to ``--cores``
CPUs (``RAYON_NUM_THREADS`` too, for the tokenizer's thread pool) and prints wall time, rows/s
and the child's peak resident memory (``ru_maxrss``). Target (issue 3): under 2 minutes and
4 GiB for 30,000 rows on 2 cores. The wall time includes interpreter start, imports and loading
the tokenizer, as a user sees it.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from rlec.data.prepare import SAMPLE_FILES  # noqa: E402
from rlec.data.readers import iter_records  # noqa: E402
from rlec.data.sources import DAPO_PREFIX, DAPO_SUFFIX  # noqa: E402

TARGET_S, TARGET_GIB, TARGET_ROWS = 120.0, 4.0, 30_000


def synthesize(n_rows: int, folder: Path, seed: int = 0) -> dict[str, Path]:
    """Write ``n_rows`` resampled input rows (half math, half HotpotQA) into ``folder``."""
    rng = random.Random(seed)
    dapo = [r for _, r in iter_records(SAMPLE_FILES["dapo"])]
    hotpot = json.loads(SAMPLE_FILES["hotpot_train"].read_text())
    n_math = n_rows // 2
    math_rows = []
    for i in range(n_math):
        r = copy.deepcopy(rng.choice(dapo))
        problem = r["prompt"][0]["content"].removeprefix(DAPO_PREFIX).removesuffix(DAPO_SUFFIX)
        r["prompt"][0]["content"] = f"{DAPO_PREFIX}{problem} (Variant {i}.){DAPO_SUFFIX}"
        r["extra_info"]["index"] = f"synthetic-{i}"
        math_rows.append(r)
    hotpot_rows = []
    for i in range(n_rows - n_math):
        r = copy.deepcopy(rng.choice(hotpot))
        r["_id"], r["question"] = f"synthetic-{i:07d}", f"{r['question'][:-1]} (variant {i})?"
        rng.shuffle(r["context"])
        hotpot_rows.append(r)
    paths = {"dapo": folder / "dapo.parquet", "hotpot_train": folder / "hotpot_train.json"}
    pq.write_table(pa.Table.from_pylist(math_rows), paths["dapo"])
    paths["hotpot_train"].write_text(json.dumps(hotpot_rows))
    return paths


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--rows", type=int, default=30_000, help="synthetic input rows (half math, half HotpotQA)")
    ap.add_argument("--cores", type=int, default=2, help="CPUs the preparation may use")
    ap.add_argument("--json", type=Path, default=None, help="also write the figures to this JSON file")
    args = ap.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="rlec-data-bench-") as tmp:
        folder = Path(tmp)
        t0 = time.perf_counter()
        paths = synthesize(args.rows, folder)
        synth_s = time.perf_counter() - t0
        cpus = sorted(os.sched_getaffinity(0))[: args.cores]
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
            "DAPO_JSON": str(paths["dapo"]),
            "HOTPOT_TRAIN_JSON": str(paths["hotpot_train"]),
            "HOTPOT_TEST_JSON": str(SAMPLE_FILES["hotpot_test"]),
            "DATA_DIR": str(folder / "processed"),
            "RAYON_NUM_THREADS": str(len(cpus)),
            "HF_HUB_OFFLINE": "1",
        }
        cmd = [sys.executable, "-m", "rlec.data.prepare", "--no-progress"]
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, preexec_fn=lambda: os.sched_setaffinity(0, cpus))
        wall = time.perf_counter() - t0
        if proc.returncode != 0:
            print(proc.stdout, proc.stderr, sep="\n", file=sys.stderr)
            return proc.returncode
        peak_gib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 2**20  # KiB on Linux
        summary = json.loads((folder / "processed" / "summary.json").read_text())
        out_rows = summary["splits"]["train"]["rows"] + summary["splits"]["test"]["rows"]
        sizes = {p.name: p.stat().st_size / 2**20 for p in (folder / "processed").iterdir()}

    figures = {
        "input_rows": args.rows,
        "output_rows": out_rows,
        "cores": len(cpus),
        "wall_s": round(wall, 2),
        "input_rows_per_s": round(args.rows / wall, 1),
        "output_rows_per_s": round(out_rows / wall, 1),
        "peak_rss_gib": round(peak_gib, 3),
        "length_counting": summary["length_counting"]["method"],
        "train_parquet_mib": round(sizes["train.parquet"], 1),
        "synthesis_s (not timed)": round(synth_s, 2),
    }
    print(proc.stdout.split("\nwrote")[0])
    print("\nstages (child process, from its log):")
    print("\n".join(line for line in proc.stderr.splitlines() if line.startswith("INFO rlec.data")))
    print()
    width = max(map(len, figures))
    for k, v in figures.items():
        print(f"{k:<{width}}  {v}")
    if args.rows == TARGET_ROWS:
        ok = wall < TARGET_S and peak_gib < TARGET_GIB
        print(f"target: < {TARGET_S:.0f} s and < {TARGET_GIB:.0f} GiB for {TARGET_ROWS:,} rows on 2 cores -> {'met' if ok else 'MISSED'}")
    else:
        print(f"target: judged at --rows {TARGET_ROWS} only (this run: {args.rows:,} rows)")
    if args.json:
        from rlec.io import atomic_write_text

        atomic_write_text(args.json, json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
