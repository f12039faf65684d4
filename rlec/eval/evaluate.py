"""``python -m rlec.eval.evaluate``: generate raw evaluation records over a grid of confidence targets.

For every question of the evaluation parquet (data preparation's output, verl schema), every
target of the grid (default: the binary prompt, then p = 0.0, 0.1, ..., 0.9) and every sample
index, the prompt is re-rendered from ``extra_info.task_text`` with
``rlec.prompts.build_messages(task_text, p)`` (p None = the binary prompt) and
``rlec.prompts.render``, and one response is generated. Records (``rlec.eval.records``) are
appended batch by batch with flush + fsync; ``--resume`` skips the (source, question, target,
sample) keys already in the file, so an interrupted run loses at most one batch and never
duplicates. One process at a time writes a record file: a second one on the same ``--out``
refuses with the holder's pid (``rlec.io.output_lock``; a lock left by a killed run never
blocks). Nothing is graded here: ``python -m rlec.eval.metrics`` does that.

Exit status: 0 success; 2 bad input or the output in use (one line on stderr, checked before the
model loads, nothing written; a lock file that cannot be written, e.g. on a full disk, is named and
removed); 1 a write failed during generation (e.g. ``No space left on device``: one line naming the
file; completed batches kept, ``--resume`` continues); 130 interrupted (completed batches kept;
``--resume`` continues).

Example (CPU, tiny model)::

    python -m rlec.eval.evaluate --model MODEL_DIR --data data/processed/eval.parquet \\
        --out outputs/eval/records.jsonl --engine hf --temperature 0 --max-new-tokens 32
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import os
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
from rlec.io import FileLock, LockHeld, check_writable, lock_path, output_lock
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


def same_model(a: Any, b: Any) -> bool:
    """Whether two ``--model`` values name the same model (``X/``, ``./X`` and the absolute path of ``X`` do)."""
    if not isinstance(a, str) or not isinstance(b, str):
        return False
    return os.path.normpath(a) == os.path.normpath(b) or os.path.realpath(a) == os.path.realpath(b)


def _check_resume(records: list[dict[str, Any]], model: str, sampling: dict[str, Any], path: Path) -> None:
    for rec in records[:1]:
        if not same_model(rec.get("model"), model) or rec.get("sampling") != sampling:
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
    p.add_argument("--top-k", type=int, default=-1, help="sample among the k most likely tokens; -1 = all (verl's rollout.top_k; "
                   "q_i at the demo's rollout settings: --temperature 1 --top-k 5)")
    p.add_argument("--max-new-tokens", type=int, default=2048, help="response length limit in tokens")
    p.add_argument("--seed", type=int, default=0, help="base seed (per-sample seeds derive from it)")
    p.add_argument("--engine", choices=("auto", "hf", "vllm"), default="auto", help="auto = vLLM if installed and a GPU is present")
    p.add_argument("--tensor-parallel-size", type=int, default=1, help="vLLM: GPUs per model replica")
    p.add_argument("--gpu-memory-utilization", type=float, default=0.9, help="vLLM: GPU memory fraction")
    p.add_argument("--max-model-len", type=int, default=None, help="vLLM: context length (default: the model's)")
    p.add_argument("--batch-size", type=int, default=None, help="prompts per engine call and per durable write (default: hf 32, vllm 1024)")
    p.add_argument(
        "--threads", type=int, default=None,
        help="CPU threads for torch (default: 1 on a CPU-only machine, the fastest for the small models the CPU engine serves; "
        "torch's own choice with a GPU or when OMP_NUM_THREADS is set)",
    )  # fmt: skip
    p.add_argument(
        "--limit", type=int, default=None,
        help="evaluate N questions, taken round-robin over the data sources (the first of each, then the second, ...)",
    )  # fmt: skip
    p.add_argument("--resume", action="store_true", help="continue an existing record file, skipping records already present")
    return p


def default_threads() -> int | None:
    """CPU threads for torch when ``--threads`` is not given: 1 on a CPU-only machine, else torch's choice.

    The CPU engine serves small models (the CPU run's, tests'), whose matrix products are too
    small to split: extra OpenMP threads mostly wait on each other, and on a shared machine they
    wait for cores too. Measured on the README's CPU example (tiny model, 4 questions x 11 targets,
    64 greedy tokens; 2-core machine shared with other jobs; docs/metrics.md section 6): generation
    1 thread 20-54 s, 2 threads (torch's default here) 65-141 s, the gap at every load average (2-14). ``OMP_NUM_THREADS`` in the
    environment, or a CUDA GPU, leaves torch's own choice in place.

    Returns:
        1, or None for torch's default.
    """
    import torch

    if os.environ.get("OMP_NUM_THREADS") or torch.cuda.is_available():
        return None
    return 1


def _check_settings(args: argparse.Namespace) -> None:
    """Numeric options, checked before anything loads (ValueError naming the option)."""
    at_least_one = {"--n-samples": args.n_samples, "--batch-size": args.batch_size, "--limit": args.limit, "--threads": args.threads,
                    "--tensor-parallel-size": args.tensor_parallel_size, "--max-model-len": args.max_model_len}
    for flag, value in at_least_one.items():
        if value is not None and value < 1:
            raise ValueError(f"{flag} must be >= 1, got {value}")
    if not 0.0 < args.gpu_memory_utilization <= 1.0:
        raise ValueError(f"--gpu-memory-utilization must be in (0, 1], got {args.gpu_memory_utilization}")


def _check_weights(model: Path) -> None:
    """Weight files complete (safetensors headers against file sizes), before transformers loads them.

    Raises:
        ValueError: a truncated or unreadable safetensors file, or an index naming a missing one.
    """
    if not any(model.glob("*.safetensors")) and not (model / "model.safetensors.index.json").is_file():
        return  # pytorch_model*.bin weights: transformers' own errors apply
    from rlec.megatron.preflight import ConversionInputError, read_safetensors_shapes  # header-only reads; no Megatron import

    try:
        read_safetensors_shapes(model)
    except ConversionInputError as exc:
        raise ValueError(f"--model {model}: {exc}") from None


def main(argv: Sequence[str] | None = None, *, lock: FileLock | None = None) -> int:
    """Entry point of ``python -m rlec.eval.evaluate`` / ``rlec-evaluate``; returns the exit code (see the module docstring).

    Args:
        argv: the command line (default: ``sys.argv[1:]``).
        lock: the held :func:`rlec.io.output_lock` of ``--out``, for a caller that took it before looking at the
            file (:func:`rlec.report.evaluate_final`); it stays held on return. None: ``main`` takes and releases it.

    Raises:
        ValueError: ``lock`` is not ``--out``'s lock (a caller's mistake).
    """
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    out = Path(args.out)
    args.model = str(Path(args.model))  # `--model X/` and `--model X` are one model (and one resume key)
    own = lock is None
    if lock is None:
        lock = output_lock(out, what=f"--out {out}")
    elif lock.path != lock_path(out):
        raise ValueError(f"lock {lock.path} is not the lock of --out {out} ({lock_path(out)})")
    try:  # every input is checked before the model loads
        _check_settings(args)
        targets = parse_targets(args.targets)
        sampling = SamplingSettings(args.temperature, args.top_p, args.max_new_tokens, args.seed, args.top_k)
        items = load_eval_items(args.data, args.limit)
        check_model_folder(args.model, label="--model", weights=("*.safetensors", "pytorch_model*.bin"))
        _check_weights(Path(args.model))
        if out.is_dir():
            raise IsADirectoryError(f"--out {out}: is a folder; expected a record file (JSON Lines), e.g. {out / 'records.jsonl'}")
        check_writable(out, label="--out")
        if own:
            lock.acquire()
        done = existing_record_keys(out, model=args.model, sampling=sampling, resume=args.resume)
    except (ValueError, OSError, LockHeld) as exc:
        if own:
            lock.release()
        print(f"error: {exc}", file=sys.stderr)
        return 2
    import torch

    previous_threads = torch.get_num_threads()
    threads = args.threads or default_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        return _generate(args, items, targets, sampling, out, done)
    except KeyboardInterrupt:  # while the model loads (the generation loop reports its own)
        print(f"\ninterrupted before generation: {out} unchanged", file=sys.stderr)
        return 130
    finally:
        torch.set_num_threads(previous_threads)
        if own:
            lock.release()


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
            items, engine, tokenizer, out, model=args.model, sampling=sampling, targets=targets,
            n_samples=args.n_samples, batch_size=args.batch_size, resume=args.resume, done=done,
        )  # fmt: skip
    except (ValueError, FileExistsError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # e.g. a full disk: the error names the file; completed batches are kept
        print(f"error: {exc}; every completed batch is in {out}: free space, then rerun with --resume", file=sys.stderr)
        return 1
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
