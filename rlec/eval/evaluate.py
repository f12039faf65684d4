"""``python -m rlec.eval.evaluate``: generate raw evaluation records over a grid of confidence targets.

For every question of the evaluation parquet (data preparation's output, verl schema), every
target of the grid (default: the binary prompt, then p = 0.0, 0.1, ..., 0.9) and every sample
index, the prompt is re-rendered from ``extra_info.task_text`` with
``rlec.prompts.build_messages(task_text, p)`` (p None = the binary prompt) and
``rlec.prompts.render``, and one response is generated. Records (``rlec.eval.records``) are
appended batch by batch with flush + fsync; ``--resume`` skips the (source, question, target,
sample) keys already in the file, so an interrupted run loses at most one batch and never
duplicates. Nothing is graded here: ``python -m rlec.eval.metrics`` does that.

Example (CPU, tiny model)::

    python -m rlec.eval.evaluate --model MODEL_DIR --data data/processed/eval.parquet \\
        --out outputs/eval/records.jsonl --engine hf --temperature 0 --max-new-tokens 32
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Sequence

from tqdm import tqdm

from rlec.eval.cli import HelpFormatter
from rlec.eval.dataset import EvalItem, load_eval_items
from rlec.generation import Engine, SamplingSettings, make_engine
from rlec.eval.records import (
    BINARY,
    DEFAULT_TARGETS_SPEC,
    SCHEMA,
    RecordWriter,
    parse_targets,
    read_records,
    record_key,
    repair_tail,
    target_label,
)
from rlec.models import check_model_folder
from rlec.prompts import build_messages, render

log = logging.getLogger("rlec.eval.evaluate")


@dataclass(frozen=True)
class Job:
    """One (question, target, sample) to generate."""

    item: EvalItem
    target_p: float | None
    sample_index: int

    @property
    def key(self) -> tuple[str, str, str, int]:
        return (self.item.source, self.item.question_id, target_label(self.target_p), self.sample_index)


def plan_jobs(items: Sequence[EvalItem], targets: Sequence[float | None], n_samples: int) -> list[Job]:
    """All jobs, question-major (a batch holds prompts of similar length), then target, then sample."""
    if n_samples < 1:
        raise ValueError(f"n_samples must be >= 1, got {n_samples}")
    return [Job(item, p, s) for item in items for p in targets for s in range(n_samples)]


def sample_seed(base_seed: int, key: tuple[str, str, str, int]) -> int:
    """A stable 31-bit seed for one (source, question, target, sample) key."""
    digest = hashlib.sha256(repr((int(base_seed),) + tuple(key)).encode()).digest()
    return int.from_bytes(digest[:4], "little") & 0x7FFFFFFF


def _check_resume(records: list[dict[str, Any]], model: str, sampling: dict[str, Any], path: Path) -> None:
    for rec in records[:1]:
        if rec.get("model") != model or rec.get("sampling") != sampling:
            raise ValueError(
                f"{path} holds records of another run (model {rec.get('model')!r}, sampling {rec.get('sampling')!r}); "
                f"this run has model {model!r}, sampling {sampling!r}: write to a new --out"
            )


def existing_record_keys(out_path: str | Path, *, model: str, sampling: SamplingSettings, resume: bool) -> set[tuple[str, str, str, int]]:
    """The record keys already in ``out_path`` (empty when it is absent or empty).

    A partial last line left by an interrupted write is cut from the file first (the only change
    made to it; every complete record stays).

    Raises:
        FileExistsError: ``out_path`` holds records and ``resume`` is false.
        ValueError: a bad line (:class:`rlec.eval.records.RecordError`), or records written with
            another model or other sampling settings.
    """
    out_path = Path(out_path)
    if not out_path.exists() or out_path.stat().st_size == 0:
        return set()
    if not resume:
        raise FileExistsError(f"{out_path} exists: pass --resume to continue it, or choose another --out")
    cut = repair_tail(out_path)
    if cut:
        log.warning("%s: removed a partial last line (%d bytes) left by an interrupted write", out_path, cut)
    existing, _ = read_records(out_path, hint="fix or delete that line, or choose another --out")
    _check_resume(existing, model, sampling.to_dict(), out_path)
    return {record_key(r) for r in existing}


def run(
    items: Sequence[EvalItem],
    engine: Engine,
    tokenizer: Any,
    out_path: str | Path,
    *,
    model: str,
    sampling: SamplingSettings,
    targets: Sequence[float | None],
    n_samples: int = 1,
    batch_size: int | None = None,
    resume: bool = False,
    progress: bool = True,
    done: set[tuple[str, str, str, int]] | None = None,
) -> dict[str, int]:
    """Generate every missing record and append it to ``out_path``.

    Args:
        done: the keys already in ``out_path`` when the caller has read them with
            :func:`existing_record_keys` (``main`` does, before loading the model); ``None``
            reads them here.

    Returns:
        ``{"planned", "existing", "generated"}`` record counts.

    Raises:
        FileExistsError: ``out_path`` exists and ``resume`` is false.
        ValueError: resuming a file written with another model or other sampling settings, or
            holding a bad line.
    """
    out_path = Path(out_path)
    if done is None:
        done = existing_record_keys(out_path, model=model, sampling=sampling, resume=resume)
    jobs = plan_jobs(items, targets, n_samples)
    todo = [j for j in jobs if j.key not in done]
    batch_size = batch_size or engine.default_batch_size
    prompt_cache: dict[tuple[str, str, str], str] = {}
    generated = 0
    with RecordWriter(out_path) as writer, tqdm(
        total=len(jobs), initial=len(jobs) - len(todo), unit="sample", desc="evaluate", disable=not progress
    ) as bar:
        for start in range(0, len(todo), batch_size):
            batch = todo[start : start + batch_size]
            prompts = []
            for job in batch:
                ck = job.key[:3]
                if ck not in prompt_cache:
                    prompt_cache[ck] = render(tokenizer, build_messages(job.item.task_text, job.target_p))
                prompts.append(prompt_cache[ck])
            seeds = [sample_seed(sampling.seed, job.key) for job in batch]
            gens = engine.generate(prompts, seeds)
            stamp = datetime.now(timezone.utc).isoformat(timespec="seconds")
            generated += writer.write_batch(
                _record(job, prompt, gen, engine, model, sampling, stamp) for job, prompt, gen in zip(batch, prompts, gens)
            )
            bar.update(len(batch))
    return {"planned": len(jobs), "existing": len(jobs) - len(todo), "generated": generated}


def _record(job: Job, prompt: str, gen: Any, engine: Engine, model: str, sampling: SamplingSettings, stamp: str) -> dict[str, Any]:
    item = job.item
    return {
        "schema": SCHEMA,
        "question_id": item.question_id,
        "source": item.source,
        "data_source": item.data_source,
        "index": item.index,
        "drop_scheme": item.drop_scheme,
        "target": target_label(job.target_p),
        "target_p": job.target_p,
        "objective": BINARY if job.target_p is None else "rlec",
        "sample_index": job.sample_index,
        "ground_truth": item.ground_truth,
        "prompt": prompt,
        "response": gen.text,
        "prompt_tokens": gen.prompt_tokens,
        "response_tokens": gen.response_tokens,
        "finish_reason": gen.finish_reason,
        "engine": engine.name,
        "engine_version": engine.version,
        "model": model,
        "sampling": sampling.to_dict(),
        "sample_seed": gen.sample_seed,
        "timestamp": stamp,
    }


def build_parser() -> argparse.ArgumentParser:
    """The command-line interface."""
    p = argparse.ArgumentParser(
        prog="python -m rlec.eval.evaluate",
        description="Generate raw evaluation records (one JSON line per question x target x sample). No grading: "
        "run `python -m rlec.eval.metrics RECORDS` afterwards.",
        formatter_class=HelpFormatter,
    )
    p.add_argument("--model", required=True, help="Hugging Face model folder (a Megatron checkpoint must be exported to HF first)")
    p.add_argument("--data", required=True, help="evaluation parquet written by data preparation")
    p.add_argument("--out", default="outputs/eval/records.jsonl", help="record file (JSON Lines)")
    p.add_argument("--tokenizer", default=None, help="tokenizer folder (default: the model folder)")
    p.add_argument("--targets", default=DEFAULT_TARGETS_SPEC, help="comma-separated grid; 'binary' = the prompt without a target")
    p.add_argument("--n-samples", type=int, default=1, help="samples per question and target")
    p.add_argument("--temperature", type=float, default=1.0, help="sampling temperature; 0 = greedy")
    p.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling mass")
    p.add_argument("--max-new-tokens", type=int, default=2048, help="response length limit in tokens")
    p.add_argument("--seed", type=int, default=0, help="base seed (per-sample seeds derive from it)")
    p.add_argument("--engine", choices=("auto", "hf", "vllm"), default="auto", help="auto = vLLM if installed and a GPU is present")
    p.add_argument("--tensor-parallel-size", type=int, default=1, help="vLLM: GPUs per model replica")
    p.add_argument("--gpu-memory-utilization", type=float, default=0.9, help="vLLM: GPU memory fraction")
    p.add_argument("--max-model-len", type=int, default=None, help="vLLM: context length (default: the model's)")
    p.add_argument("--batch-size", type=int, default=None, help="prompts per engine call and per durable write (default: hf 32, vllm 1024)")
    p.add_argument(
        "--threads", type=int, default=None,
        help="CPU threads for torch (default: torch's own choice). On a shared or busy machine --threads 1 avoids OpenMP "
        "threads waiting on each other (5x faster wall time measured on a loaded 2-core box)",
    )  # fmt: skip
    p.add_argument(
        "--limit", type=int, default=None,
        help="evaluate N questions, taken round-robin over the data sources (the first of each, then the second, ...)",
    )  # fmt: skip
    p.add_argument("--resume", action="store_true", help="continue an existing record file, skipping records already present")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m rlec.eval.evaluate`` / ``rlec-evaluate``; returns the exit code."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    out = Path(args.out)
    try:  # every input is checked before the model loads
        targets = parse_targets(args.targets)
        sampling = SamplingSettings(args.temperature, args.top_p, args.max_new_tokens, args.seed)
        if args.limit is not None and args.limit < 1:
            raise ValueError(f"--limit must be >= 1, got {args.limit}")
        items = load_eval_items(args.data, args.limit)
        if args.threads is not None and args.threads < 1:
            raise ValueError(f"--threads must be >= 1, got {args.threads}")
        check_model_folder(args.model, label="--model", weights=("*.safetensors", "pytorch_model*.bin"))
        done = existing_record_keys(out, model=str(args.model), sampling=sampling, resume=args.resume)
    except (ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    import torch

    previous_threads = torch.get_num_threads()
    if args.threads:
        torch.set_num_threads(args.threads)
    try:
        return _generate(args, items, targets, sampling, out, done)
    finally:
        torch.set_num_threads(previous_threads)


def _generate(
    args: argparse.Namespace, items: list[EvalItem], targets: list[float | None], sampling: SamplingSettings, out: Path,
    done: set[tuple[str, str, str, int]],
) -> int:
    from rlec.models import load_tokenizer

    t0 = time.perf_counter()
    try:
        tokenizer = load_tokenizer(args.tokenizer or args.model)
        engine = make_engine(
            args.engine,
            args.model,
            tokenizer,
            sampling,
            tensor_parallel_size=args.tensor_parallel_size,
            gpu_memory_utilization=args.gpu_memory_utilization,
            max_model_len=args.max_model_len,
        )
    except (OSError, ValueError) as exc:  # e.g. weights transformers cannot read: one line, not a traceback
        print(f"error: {'--tokenizer ' + str(args.tokenizer) if args.tokenizer else '--model ' + str(args.model)}: {exc}", file=sys.stderr)
        return 2
    log.info("engine %s %s; %d questions x %d targets x %d samples", engine.name, engine.version, len(items), len(targets), args.n_samples)
    try:
        counts = run(
            items, engine, tokenizer, out, model=str(args.model), sampling=sampling, targets=targets,
            n_samples=args.n_samples, batch_size=args.batch_size, resume=args.resume, done=done,
        )  # fmt: skip
    except (ValueError, FileExistsError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"\ninterrupted: every completed batch is in {out}; rerun with --resume to continue", file=sys.stderr)
        return 130
    elapsed = time.perf_counter() - t0
    print("\n| records planned | already present | generated | seconds | engine |\n|---|---|---|---|---|")
    print(f"| {counts['planned']} | {counts['existing']} | {counts['generated']} | {elapsed:.1f} | {engine.name} {engine.version} |")
    print(f"\nrecords: {out}\nnext: python -m rlec.eval.metrics {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
