"""Train-inference mismatch on CPU through verl's own trainer: mismatch KL and router disagreement per step, by arm.

    python benchmarks/mismatch.py                       # 2 arms x 3 steps, ~3 min per arm on 2 cores
    python benchmarks/mismatch.py --noise 0.05 --steps 3 --arms none,token_tis --out outputs/mismatch

Each arm is one launch of ``TRAINER=verl bash tools/run_megatron_rlec.sh`` (``layout=cpu``, fp32, the tiny
Qwen3-MoE, sample data) with an induced mismatch: ``rlec.cpu.rollout_weight_noise`` = sigma perturbs the
rollout's copy of the weights after every weight sync (:mod:`rlec.cpu.induced_mismatch`), the same
seeded noise in every arm. Arms:

- ``none``: no correction (``algorithm.rollout_correction.rollout_is=null``: verl computes the mismatch
  metrics and applies no weight);
- ``token_tis``: the recipe's token-level truncated IS (cap 2, verl's ``decoupled_token_is`` preset);
- ``exact``: a control without noise (sigma = 0) and the recipe's TIS: the mismatch is fp32 round-off.

- ``r3``: the recipe's TIS and routing replay R3 (``router_replay=r3``): the trainer's old-log-prob and update
  forwards replay the routes the (perturbed) rollout chose (on CPU through the ``router_replay_bshd`` shim of
  :mod:`rlec.cpu.padded_forward`), so the training forward's router disagreement with the rollout is 0 by
  construction; ``rlec/router_disagreement`` is then the rollout's routers against the exact weights' ones, the
  share R3 replayed instead of the trainer's own choice.

Per step, from the launch's ``metrics.jsonl`` (verl's metric names): ``rollout_corr/kl`` (mean log pi_rollout - log pi_old), ``rollout_corr/k3_kl``,
``training/rollout_probs_diff_{mean,max}``, ``rlec/router_disagreement`` (share of response token-layer
expert sets the rollout chose differently from the exact weights' routers), ``rlec/mismatch_alarm``, the IS
weights' mean and clipped share (TIS), ``actor/pg_loss`` and ``actor/grad_norm``. Outputs: a Markdown table
on stdout and ``<out>/mismatch.json`` (written atomically), each arm's log in ``<out>/<arm>/launch.log``;
the run of docs/cluster.md section 9 is ``benchmarks/baselines/mismatch_cpu.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rlec.io import atomic_write_text  # noqa: E402

SCHEMA = "rlec.mismatch/1"
ARMS: dict[str, dict[str, Any]] = {
    "none": {"overrides": ["algorithm.rollout_correction.rollout_is=null"], "noise": True,
             "what": "no correction (metrics only)"},
    "token_tis": {"overrides": [], "noise": True, "what": "token TIS, cap 2 (the recipe)"},
    "exact": {"overrides": [], "noise": False, "what": "control: no noise, token TIS"},
    "r3": {"overrides": ["router_replay=r3"], "noise": True, "replay": True, "what": "routing replay R3 + token TIS"},
}
COLUMNS = {  # table heading -> verl / rlec metric
    "KL": "rollout_corr/kl", "k3 KL": "rollout_corr/k3_kl", "|dp| mean": "training/rollout_probs_diff_mean",
    "|dp| max": "training/rollout_probs_diff_max", "router disagr.": "rlec/router_disagreement",
    "alarm": "rlec/mismatch_alarm", "IS mean": "rollout_corr/rollout_is_mean",
    "IS clipped": "rollout_corr/rollout_is_ratio_fraction_high", "pg_loss": "actor/pg_loss", "grad_norm": "actor/grad_norm",
}
REPLAYED = "0 (replayed; rollout vs exact {})"  # an R3 arm's router-disagreement cell


def step_metrics(folder: Path) -> dict[int, dict[str, float]]:
    """``<folder>/metrics.jsonl`` (what every launch writes: one object per step, verl's metric names) ->
    ``{step: {key: value}}``, numbers only; empty when the launch logged no step."""
    from rlec.report import METRICS_FILE, read_metrics

    path = Path(folder) / METRICS_FILE
    if not path.is_file():
        return {}
    return {int(row["step"]): {k: float(v) for k, v in row.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
            for row in read_metrics(path) if "step" in row}


def _portable(path: Path) -> str:
    """A path inside the checkout as a relative one (a result can be committed as a baseline)."""
    return os.path.relpath(path, ROOT) if path.is_relative_to(ROOT) else str(path)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--arms", default="none,token_tis", help=f"comma-separated, of {sorted(ARMS)}")
    p.add_argument("--steps", type=int, default=3, help="training steps per arm (>= 1)")
    p.add_argument("--noise", type=float, default=0.05, help="rlec.cpu.rollout_weight_noise sigma, in (0, 1]")
    p.add_argument("--seed", type=int, default=0, help="rlec.cpu.rollout_noise_seed")
    p.add_argument("--scripted-fraction", type=float, default=0.25,
                   help="rlec.cpu.scripted_fraction: scripted answers give the random model's groups reward variance")
    p.add_argument("--out", default=str(ROOT / "outputs" / "mismatch"), help="output folder (mismatch.json, logs)")
    p.add_argument("--timeout", type=int, default=1800, help="seconds per launch")
    args = p.parse_args(argv)
    arms = [a for a in args.arms.split(",") if a]
    if not arms or set(arms) - set(ARMS):
        p.error(f"--arms: {args.arms!r}; expected some of {sorted(ARMS)}")
    if args.steps < 1:
        p.error(f"--steps: {args.steps}; expected >= 1")
    if not (0 < args.noise <= 1):
        p.error(f"--noise: {args.noise}; expected a relative scale in (0, 1]")
    args.arm_list = arms
    return args


def run_arm(name: str, args: argparse.Namespace, model: Path, data: Path, out: Path) -> dict[str, Any]:
    """One launch of verl's trainer for arm ``name``; returns its settings, per-step metrics, seconds and exit code."""
    arm = ARMS[name]
    noise = args.noise if arm["noise"] else 0.0
    folder = out / name
    if folder.exists():  # a fresh run per arm (this benchmark's own folder)
        shutil.rmtree(folder)
    overrides = ["trainer.test_freq=-1", "trainer.save_freq=-1", f"rlec.cpu.scripted_fraction={args.scripted_fraction}",
                 f"rlec.cpu.rollout_weight_noise={noise}", f"rlec.cpu.rollout_noise_seed={args.seed}", *arm["overrides"]]
    env = {**os.environ, "TRAINER": "verl", "STEPS": str(args.steps), "OUTPUT_DIR": str(folder), "DATA_DIR": str(data),
           "MODEL_PATH": str(model), "RESUME": "disable", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "PYTHON": sys.executable}
    start = time.perf_counter()
    proc = subprocess.run(["bash", str(ROOT / "tools" / "run_megatron_rlec.sh"), *overrides], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=args.timeout)
    seconds = time.perf_counter() - start
    folder.mkdir(parents=True, exist_ok=True)
    log = proc.stdout + proc.stderr
    atomic_write_text(folder / "launch.log", log)
    steps = step_metrics(folder)
    rows = {step: {col: values.get(key) for col, key in COLUMNS.items()} for step, values in sorted(steps.items())}
    return {"arm": name, "what": arm["what"], "noise": noise, "overrides": overrides, "returncode": proc.returncode,
            "seconds": round(seconds, 1), "steps": rows, "log": _portable(folder / "launch.log")}


def table(result: dict[str, Any]) -> str:
    """The Markdown table of every arm's steps (an R3 arm's router disagreement: 0, the rollout's routes replayed)."""
    head = ["arm", "sigma", "step", *COLUMNS]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for arm in result["arms"]:
        for step, row in arm["steps"].items():
            cells = ["-" if v is None else f"{v:.3g}" for v in row.values()]
            if ARMS.get(arm["arm"], {}).get("replay"):
                at = list(row).index("router disagr.")
                cells[at] = REPLAYED.format(cells[at])
            lines.append(f"| {arm['arm']} | {arm['noise']:g} | {step} | " + " | ".join(cells) + " |")
        if not arm["steps"]:
            lines.append(f"| {arm['arm']} | {arm['noise']:g} | failed (exit {arm['returncode']}, {arm['log']}) |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from rlec.models import build_tiny_model

    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    model = out / "tiny_qwen3_moe"
    if not (model / "config.json").is_file():
        build_tiny_model(model, seed=0, overwrite=True)
    data = out / "data"  # the launcher prepares the sample data here when missing
    result: dict[str, Any] = {"schema": SCHEMA, "command": "python benchmarks/mismatch.py " + " ".join(argv or sys.argv[1:]),
                              "steps": args.steps, "noise": args.noise, "seed": args.seed, "metrics": COLUMNS,
                              "loadavg_start": list(os.getloadavg()), "arms": []}
    for name in args.arm_list:
        print(f"mismatch: arm {name} ({ARMS[name]['what']}), {args.steps} steps ...", file=sys.stderr, flush=True)
        result["arms"].append(run_arm(name, args, model, data, out))
        atomic_write_text(out / "mismatch.json", json.dumps(result, indent=2))
    result["loadavg_end"] = list(os.getloadavg())
    atomic_write_text(out / "mismatch.json", json.dumps(result, indent=2))
    print(table(result))
    print(f"\nwritten: {out / 'mismatch.json'}")
    return 0 if all(a["returncode"] == 0 and a["steps"] for a in result["arms"]) else 1


if __name__ == "__main__":
    sys.exit(main())
