"""Where a CPU launch's time goes before its first step: one phase per process verl creates, read from Ray's own logs.

    python benchmarks/launch.py --model M --train T [--test V] [--launches 2] [--shared] [key=value ...]

Runs ``--launches`` launches of ``tools/run_megatron_rlec.sh`` (2 steps each, into fresh folders under ``--out-dir``),
each with its own Ray cluster, or with ``--shared`` all connected to one cluster started first
(:func:`rlec.cluster.ray_cluster.shared_cluster`, as ``python -m rlec.experiments`` runs its arm-seeds). For each
launch it prints, in seconds from the launcher's start:

- ``driver``: the launcher's checks and verl's driver up to ``ray.init`` (the console's ``ray init kwargs`` line);
- ``ray``: ``ray.init`` (a new cluster, or connecting to the shared one);
- per actor verl creates, in order (TaskRunner, TransferQueue's controller and storage, the trainer worker, the
  reward loop, the rollout server, the load balancer, the agent-loop worker): when Ray registered it and when its
  constructor returned (Ray's GCS log, ``gcs_server.out``, for the launch's Ray job);
- ``step 1 start``: the first ``metrics.jsonl`` row's arrival less its ``timing_s/step``.

The launch's Ray job is the one whose TaskRunner printed the launch's folder (Ray's per-worker ``.out`` files). The
load average is printed with every launch (a shared 2-core box: the figures are upper bounds under load). Run it
under the heavy-job lock.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Sequence

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

_GCS_LINE = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) .*?(Registering actor|Actor created successfully) "
                       r"job_id=(\w+) actor_id=(\w+)")
_STAMP = "%Y-%m-%d %H:%M:%S,%f"


def _epoch(stamp: str) -> float:
    """A Ray log time stamp (local time) as seconds since the epoch."""
    return dt.datetime.strptime(stamp, _STAMP).timestamp()


def ray_job_actors(folder: Path, session_root: Path = Path("/tmp/ray")) -> list[dict[str, Any]]:
    """The actors of the Ray job that trained into ``folder``: ``[{"name", "pid", "registered", "created"}]`` (epoch
    seconds, by registration), from the newest Ray session whose TaskRunner printed ``folder``; [] when none did."""
    needle = f"'default_local_dir': '{folder.resolve()}'"
    for session in sorted(session_root.glob("session_2*"), key=lambda p: p.stat().st_mtime, reverse=True):
        logs = session / "logs"
        job = None
        for out in logs.glob("worker-*.out"):
            try:
                if needle in out.read_text(errors="replace"):
                    job = out.name.split("-")[2]
                    break
            except OSError:
                continue
        if job is None:
            continue
        actors: dict[str, dict[str, Any]] = {}
        for out in logs.glob(f"worker-*-{job}-*.out"):
            pid = int(out.stem.rsplit("-", 1)[1])
            head = out.read_text(errors="replace")[:400]
            name = re.search(r":actor_name:(\w+)", head)
            core = next(logs.glob(f"python-core-worker-*_{pid}.log"), None)
            actor_id = re.search(r"actor_id=(\w+)", core.read_text(errors="replace")) if core else None
            if name and actor_id:
                actors[actor_id.group(1)] = {"name": name.group(1), "pid": pid}
        for line in (logs / "gcs_server.out").read_text(errors="replace").splitlines():
            m = _GCS_LINE.match(line)
            if m and m.group(4) in actors:
                actors[m.group(4)].setdefault("registered" if m.group(2).startswith("Reg") else "created", _epoch(m.group(1)))
        return sorted((a for a in actors.values() if "registered" in a), key=lambda a: a["registered"])
    return []


def one_launch(folder: Path, *, model: Path, train: Path, test: Path, overrides: Sequence[str],
               ray_address: str | None) -> dict[str, Any]:
    """Launch 2 steps into ``folder`` (RLEC_VERBOSE=1), time-stamping the console; the phases of :func:`phases`."""
    from rlec.demo.verl_run import launcher_args, launcher_env

    env = {**launcher_env(folder, model=model, train=train, test=test, steps=2), "RLEC_VERBOSE": "1"}
    if ray_address:
        env["RAY_ADDRESS"] = ray_address
    load = [round(x, 2) for x in os.getloadavg()]
    t0 = time.time()
    proc = subprocess.Popen(["bash", str(REPO / "tools" / "run_megatron_rlec.sh"), *launcher_args(folder, overrides, steps=2)],
                            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    marks: dict[str, float] = {}
    metrics, first_row = folder / "metrics.jsonl", None
    assert proc.stdout is not None
    for line in proc.stdout:
        now = time.time()
        if "ray init kwargs" in line:
            marks.setdefault("ray.init called", now)
        elif "Started a local Ray instance" in line or "Connected to Ray cluster" in line:
            marks.setdefault("ray.init returned", now)
        if first_row is None and metrics.is_file() and metrics.stat().st_size:
            first_row = now  # a console line after the row: read at the next line (the console is busy then)
    proc.wait()
    if proc.returncode:
        raise RuntimeError(f"the launch into {folder} failed (exit {proc.returncode})")
    row = json.loads(metrics.read_text().splitlines()[0])
    step1_end = first_row if first_row is not None else metrics.stat().st_mtime
    out = {"load_start": load, "load_end": [round(x, 2) for x in os.getloadavg()], "total": round(time.time() - t0, 1),
           "marks": {k: round(v - t0, 1) for k, v in marks.items()},
           "actors": [{**a, "registered": round(a["registered"] - t0, 1),
                       "created": round(a["created"] - t0, 1) if "created" in a else None} for a in ray_job_actors(folder)],
           "step1_start": round(step1_end - float(row["timing_s/step"]) - t0, 1),
           "step1_s": round(float(row["timing_s/step"]), 1)}
    return out


def table(results: Sequence[dict[str, Any]]) -> str:
    """The launches side by side: seconds from the launcher's start at which each phase ended."""
    rows: dict[str, list[str]] = {}

    def put(key: str, k: int, value: Any) -> None:
        rows.setdefault(key, ["-"] * len(results))[k] = "-" if value is None else str(value)

    for k, r in enumerate(results):
        put("ray.init called (launcher checks, driver's imports)", k, r["marks"].get("ray.init called"))
        put("ray.init returned", k, r["marks"].get("ray.init returned"))
        seen: dict[str, int] = {}
        for a in r["actors"]:
            seen[a["name"]] = seen.get(a["name"], 0) + 1
            name = a["name"] + (f" #{seen[a['name']]}" if seen[a["name"]] > 1 else "")
            put(f"{name} registered -> created", k, f"{a['registered']} -> {a['created']}")
        put("step 1 start", k, r["step1_start"])
        put("step 1 (s)", k, r["step1_s"])
        put("load average at start / end (1 min)", k, f"{r['load_start'][0]} / {r['load_end'][0]}")
    head = "| phase (s from the launcher's start) | " + " | ".join(f"launch {k + 1}" for k in range(len(results))) + " |"
    return "\n".join([head, "|---|" + "---|" * len(results), *(f"| {key} | " + " | ".join(v) + " |" for key, v in rows.items())])


def main(argv: Sequence[str] | None = None) -> int:
    """CLI: the launches, then the table (and ``--out`` JSON)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", type=Path, required=True, help="Hugging Face model folder (the experiments' warm start)")
    p.add_argument("--train", type=Path, required=True, help="training parquet")
    p.add_argument("--test", type=Path, help="validation parquet [beside --train]")
    p.add_argument("--launches", type=int, default=1, help="launches one after another [1]")
    p.add_argument("--shared", action="store_true", help="all launches connect to one Ray cluster started first")
    p.add_argument("--out-dir", type=Path, default=REPO / "outputs" / "bench_launch", help="run folders (launch<k>, new)")
    p.add_argument("--out", type=Path, help="every figure as JSON")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="verl overrides of every launch")
    args = p.parse_args(argv)
    test = args.test or args.train.with_name("test.parquet")
    for path in (args.model, args.train, test):
        if not path.exists():
            p.error(f"{path}: does not exist")
    if args.launches < 1:
        p.error(f"--launches={args.launches}: must be >= 1")
    stamp = time.strftime("%Y%m%dT%H%M%S")
    folders = [args.out_dir / f"{stamp}_launch{k + 1}" for k in range(args.launches)]
    results = []
    if args.shared:
        from rlec.cluster.ray_cluster import cpu_launch_resources, shared_cluster

        t0 = time.time()
        with shared_cluster(*cpu_launch_resources(int(os.environ.get("NPROC") or 1))) as address:
            print(f"shared Ray cluster started in {time.time() - t0:.1f} s at {address}", flush=True)
            results = [one_launch(f, model=args.model, train=args.train, test=test, overrides=args.overrides,
                                  ray_address=address) for f in folders]
    else:
        results = [one_launch(f, model=args.model, train=args.train, test=test, overrides=args.overrides,
                              ray_address=None) for f in folders]
    print(table(results))
    if args.out:
        args.out.write_text(json.dumps({"shared": args.shared, "launches": results}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
