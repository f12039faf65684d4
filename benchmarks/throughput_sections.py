"""The sections of ``benchmarks/throughput.py``: update (torchrun launches), rollout, reward, projection.

Each ``run_*`` function returns a JSON-ready dict ``{"rows": [...], ...}``; timings follow one
rule: warm-up iterations are excluded, ``repeats`` timed ones are summarised by median, min, max
and relative spread ``(max - min) / median``.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from throughput_update import summarize

ROOT = Path(__file__).resolve().parents[1]
WORKER = Path(__file__).resolve().with_name("throughput_update.py")
LAYOUT_RE = re.compile(r"^(?:tp(\d+))?(?:ep(\d+))?(?:etp(\d+))?(?:pp(\d+))?$")


def parse_layout(name: str) -> dict[str, Any]:
    """``"tp2ep2"`` -> sizes and the smallest world size that fits them (lcm of tp*pp, ep*etp*pp).

    Raises:
        ValueError: the name is not ``[tpN][epN][etpN][ppN]``.
    """
    m = LAYOUT_RE.match(name.strip().lower())
    if not name.strip() or not m:
        raise ValueError(f"layout {name!r}: expected e.g. tp1, tp2, ep2, tp2ep2, tp2ep2etp1, pp2")
    tp, ep, etp, pp = (int(g) if g else None for g in m.groups())
    tp, ep, pp = tp or 1, ep or 1, pp or 1
    world = math.lcm(tp * pp, ep * (etp or tp) * pp)
    return {"name": name.strip().lower(), "tp": tp, "ep": ep, "etp": etp, "pp": pp, "world": world}


def run_update(args: Any, model: Path, load_weights: bool, log: Any) -> dict[str, Any]:
    """Launch one torchrun per world size and collect the worker's records.

    Raises:
        RuntimeError: a launch failed (its stderr tail is in the message).
    """
    import torch

    cuda = torch.cuda.is_available()
    layouts = [parse_layout(x) for x in args.layouts.split(",") if x.strip()]
    window_on = {x.strip() for x in args.window_layouts.split(",")}
    cores = os.cpu_count() or 1
    rows, launches = [], []
    for world in sorted({lay["world"] for lay in layouts}):
        group = [lay for lay in layouts if lay["world"] == world]
        if cuda and world > torch.cuda.device_count():
            rows += [{"layout": lay["name"], "error": f"needs {world} GPUs, {torch.cuda.device_count()} visible"} for lay in group]
            continue
        threads = args.threads or max(1, cores // world)
        spec = {"model": str(model), "load_weights": load_weights, "layouts": group, "precisions": args.precisions.split(","),
                "batch": args.batch, "prompt_len": args.prompt_len, "response_len": args.response_len,
                "micro_batch_size": args.micro_batch_size, "warmup": args.warmup, "repeats": args.repeats, "seed": args.seed,
                "vocab_size": json.loads((model / "config.json").read_text())["vocab_size"],
                "use_te": {"auto": None, "te": True, "local": False}[getattr(args, "spec", "auto")]}
        for lay in group:
            lay["variants"] = ["full", "window"] if ("all" in window_on or lay["name"] in window_on) else ["full"]
        with tempfile.TemporaryDirectory(prefix="rlec-throughput-") as tmp:
            spec_path, out_path = Path(tmp) / "spec.json", Path(tmp) / "out.json"
            spec_path.write_text(json.dumps(spec))
            cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(world),
                   str(WORKER), str(spec_path), str(out_path)]
            env = {**os.environ, "OMP_NUM_THREADS": str(threads), "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
                   "PYTHONWARNINGS": "ignore", "NVTE_FP8_BLOCK_SCALING_FP32_SCALES": "1"}
            log(f"[update] torchrun {world} process(es) x {threads} thread(s): {', '.join(lay['name'] for lay in group)}")
            start = time.perf_counter()
            proc = subprocess.run(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=None, text=True, timeout=args.update_timeout_s)
            wall = time.perf_counter() - start
            if proc.returncode != 0 or not out_path.is_file():
                raise RuntimeError(f"update worker failed (exit {proc.returncode}): {' '.join(cmd)}")
            records = json.loads(out_path.read_text())
        launches.append({"world": world, "threads_per_rank": threads, "layouts": [lay["name"] for lay in group], "wall_s": wall})
        for rec in records:
            rec["processes"] = world
            rows.append(rec)
    return {"rows": rows, "launches": launches, "settings": {k: spec[k] for k in spec if k not in ("layouts", "model")} if launches else {}}


def enrich_update_rows(rows: list[dict[str, Any]], model: Path, args: Any) -> None:
    """Add tokens/s, FLOPs (verl's ``FlopsCounter``; the cost model for the logit window), GFLOP/s
    and MFU (GPU only) to each measured row, in place."""
    import torch
    from transformers import AutoConfig
    from verl.utils.flops_counter import ESTIMATE_FUNC, get_device_flops

    from rlec.cluster.cost_model import train_flops
    from rlec.model_shape import ModelShape

    hf_config = AutoConfig.from_pretrained(str(model))
    shape = ModelShape.from_hf_config(json.loads((model / "config.json").read_text()), str(model / "config.json"))
    seq = args.prompt_len + args.response_len
    seqlens = [seq] * args.batch
    tokens = sum(seqlens)
    # verl's FlopsCounter.estimate_flops also asks verl's device helper for the peak, which fails
    # without CUDA; its per-model formula (the same table) gives the FLOPs: TFLOP in 1 s -> FLOPs
    model_flops = ESTIMATE_FUNC[hf_config.model_type](hf_config, tokens, seqlens, 1.0) * 1e12
    peak = get_device_flops() * 1e12 if torch.cuda.is_available() else None
    for rec in rows:
        if "update_s" not in rec:
            continue
        world = rec["processes"]
        window = rec["logits"] == "window"
        executed = train_flops(shape, seqlens, logit_tokens=args.batch * args.response_len if window else None).total
        upd, lp = rec["update_s"]["median"], rec["logprob_s"]["median"]
        rec.update({
            "tokens_per_step": tokens, "tokens_per_s": tokens / upd, "tokens_per_s_per_device": tokens / upd / world,
            "logprob_tokens_per_s": tokens / lp, "model_flops_per_step": model_flops, "executed_flops_per_step": executed,
            "achieved_gflops_per_device": executed / upd / world / 1e9,
            "mfu": executed / upd / world / peak if peak else None, "peak_flops_per_device": peak,
        })


def _prompts(n: int, tokenizer: Any) -> list[str]:
    """``n`` rendered prompts: the bundled DAPO-Math sample problems, targets cycling binary/0.3/0.6/0.9."""
    from rlec.data.readers import iter_records
    from rlec.data.sources import parse_math
    from rlec.prompts import build_messages, math_task, render

    path = ROOT / "rlec" / "data" / "samples" / "dapo_math_sample.jsonl"
    problems = [parse_math(rec, path, row).problem for row, rec in iter_records(path)]
    targets = [None, 0.3, 0.6, 0.9]
    return [render(tokenizer, build_messages(math_task(problems[i % len(problems)]), targets[i % 4])) for i in range(n)]


def run_rollout(args: Any, model: Path, log: Any) -> dict[str, Any]:
    """Generated tokens/s and requests/s of ``rlec.generation`` (vLLM on a GPU when installed,
    else transformers ``generate``) for a fixed prompt set and response length limit."""
    from rlec.generation import SamplingSettings, make_engine
    from rlec.models import load_tokenizer

    tokenizer = load_tokenizer(model if (model / "tokenizer.json").is_file() else None)
    sampling = SamplingSettings(temperature=1.0, top_p=1.0, max_new_tokens=args.rollout_new_tokens, seed=args.seed)
    vllm_kwargs = {"gpu_memory_utilization": 0.5, "max_model_len": 4096}
    engine = make_engine(args.engine, str(model), tokenizer, sampling, **vllm_kwargs)
    prompts = _prompts(args.rollout_prompts, tokenizer)
    seeds = [args.seed + i for i in range(len(prompts))]
    times, tokens = [], []
    for i in range(args.rollout_warmup + args.rollout_repeats):
        start = time.perf_counter()
        gens = engine.generate(prompts, seeds)
        elapsed = time.perf_counter() - start
        log(f"[rollout] {engine.name} pass {i + 1}: {sum(g.response_tokens for g in gens)} tokens in {elapsed:.2f}s"
            + (" (warm-up)" if i < args.rollout_warmup else ""))
        if i >= args.rollout_warmup:
            times.append(elapsed)
            tokens.append(sum(g.response_tokens for g in gens))
    device = getattr(engine, "device", "cuda")
    prompt_tokens = sum(g.prompt_tokens for g in gens)
    del engine
    per_s = [t / s for t, s in zip(tokens, times)]
    row = {"engine": engine_name(args, device), "version": _engine_version(args, device), "device": str(device),
           "prompts": len(prompts), "prompt_tokens": prompt_tokens, "max_new_tokens": args.rollout_new_tokens,
           "response_tokens": tokens, "seconds": summarize(times), "tokens_per_s": sorted(per_s)[len(per_s) // 2],
           "requests_per_s": len(prompts) / summarize(times)["median"], "sampling": sampling.to_dict()}
    return {"rows": [row]}


def engine_name(args: Any, device: str) -> str:
    """"vllm" or "transformers", as ``make_engine`` resolves ``args.engine``."""
    from rlec.generation import vllm_available

    return "vllm" if args.engine == "vllm" or (args.engine == "auto" and vllm_available()) else "transformers"


def _engine_version(args: Any, device: str) -> str:
    import importlib.metadata

    name = engine_name(args, device)
    return importlib.metadata.version(name)


def run_reward(args: Any, log: Any) -> dict[str, Any]:
    """Responses/s of ``rlec.grading.grade_batch`` (warm math-verify pool) on the reward benchmark's
    seeded batch (``benchmarks/reward_throughput.py``'s ``make_batch``)."""
    from reward_throughput import make_batch

    from rlec.grading import grade_batch
    from rlec.grading.math import MathVerifyPool

    items = make_batch(args.reward_n, args.seed, args.reward_pathological)
    pool = MathVerifyPool(timeout_s=5.0)
    try:
        times, agree = [], 0.0
        for i in range(args.reward_warmup + args.reward_repeats):
            start = time.perf_counter()
            results = grade_batch([x.response for x in items], [x.gold for x in items], [x.data_source for x in items], pool=pool)
            elapsed = time.perf_counter() - start
            if i >= args.reward_warmup:
                times.append(elapsed)
            agree = sum(r.outcome.value == x.expected for r, x in zip(results, items)) / len(items)
    finally:
        pool.close()
    s = summarize(times)
    log(f"[reward] {len(items)} responses, median {s['median']:.2f}s")
    return {"rows": [{"grader": "rlec.grading.grade_batch", "responses": len(items), "pool_workers": pool.max_workers,
                      "pathological_frac": args.reward_pathological, "seconds": s, "responses_per_s": len(items) / s["median"],
                      "agreement_3way": agree}]}
