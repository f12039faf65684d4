"""Rollout, reward and update throughput of rlec: measured on this machine, projected for the cluster.

    python benchmarks/throughput.py                          # CPU profile, < 3 min on 2 cores
    python benchmarks/throughput.py --profile gpu            # one GPU, < 8 min on an H200
    python benchmarks/throughput.py --compare benchmarks/baselines/cpu.json
    python benchmarks/throughput.py --sections projection --assume-update-mfu 0.3

Measured (warm-up excluded, ``--repeats`` timed runs: median and spread):
- update: Megatron log-prob forward, forward-backward (verl's policy loss) and optimizer step on
  a Qwen3-MoE (the tiny model by default; ``--model DIR``; ``--layers N`` = Qwen3-30B-A3B's real
  dimensions with N layers), at each ``--layouts`` entry (TP/EP over gloo on CPU, NCCL on GPUs),
  with the full vocabulary projection and with the response-only logit window (verl's trainer on CPU); tokens/s, FLOPs by
  verl's formula, GFLOP/s, MFU against the GPU's peak (not meaningful on CPU), peak memory;
- rollout: generated tokens/s and requests/s of ``rlec.generation`` (vLLM on a GPU when
  installed, else transformers ``generate``) on fixed prompts;
- reward: responses/s of ``rlec.grading.grade_batch`` on the reward benchmark's seeded batch.
Projected: ``rlec.cluster.cost_model`` at every ``megatron_configs/layout/*.yaml`` (memory, FLOPs per
token, EP all-to-all volume, update / rollout / RL-step tokens/s per GPU) under the printed
assumptions, next to published anchors.

Outputs: a Markdown table on stdout, and in ``--out`` a JSON file with every figure, the
environment (device, versions, load average per section) and the settings, the same table as
``.md`` and a PNG chart of the step-time split. The JSON is rewritten after every section.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import importlib.metadata
import importlib.util
import json
import os
import platform
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

# Before torch loads OpenMP: idle OpenMP threads sleep instead of spinning. On cores shared with
# other work, spinning threads made transformers generate ~6x slower here (2.8 s vs 18 s for the
# same 8 x 32 tokens at load average 8); set OMP_WAIT_POLICY=ACTIVE to measure the default.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parents[1]))

from rlec.cluster.cost_model import Assumptions  # noqa: E402
from rlec.io import atomic_write_text  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SECTIONS = ("projection", "update", "rollout", "reward")
SCHEMA = "rlec.throughput/1"
PROFILES: dict[str, dict[str, Any]] = {
    # 2 shared cores: 128 tokens per step (the tiny model's 151,936-word vocabulary dominates)
    "cpu": dict(layers=None, layouts="tp1,tp2,ep2", window_layouts="tp1", precisions="fp32", batch=2, prompt_len=48,
                response_len=16, micro_batch_size=2, warmup=1, repeats=3, rollout_prompts=8, rollout_new_tokens=32,
                rollout_warmup=1, rollout_repeats=3, reward_n=512, reward_warmup=1, reward_repeats=3),
    # one H200: Qwen3-30B-A3B dimensions with 2 layers (1.9e9 parameters), 16k tokens per step
    "gpu": dict(layers=2, layouts="tp1", window_layouts="tp1",
                precisions="bf16,fp8" if importlib.util.find_spec("transformer_engine") else "bf16", batch=8, prompt_len=1024,
                response_len=1024, micro_batch_size=2, warmup=2, repeats=5, rollout_prompts=64, rollout_new_tokens=256,
                rollout_warmup=1, rollout_repeats=3, reward_n=4096, reward_warmup=1, reward_repeats=3),
}


ASSUMPTION_HELP = {
    "update_mfu": "MFU of the Megatron update and log-prob forward",
    "prefill_mfu": "MFU of vLLM's prefill",
    "decode_bandwidth_efficiency": "share of HBM bandwidth a decode step achieves",
    "decode_mfu": "MFU of a compute-bound decode step",
    "max_num_seqs": "running sequences per vLLM replica",
    "prompt_tokens": "mean prompt tokens per response",
    "response_tokens": "mean response tokens",
    "longest_response_tokens": "decode steps per vLLM wave: its longest response (the long tail; = response_tokens for none)",
    "alltoall_bandwidth_intra": "EP all-to-all bytes/s per GPU inside a node",
    "alltoall_bandwidth_inter": "EP all-to-all bytes/s per GPU across nodes",
    "activation_bytes": "bytes per dispatched activation element",
}


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def environment() -> dict[str, Any]:
    """Device, versions and repository state."""
    import torch

    cpu = platform.processor()
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    versions = {}
    for dist in ("torch", "transformers", "megatron-core", "mbridge", "verl", "vllm", "transformer_engine", "math-verify"):
        try:
            versions[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            versions[dist] = None
    git = {}
    try:
        git["commit"] = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()
        git["dirty"] = bool(subprocess.run(["git", "status", "--porcelain"], cwd=ROOT, capture_output=True, text=True).stdout.strip())
    except (OSError, subprocess.CalledProcessError):
        pass
    cuda = torch.cuda.is_available()
    return {"python": platform.python_version(), "platform": platform.platform(), "cpu": cpu, "cores": os.cpu_count(),
            "gpu": torch.cuda.get_device_name(0) if cuda else None, "gpu_count": torch.cuda.device_count() if cuda else 0,
            "versions": versions, "git": git, "loadavg_start": list(os.getloadavg()),
            "env": {k: os.environ.get(k) for k in ("OMP_NUM_THREADS", "OMP_WAIT_POLICY", "CUDA_VISIBLE_DEVICES")},
            "torch_threads": torch.get_num_threads(),
            "note": "load average = runnable processes on the machine (1/5/15 min); above the core count, timings are inflated"}


def resolve_model(args: argparse.Namespace) -> tuple[Path, bool]:
    """``(model folder, load its weights)``; builds the tiny or the N-layer random model when missing.

    Raises:
        FileNotFoundError, ValueError: ``--model`` is not a model folder (:func:`rlec.models.check_model_folder`).
    """
    from rlec.models import build_tiny_model

    if args.model:
        from rlec.models import check_model_folder

        return check_model_folder(args.model, label="--model"), True
    models = Path(args.models_dir)
    if args.layers:
        path = models / f"qwen3_30b_a3b_{args.layers}layers"
        if not path.exists():
            from rlec.models import build_model_from_config

            log(f"building Qwen3-30B-A3B dimensions with {args.layers} layer(s), random weights, in {path}")
            # fp32 weights; config.json's "dtype" bfloat16 tells vLLM to serve them in bf16, as the real model
            build_model_from_config(path, "qwen3_30b_a3b", layers=args.layers)
        return path, False  # random weights: Megatron's own random init does as well
    path = models / "tiny_qwen3_moe"
    if not path.exists():
        log(f"building the tiny random Qwen3-MoE in {path}")
        build_tiny_model(path)
    return path, True


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    import torch

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--profile", choices=sorted(PROFILES), default="gpu" if torch.cuda.is_available() else "cpu",
                   help="preset sizes (default: gpu with CUDA, else cpu); flags below override it")
    p.add_argument("--sections", default=",".join(SECTIONS), help=f"comma list of {', '.join(SECTIONS)} (default: all)")
    g = p.add_argument_group("model")
    g.add_argument("--model", help="local Hugging Face Qwen3 / Qwen3-MoE folder (default: the tiny model)")
    g.add_argument("--layers", type=int, help="Qwen3-30B-A3B's real dimensions with N layers (random weights)")
    g.add_argument("--models-dir", default=str(ROOT / "models"), help="where generated models are kept (default: models/)")
    g = p.add_argument_group("update")
    g.add_argument("--layouts", help="comma list of [tpN][epN][etpN][ppN], one torchrun per world size")
    g.add_argument("--window-layouts", help="layouts also measured with the logit window, or 'all' / 'none'")
    g.add_argument("--precisions", help="fp32 (CPU), bf16, fp8 (Transformer Engine)")
    g.add_argument("--spec", choices=("auto", "te", "local"), default="auto",
                   help="Megatron layer spec (auto: Transformer Engine on GPU, local on CPU; local on a GPU node without TE)")
    for name, kind, what in (("batch", int, "rows per step"), ("prompt-len", int, "prompt tokens per row"),
                             ("response-len", int, "response tokens per row (= the logit window)"),
                             ("micro-batch-size", int, "rows per micro-batch"), ("warmup", int, "untimed iterations"),
                             ("repeats", int, "timed iterations"), ("threads", int, "OMP threads per rank (default cores / ranks)")):
        g.add_argument(f"--{name}", type=kind, help=what)
    g.add_argument("--update-timeout-s", type=float, default=900.0, help="limit per torchrun launch (default %(default)s)")
    g = p.add_argument_group("rollout and reward")
    g.add_argument("--engine", choices=("auto", "hf", "vllm"), default="auto", help="rollout engine (default: %(default)s)")
    for name, what in (("rollout-prompts", "prompts (DAPO-Math samples, targets cycling)"),
                       ("rollout-new-tokens", "response length limit"), ("rollout-warmup", "untimed passes"),
                       ("rollout-repeats", "timed passes"), ("reward-n", "responses graded per pass"),
                       ("reward-warmup", "untimed passes"), ("reward-repeats", "timed passes")):
        g.add_argument(f"--{name}", type=int, help=what)
    g.add_argument("--reward-pathological", type=float, default=0.0, help="share of hostile inputs (default 0: stable timings)")
    g = p.add_argument_group("projection assumptions")
    for f in dataclasses.fields(Assumptions):
        g.add_argument(f"--assume-{f.name.replace('_', '-')}", type=type(f.default), default=f.default,
                       help=f"{ASSUMPTION_HELP[f.name]} (default {f.default:g})")
    g = p.add_argument_group("output")
    g.add_argument("--out", default=str(ROOT / "outputs" / "throughput"), help="folder for JSON, .md and PNG (default: outputs/throughput/)")
    g.add_argument("--name", help="file stem (default: throughput-<profile>-<time>)")
    g.add_argument("--compare", type=Path, help="a stored JSON: print current / baseline ratios")
    p.add_argument("--seed", type=int, default=0)
    for action in p._actions:  # show the profile presets in --help
        key = action.dest
        if key in PROFILES["cpu"] and action.help:
            action.help += f" (cpu profile: {PROFILES['cpu'][key]}, gpu: {PROFILES['gpu'][key]})"
    args = p.parse_args(argv)
    for key, value in PROFILES[args.profile].items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.model and args.layers:
        p.error("--model and --layers are exclusive")
    if args.spec == "local" and "fp8" in (args.precisions or "").split(","):
        p.error(f"--precisions {args.precisions} with --spec local: FP8 training needs the Transformer Engine spec")
    if not torch.cuda.is_available() and args.precisions != "fp32":
        p.error(f"--precisions {args.precisions}: only fp32 runs on CPU (Megatron's local layer spec)")
    bad = set(args.sections.split(",")) - set(SECTIONS)
    if bad:
        p.error(f"--sections: unknown {sorted(bad)}; expected some of {SECTIONS}")
    return args


def portable(value: Any) -> Any:
    """Paths inside the checkout as relative ones (results are committed as baselines)."""
    if isinstance(value, str) and value.startswith(str(ROOT) + os.sep):
        return os.path.relpath(value, ROOT)
    return value


def write_json(path: Path, result: dict[str, Any]) -> None:
    """Write ``result`` as indented JSON, atomically (temporary sibling, then rename)."""
    atomic_write_text(path, json.dumps(result, indent=2, default=str))


def main(argv: list[str] | None = None) -> int:
    from tqdm import tqdm

    import throughput_report as report
    import throughput_sections as sections
    from throughput_projection import run_projection

    args = parse_args(argv)
    baseline = json.loads(args.compare.read_text()) if args.compare else None
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = args.name or f"throughput-{args.profile}-{datetime.datetime.now().strftime('%Y%m%d-%H%M%S')}"
    json_path = out / f"{stem}.json"
    assumptions = Assumptions(**{f.name: getattr(args, f"assume_{f.name}") for f in dataclasses.fields(Assumptions)})
    result: dict[str, Any] = {"schema": SCHEMA, "created": datetime.datetime.now().isoformat(timespec="seconds"),
                              "command": [portable(str(Path(__file__).resolve())), *(sys.argv[1:] if argv is None else argv)], "profile": args.profile,
                              "settings": {k: portable(v) for k, v in vars(args).items() if k != "compare"},
                              "environment": environment(),
                              "sections": {}}
    model: Path | None = None
    wanted = [s for s in SECTIONS if s in args.sections.split(",")]
    for name in tqdm(wanted, desc="sections", file=sys.stderr, disable=len(wanted) < 2):
        start, load = time.perf_counter(), os.getloadavg()[0]
        try:
            if name == "projection":
                sec = run_projection(assumptions, log=log)
            else:
                if model is None:
                    model, load_weights = resolve_model(args)
                if name == "update":
                    sec = sections.run_update(args, model, load_weights, log)
                    sections.enrich_update_rows(sec["rows"], model, args)
                    sec["model"] = model.name
                elif name == "rollout":
                    sec = sections.run_rollout(args, model, log)
                else:
                    sec = sections.run_reward(args, log)
        except Exception as exc:  # keep the other sections; the error is in the JSON and the table
            log(traceback.format_exc())
            sec = {"error": f"{type(exc).__name__}: {exc}", "rows": []}
        sec.update(seconds=time.perf_counter() - start, loadavg_1min=[load, os.getloadavg()[0]])
        result["sections"][name] = sec
        write_json(json_path, result)
    text = report.markdown(result)
    if baseline:
        text += "\n" + report.compare(result, baseline) + "\n"
    print(text)
    md_path = atomic_write_text(out / f"{stem}.md", text + "\n")
    png = report.chart(result, out / f"{stem}.png")
    log(f"wrote {json_path}, {md_path}" + (f", {png}" if png else ""))
    return 1 if any(sec.get("error") for sec in result["sections"].values()) else 0


if __name__ == "__main__":
    raise SystemExit(main())
