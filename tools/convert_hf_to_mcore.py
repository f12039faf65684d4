#!/usr/bin/env python
"""Convert a Hugging Face Qwen3 / Qwen3-MoE folder into a Megatron-core dist checkpoint for verl.

The output folder is what verl's Megatron engine loads with
``actor_rollout_ref.actor.megatron.use_dist_checkpointing=True`` and
``...dist_checkpointing_path=OUTPUT`` (see docs/conversion.md). Weights are mapped by mbridge.

One process::

    python tools/convert_hf_to_mcore.py --hf-model-path MODEL --output-path OUT --verify

Several (tensor/expert/pipeline parallel; the world size must fit the sizes)::

    torchrun --nproc_per_node 4 tools/convert_hf_to_mcore.py --hf-model-path MODEL \\
        --output-path OUT --tp 2 --ep 2 --verify

GPU: Transformer Engine layer spec, bf16, NCCL. CPU: Megatron's local spec, fp32, gloo (with
the CPU wing's shims, ``rlec.cpu.megatron_core``). Inputs are checked before any heavy work; the output is
written to a temporary folder and renamed only when complete (and verified, with ``--verify``);
killed mid-write, it leaves no writer process behind, and the next conversion into the same
folder removes the partial one (``rlec.megatron.checkpoint``).
Exit status: 0 success, 1 verification failed, 2 bad input (one line on stderr, nothing written),
130 interrupted (Ctrl-C; nothing written).
"""

from __future__ import annotations

import argparse
import hashlib
import math
import os
import platform
import resource
import sys
import time
import warnings
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# Heavy imports (torch, Megatron) stay inside functions: --help answers without them, and the
# dist-checkpoint writer spawns a helper process that re-imports this file, which should not pay for them.
EXIT_OK, EXIT_VERIFY_FAILED, EXIT_BAD_INPUT, EXIT_INTERRUPTED = 0, 1, 2, 130


def _tolerance(text: str) -> float:
    """``--atol``: a finite number > 0 (NaN compares false, so a NaN bound fails verification after the whole
    conversion; an infinite one passes anything)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"{text!r} must be a finite logit bound > 0 (NaN never passes, inf always does)")
    return value


def _share(text: str) -> float:
    """``--min-top1``: a share in [0, 1] (NaN compares false: verification would fail after the whole conversion)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not (math.isfinite(value) and 0 <= value <= 1):
        raise argparse.ArgumentTypeError(f"{text!r} must be a share of positions in [0, 1]")
    return value


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    from rlec.eval.cli import HelpFormatter  # argparse only: keeps start-up light

    p = argparse.ArgumentParser(
        prog="convert_hf_to_mcore.py",
        description="Convert a Hugging Face Qwen3 / Qwen3-MoE folder into a Megatron-core dist checkpoint "
        "(the layout verl loads as dist_checkpointing_path), optionally verifying logits and an export round trip.",
        formatter_class=HelpFormatter,
    )
    p.add_argument("--hf-model-path", required=True, type=Path, help="Hugging Face model folder (config.json + *.safetensors)")
    p.add_argument("--output-path", required=True, type=Path, help="destination folder of the dist checkpoint")
    p.add_argument("--tp", type=int, default=1, help="tensor model parallel size")
    p.add_argument("--ep", type=int, default=1, help="expert model parallel size")
    p.add_argument("--etp", type=int, default=None, help="expert tensor parallel size (default: --tp)")
    p.add_argument("--pp", type=int, default=1, help="pipeline model parallel size")
    p.add_argument("--dtype", choices=("auto", "bf16", "fp32"), default="auto", help="parameter dtype (auto: bf16 on GPU, fp32 on CPU)")
    p.add_argument("--spec", choices=("auto", "te", "local"), default="auto", help="layer spec (auto: Transformer Engine on GPU, local on CPU)")
    p.add_argument("--verify", action="store_true", help="reload the written checkpoint and check logits and the export round trip")
    p.add_argument("--reference-device", default="cpu", metavar="DEVICE",
                   help="where --verify runs the Hugging Face reference model (rank 0 only): cpu keeps it off the GPUs, "
                   "which hold the Megatron shards (Qwen3-30B-A3B: 61 GB bf16 in host memory); e.g. cuda:1 for a spare GPU")
    p.add_argument("--atol", type=_tolerance, default=None, help="logit bound for --verify (default per dtype: fp32 max 1e-4, bf16 mean 0.1)")
    p.add_argument("--min-top1", type=_share, default=None, help="minimum top-1 agreement for --verify (default: fp32 1.0, bf16 0.95)")
    p.add_argument("--no-hash", action="store_true", help="skip the sha256 of the source files in the metadata")
    p.add_argument("--overwrite", action="store_true", help="replace an existing --output-path")
    return p.parse_args(argv)


def _say(rank: int, *parts: Any) -> None:
    if rank == 0:
        print("[convert]", *parts, flush=True)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 24), b""):
            h.update(block)
    return h.hexdigest()


def _start_hashing(plan: Any, pool: ThreadPoolExecutor) -> dict[str, Future]:
    files = [plan.hf_path / "config.json", *plan.files]
    return {f.name: pool.submit(_sha256, f) for f in files}


def _versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": platform.python_version()}
    for pkg in ("torch", "megatron-core", "mbridge", "transformers", "verl", "transformer-engine"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            pass
    return out


def _peak_memory_gib() -> dict[str, float]:
    import torch

    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB on Linux
    values = torch.tensor([rss, torch.cuda.max_memory_allocated() / 2**30 if torch.cuda.is_available() else 0.0], dtype=torch.float64)
    if torch.distributed.is_initialized():
        values = values.to("cuda") if torch.cuda.is_available() and torch.distributed.get_backend() == "nccl" else values
        torch.distributed.all_reduce(values, op=torch.distributed.ReduceOp.MAX)
    return {"host_rss_gib_max_rank": round(float(values[0]), 3), "gpu_allocated_gib_max_rank": round(float(values[1]), 3)}


def _folder_bytes(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())


def _table(rows: list[tuple[str, str]]) -> str:
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"  {k.ljust(width)}  {v}" for k, v in rows)


class VerificationFailed(RuntimeError):
    """--verify found the written checkpoint out of tolerance."""


def convert(args: argparse.Namespace, plan: Any) -> int:
    """The heavy part, on every rank: build, load, write, verify, summarise (``plan`` from preflight)."""
    import torch

    # Third-party notices that say nothing about this conversion (missing Apex on CPU, torch DCP deprecations).
    warnings.filterwarnings("ignore", message=r".*(Apex|Transformer Engine and Apex) (is|are) not installed.*")
    warnings.filterwarnings("ignore", message=r".*full scope is deprecated.*")
    warnings.filterwarnings("ignore", category=FutureWarning, module=r"(torch\.distributed|megatron)\..*")
    from tqdm import tqdm

    from rlec.megatron.checkpoint import atomic_output, load_dist_checkpoint, model_sharded_state_dict, write_dist_checkpoint, write_metadata
    from rlec.megatron.model import build_model, load_hf_weights
    from rlec.megatron.parallel import init_parallel
    from rlec.megatron.verify import verify_against_hf

    start = time.time()
    init_parallel(plan.layout)
    rank = torch.distributed.get_rank()
    pool = ThreadPoolExecutor(max_workers=4)
    hashes = _start_hashing(plan, pool) if rank == 0 and not args.no_hash else {}
    use_te = None if args.spec == "auto" else args.spec == "te"
    dtype = {"auto": None, "bf16": torch.bfloat16, "fp32": torch.float32}[args.dtype]
    build = dict(use_te=use_te, dtype=dtype)

    _say(rank, f"building the Megatron model ({plan.layout.as_dict()})")
    policy = build_model(plan.hf_path, plan.layout, load_weights=False, **build)
    spec = "transformer_engine" if policy.use_te else "local"
    param_dtype = str(policy.dtype).replace("torch.", "")
    n_local = sum(1 for _ in policy.unwrapped()[0].parameters())
    bar = tqdm(total=n_local, desc="[convert] loading HF weights (rank 0 shard)", unit="tensor", disable=rank != 0, file=sys.stdout)

    def tick(name: str) -> None:
        bar.set_postfix_str(name.split(".self_attention")[0].split(".mlp")[0], refresh=False)
        bar.update(1)

    load_hf_weights(policy, plan.hf_path, progress=tick)
    bar.close()
    state_keys = {sh.key for sh in model_sharded_state_dict(policy).values() if hasattr(sh, "key")}
    report = None
    with atomic_output(plan.output, overwrite=args.overwrite) as tmp:
        _say(rank, f"writing the dist checkpoint ({len(state_keys)} sharded keys on rank 0) to {tmp}")
        write_dist_checkpoint(policy, tmp)
        del policy
        if args.verify:
            _say(rank, "verifying: reloading the checkpoint into a fresh model, comparing with transformers")
            fresh = build_model(plan.hf_path, plan.layout, load_weights=False, **build)
            load_dist_checkpoint(fresh, tmp)
            report = verify_against_hf(fresh, plan.hf_path, atol=args.atol, min_top1=args.min_top1,
                                       reference_device=args.reference_device)
            del fresh
            if not report.passed:
                _say(rank, "verification FAILED:\n" + report.to_json())
                raise VerificationFailed(str(plan.output))
        seconds = time.time() - start
        memory = _peak_memory_gib()
        size = _folder_bytes(tmp)
        metadata = {
            "format": "megatron.core.dist_checkpointing torch_dist; top-level keys = GPTModel.sharded_state_dict(prefix='')",
            "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "source": {"path": str(plan.hf_path.resolve()), "model_type": plan.config.get("model_type"),
                       "architectures": plan.config.get("architectures"), "tensors": plan.n_tensors, "bytes": plan.n_bytes,
                       "sha256": {name: fut.result() for name, fut in hashes.items()}},
            "parallel": plan.layout.as_dict(),
            "dtype": param_dtype,
            "layer_spec": spec,
            "versions": _versions(),
            "sharded_keys": len(state_keys),
            "checkpoint_bytes": size,
            "seconds": round(seconds, 1),
            "peak_memory": memory,
            "verification": None if report is None else {k: v for k, v in report.__dict__.items()},
        }
        write_metadata(tmp, metadata)
    pool.shutdown(wait=False)
    rows = [
        ("source", f"{plan.hf_path} ({plan.config.get('model_type')}, {plan.n_tensors} tensors, {plan.n_bytes / 2**30:.2f} GiB)"),
        ("output", str(plan.output)),
        ("layout", " ".join(f"{k}={v}" for k, v in plan.layout.as_dict().items())),
        ("layer spec / dtype", f"{spec} / {metadata['dtype']}"),
        ("sharded keys written", str(len(state_keys))),
        ("checkpoint size", f"{size / 2**30:.3f} GiB ({size} bytes)"),
        ("time", f"{seconds:.1f} s"),
        ("peak memory (max rank)", f"host RSS {memory['host_rss_gib_max_rank']:.2f} GiB, GPU {memory['gpu_allocated_gib_max_rank']:.2f} GiB"),
    ]
    if report is not None:
        rows += [
            ("max |logit diff|", f"{report.max_abs_logit_diff:.3g} over {report.n_positions} positions"),
            ("mean |logit diff|", f"{report.mean_abs_logit_diff:.3g}"),
            ("top-1 agreement", f"{report.top1_agreement:.4f}"),
            ("export round trip", f"{report.export_tensors} tensors, {len(report.export_mismatched)} mismatched, "
                                  f"{len(report.export_missing)} missing, {len(report.export_unexpected)} unexpected"),
            ("verification", f"PASSED (tolerance {report.tolerance})"),
        ]
    _say(rank, "summary\n" + _table(rows))
    return EXIT_OK


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)  # before any heavy import: --help and usage errors answer at once
    from rlec.layout import ParallelLayout
    from rlec.io import check_writable
    from rlec.megatron.preflight import ConversionInputError, check_conversion

    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    layout = ParallelLayout(tp=args.tp, ep=args.ep, etp=args.etp, pp=args.pp, world_size=world)
    try:
        plan = check_conversion(args.hf_model_path, args.output_path, layout, overwrite=args.overwrite)
        check_writable(args.output_path, label="--output-path")
    except (ConversionInputError, OSError) as exc:
        if rank == 0:
            print(f"[convert] error: {exc}", file=sys.stderr, flush=True)
        return EXIT_BAD_INPUT
    try:
        return convert(args, plan)
    except VerificationFailed:
        return EXIT_VERIFY_FAILED
    except KeyboardInterrupt:
        if rank == 0:
            print(f"\n[convert] interrupted: nothing written to {args.output_path}", file=sys.stderr, flush=True)
        return EXIT_INTERRUPTED
    finally:
        from rlec.megatron.parallel import destroy_parallel

        destroy_parallel(process_group=False)  # the caller may convert again in this process


if __name__ == "__main__":
    status = main()
    if "torch" in sys.modules:  # a conversion ran (not --help or a refused input)
        from rlec.megatron.parallel import destroy_parallel

        destroy_parallel()
    sys.exit(status)
