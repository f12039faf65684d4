"""``python -m rlec.data.prepare`` (also ``rlec-prepare-data``): build rlec's verl parquet files.

Reads DAPO-Math and HotpotQA, de-duplicates, holds out an evaluation set, selects and mixes the
training questions, drops HotpotQA paragraphs (seeded), draws targets, filters long prompts and
writes ``train.parquet``, ``test.parquet`` and ``summary.json`` to the output folder in one
atomic step. With nothing set it runs on the shipped samples and the bundled Qwen3 tokenizer.
Documentation: ``docs/data.md``.

With ``--environments NAMES`` it writes the fixed evaluation set of the verifiable environments
instead (``rlec.environments.testset``; docs/environments.md).

An input that yields nothing is an error naming it, never an empty or lopsided output: an empty
file (``[]``, zero bytes) of a source the mix asks for, a file whose every row was skipped as
invalid, a source whose training pool is empty, a source that ``--max-prompt-tokens`` removes
from a split entirely, and a split with nothing in it (both training sizes 0, both test sizes 0).
Exit status: 0 success; 2 bad input or an unwritable output folder (one line, nothing written).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, fields
from functools import partial
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np

from rlec.environments import testset as env_data
from rlec.data.dedup import dedupe_within, remove_overlap
from rlec.data.hotpot_modify import DEFAULT_WEIGHTS, SCHEMES, check_weights, modify
from rlec.data.lengths import PromptLengthCounter
from rlec.data.mix import EVAL_TARGET_GRID, MixConfig, Question, Sample, math_test_count, draw_without_replacement, split_held_out, stream, evaluation_samples, training_samples
from rlec.data.readers import DataError, InvalidRows, file_sha256
from rlec.data.sources import HotpotItem, MathItem, load_items, parse_hotpot, parse_math
from rlec.data.summary import build_summary, format_summary
from rlec.data.writer import SUMMARY_FILE, TEST_FILE, TRAIN_FILE, atomic_output_dir, check_output_dir, write_parquet
from rlec.prompts import math_task, qa_task

log = logging.getLogger("rlec.data")
SAMPLES_DIR = Path(__file__).resolve().parent / "samples"
SAMPLE_FILES = {
    "dapo": SAMPLES_DIR / "dapo_math_sample.jsonl",
    "hotpot_train": SAMPLES_DIR / "hotpot_train_sample.json",
    "hotpot_test": SAMPLES_DIR / "hotpot_test_sample.json",
}
ENV = {"dapo": "DAPO_JSON", "hotpot_train": "HOTPOT_TRAIN_JSON", "hotpot_test": "HOTPOT_TEST_JSON", "tokenizer": "TOKENIZER_PATH", "output_dir": "DATA_DIR",
       "env_output_dir": "ENV_DATA_DIR"}
DEFAULT_OUTPUT_DIR = "data/processed"
DEFAULT_MAX_PROMPT_TOKENS = 2048


@dataclass(frozen=True)
class PrepareOptions:
    """Everything besides the mix counts (:class:`~rlec.data.mix.MixConfig`)."""

    dapo: Path = SAMPLE_FILES["dapo"]
    hotpot_train: Path = SAMPLE_FILES["hotpot_train"]
    hotpot_test: Path = SAMPLE_FILES["hotpot_test"]
    tokenizer: str | None = None
    max_prompt_tokens: int = DEFAULT_MAX_PROMPT_TOKENS
    drop_weights: tuple[float, ...] = DEFAULT_WEIGHTS
    drop_paragraphs: bool = True
    skip_invalid: bool = False
    progress: bool = True


@contextmanager
def _stage(name: str) -> Iterator[None]:
    start = time.perf_counter()
    yield
    log.info("%-28s %6.1f s", name, time.perf_counter() - start)


def _check_loaded(path: Path, loaded: Any, needed: bool) -> None:
    """An input file a requested source reads must give at least one valid record."""
    if not needed:
        return
    if loaded.rows_read == 0:
        raise DataError(path, "no records (an empty file or an empty list); the mix asks for this source")
    if not loaded.items:
        raise DataError(path, f"no valid records: all {loaded.rows_read} rows were skipped as invalid "
                              "(run without --skip-invalid to see the first one)")


def _check_splits(mix: MixConfig) -> None:
    if mix.math_train_size == 0 and mix.hotpot_train_size == 0:
        raise ValueError("the training split would be empty: --math-train-size and --hotpot-train-size are both 0")
    if mix.math_test_size == 0 and mix.hotpot_test_size == 0:
        raise ValueError("the test split would be empty: --math-test-size and --hotpot-test-size are both 0")


def _check_length_filter(split: str, rows: Sequence[Sample], lengths: np.ndarray, keep: np.ndarray, limit: int) -> None:
    """A source present in a split before the length filter must keep at least one row."""
    for src in sorted({s.question.source for s in rows}):
        mine = np.array([s.question.source == src for s in rows])
        if not keep[mine].any():
            raise ValueError(
                f"{split} split: all {int(mine.sum())} {src} rows are longer than --max-prompt-tokens {limit} "
                f"(shortest {int(lengths[mine].min())} tokens, chat template applied); raise --max-prompt-tokens"
            )


def _questions_math(items: Sequence[MathItem]) -> list[Question]:
    return [Question("math", m.question_id, math_task(m.problem), m.answer) for m in items]


def _questions_hotpot(items: Sequence[HotpotItem], opts: PrepareOptions, seed: int) -> list[Question]:
    out = []
    for h in items:
        mod = modify(h, seed, opts.drop_weights, enabled=opts.drop_paragraphs)
        out.append(Question("hotpotqa", h.question_id, qa_task(h.question, mod.context), h.answer, mod.drop_scheme, mod.dropped_titles))
    return out


def prepare(
    out_dir: str | os.PathLike[str],
    mix: MixConfig = MixConfig(),
    opts: PrepareOptions = PrepareOptions(),
    *,
    tokenizer: Any | None = None,
) -> dict[str, Any]:
    """Build and write the training and evaluation sets; return the summary.

    Args:
        out_dir: output folder; replaced atomically (see :func:`rlec.data.writer.atomic_output_dir`).
        mix: counts, ratios and the seed.
        opts: inputs, tokenizer path, length limit, paragraph dropping, bad-row handling.
        tokenizer: an already loaded tokenizer (overrides ``opts.tokenizer``; saves the load).

    Returns:
        The summary dict (also written as ``summary.json``).

    Raises:
        FileNotFoundError: an input file or the tokenizer is missing.
        DataError: a bad input row (without ``skip_invalid``), naming file, row and key; an input
            file that gives no valid record for a source the mix asks for.
        FileExistsError: ``out_dir`` holds files this command did not write.
        NotADirectoryError, PermissionError: ``out_dir`` cannot be written (checked first).
        ValueError: bad option values; an empty split, or a source emptied from a split (its
            training pool, or every row removed by the length filter); the message names it.
    """
    check_weights(opts.drop_weights)
    if opts.max_prompt_tokens < 1:
        raise ValueError(f"max_prompt_tokens must be >= 1, got {opts.max_prompt_tokens}")
    _check_splits(mix)
    check_output_dir(out_dir)
    warnings: list[str] = []

    def warn(msg: str) -> None:
        log.warning(msg)
        warnings.append(msg)

    # 1. read and validate
    invalid = InvalidRows()
    load = partial(load_items, skip_invalid=opts.skip_invalid, invalid=invalid)
    with _stage("read and validate inputs"):
        math_in = load(opts.dapo, parse_math)
        parse_hp = partial(parse_hotpot, require_supporting=opts.drop_paragraphs)
        hp_train_in, hp_test_in = load(opts.hotpot_train, parse_hp), load(opts.hotpot_test, parse_hp)
    _check_loaded(opts.dapo, math_in, mix.math_train_size > 0 or mix.math_test_size > 0)
    _check_loaded(opts.hotpot_train, hp_train_in, mix.hotpot_train_size > 0)
    _check_loaded(opts.hotpot_test, hp_test_in, mix.hotpot_test_size != 0)

    # 2. de-duplicate within each file, then across the split
    math_items, math_dd = dedupe_within(math_in.items, lambda m: m.problem, lambda m: m.answer)
    hp_train, hp_train_dd = dedupe_within(hp_train_in.items, lambda h: h.question, lambda h: h.answer)
    hp_test, hp_test_dd = dedupe_within(hp_test_in.items, lambda h: h.question, lambda h: h.answer)
    n_math_test = math_test_count(len(math_items), mix.math_test_size, mix.math_test_max_fraction)
    math_pool, math_test = split_held_out(math_items, n_math_test, stream(mix.seed, "split/math"))
    if mix.hotpot_test_size is not None and mix.hotpot_test_size < len(hp_test):
        _, hp_test = split_held_out(hp_test, mix.hotpot_test_size, stream(mix.seed, "split/hotpotqa-test"))
    hp_pool, cross_split = remove_overlap(hp_train, hp_test, lambda h: h.question, lambda h: h.question_id)

    # 3. select training questions
    selected: dict[str, list[Any]] = {}
    for src, pool, n in (("math", math_pool, mix.math_train_size), ("hotpotqa", hp_pool, mix.hotpot_train_size)):
        if n > 0 and not pool:
            why = {"math": f"{len(math_items)} unique problems, {len(math_test)} held out for the test split",
                   "hotpotqa": f"{len(hp_train)} unique questions, {cross_split} of them also in the test file"}[src]
            flag = "--math-train-size" if src == "math" else "--hotpot-train-size"
            raise ValueError(f"{src}: the training pool is empty ({why}); add questions or set {flag} 0")
        if len(pool) < n:
            warn(f"{src}: {n} training questions requested but only {len(pool)} available; taking all of them")
        selected[src] = draw_without_replacement(pool, n, stream(mix.seed, f"select/{src}"))  # the stream keeps its name: same draws

    # 4. prompts, repeats, targets
    with _stage("drop paragraphs, draw targets"):
        train = training_samples(
            {"math": _questions_math(selected["math"]), "hotpotqa": _questions_hotpot(selected["hotpotqa"], opts, mix.seed)}, mix
        )
        test = evaluation_samples(_questions_hotpot(hp_test, opts, mix.seed) + _questions_math(math_test))
    if mix.math_test_size > 0 and not math_test:
        warn(f"math: no problem held out for the test split ({len(math_items)} unique problems x --math-test-max-fraction "
             f"{mix.math_test_max_fraction} < 1)")
    if not test:
        raise ValueError("the test split is empty: no HotpotQA test question and no held-out math problem")

    # 5. length filter (chat template applied); test prompts must fit with any target stated
    if tokenizer is None:
        from rlec.models import load_tokenizer

        with _stage("load tokenizer"):
            tokenizer = load_tokenizer(opts.tokenizer)
    counter = PromptLengthCounter(tokenizer, progress=opts.progress)
    with _stage("count prompt tokens"):
        train_len = counter([s.question.task_text for s in train], [s.prompt_target for s in train])
        test_tasks = [s.question.task_text for s in test]
        p_long = counter.longest_target(EVAL_TARGET_GRID)
        test_len = np.maximum(counter(test_tasks, [None] * len(test)), counter(test_tasks, [p_long] * len(test)))
    train_keep, test_keep = train_len <= opts.max_prompt_tokens, test_len <= opts.max_prompt_tokens
    too_long = {
        split: {src: int(sum(1 for s, k in zip(rows, keep) if not k and s.question.source == src)) for src in ("math", "hotpotqa")}
        for split, rows, keep in (("train", train, train_keep), ("test", test, test_keep))
    }
    _check_length_filter("train", train, train_len, train_keep, opts.max_prompt_tokens)
    _check_length_filter("test", test, test_len, test_keep, opts.max_prompt_tokens)
    train_out: list[Sample] = [s for s, k in zip(train, train_keep) if k]
    test_out: list[Sample] = [s for s, k in zip(test, test_keep) if k]

    # 6. write atomically
    summary = build_summary(
        train=train_out,
        train_lengths=train_len[train_keep],
        test=test_out,
        test_lengths=test_len[test_keep],
        target_range=(mix.target_min, mix.target_max),
        format="rlec-data/1",
        config={
            **asdict(mix),
            **{k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(opts).items() if k != "progress"},
            "drop_weights": dict(zip(SCHEMES, check_weights(opts.drop_weights))),
        },
        tokenizer=str(getattr(tokenizer, "name_or_path", opts.tokenizer)),
        inputs={
            name: {"path": str(path), "sha256": file_sha256(path), "rows_read": loaded.rows_read, "valid_unique_ids": len(loaded.items)}
            for name, path, loaded in (("dapo", opts.dapo, math_in), ("hotpot_train", opts.hotpot_train, hp_train_in), ("hotpot_test", opts.hotpot_test, hp_test_in))
        },
        questions={
            "math": {"unique": len(math_items), "held_out": len(math_test), "train_pool": len(math_pool), "train_selected": len(selected["math"])},
            "hotpotqa": {
                "train_unique": len(hp_train),
                "test": len(hp_test),
                "train_pool": len(hp_pool),
                "train_selected": len(selected["hotpotqa"]),
            },
        },
        dropped={
            "invalid_rows": invalid.total,
            "duplicate_id_rows": math_in.duplicate_rows + hp_train_in.duplicate_rows + hp_test_in.duplicate_rows,
            "duplicate_text": sum(x.repeated_content for x in (math_in, hp_train_in, hp_test_in))
            + math_dd.duplicate_text + hp_train_dd.duplicate_text + hp_test_dd.duplicate_text,
            "conflicting_gold": math_dd.conflicting_gold + hp_train_dd.conflicting_gold + hp_test_dd.conflicting_gold,
            "cross_split_duplicates": cross_split,
            "too_long_train_rows": sum(too_long["train"].values()),
            "too_long_test_questions": sum(too_long["test"].values()),
            "too_long_by_source": too_long,
            "invalid_detail": invalid.to_dict(),
        },
        length_counting={"method": counter.method, "checked_rows": counter.checked_rows, "max_prompt_tokens": opts.max_prompt_tokens},
        warnings=warnings,
    )
    with _stage("write parquet"), atomic_output_dir(out_dir) as tmp:
        write_parquet(train_out, tmp / TRAIN_FILE)
        write_parquet(test_out, tmp / TEST_FILE)
        (tmp / SUMMARY_FILE).write_text(json.dumps(summary, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return summary


def _weights(text: str) -> tuple[float, ...]:
    try:
        return check_weights([float(x) for x in text.split(",")])
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def build_parser(env: dict[str, str] | None = None) -> argparse.ArgumentParser:
    """The command-line parser; defaults come from the environment variables, then the samples."""
    env = dict(os.environ if env is None else env)

    def from_env(key: str, default: Any) -> Any:
        return env.get(ENV[key]) or default

    def shown(key: str, default: str) -> str:
        value = env.get(ENV[key])
        return f"[{ENV[key]}; now {value}]" if value else f"[{ENV[key]}; default {default}]"

    p = argparse.ArgumentParser(
        prog="python -m rlec.data.prepare",
        description=(
            "Build rlec's verl parquet files: DAPO-Math + modified HotpotQA, repeated with freshly drawn "
            "confidence targets, plus an evaluation set (HotpotQA test file + held-out math slice). "
            "With no inputs set it uses the shipped samples and the bundled Qwen3 tokenizer. See docs/data.md."
        ),
    )
    g = p.add_argument_group("inputs and output (environment variable in brackets; a flag wins)")
    g.add_argument("--dapo", type=Path, metavar="PATH", default=Path(from_env("dapo", SAMPLE_FILES["dapo"])),
                   help=f"DAPO-Math rows or plain {{problem, answer}} records, .json/.jsonl/.parquet {shown('dapo', 'the shipped sample')}")
    g.add_argument("--hotpot-train", type=Path, metavar="PATH", default=Path(from_env("hotpot_train", SAMPLE_FILES["hotpot_train"])),
                   help=f"HotpotQA training file {shown('hotpot_train', 'the shipped sample')}")
    g.add_argument("--hotpot-test", type=Path, metavar="PATH", default=Path(from_env("hotpot_test", SAMPLE_FILES["hotpot_test"])),
                   help=f"HotpotQA evaluation file, e.g. the dev distractor set {shown('hotpot_test', 'the shipped sample')}")
    g.add_argument("--tokenizer", metavar="PATH", default=from_env("tokenizer", None),
                   help=f"local tokenizer or model folder {shown('tokenizer', 'the bundled Qwen3 tokenizer')}")
    g.add_argument("--output-dir", type=Path, metavar="DIR", default=Path(from_env("output_dir", DEFAULT_OUTPUT_DIR)),
                   help=f"folder for train.parquet, test.parquet, summary.json, replaced atomically {shown('output_dir', DEFAULT_OUTPUT_DIR)}")
    d = MixConfig()
    g = p.add_argument_group("mix")
    g.add_argument("--math-train-size", type=int, metavar="N", default=d.math_train_size, help=f"math questions selected for training (default {d.math_train_size})")
    g.add_argument("--hotpot-train-size", type=int, metavar="N", default=d.hotpot_train_size, help=f"HotpotQA questions selected for training (default {d.hotpot_train_size})")
    g.add_argument("--repeats", type=int, metavar="N", default=d.repeats, help=f"copies of each training question, each with fresh targets (default {d.repeats})")
    g.add_argument("--binary-fraction", type=float, metavar="F", default=d.binary_fraction,
                   help=f"share of training rows, per source and repeat, with the binary objective: p = 0, no target in the prompt (default {d.binary_fraction})")
    g.add_argument("--target-min", type=float, metavar="P", default=d.target_min, help=f"lowest target of RLEC rows (default {d.target_min})")
    g.add_argument("--target-max", type=float, metavar="P", default=d.target_max, help=f"highest target of RLEC rows; p is uniform on the 0.01 grid of [min, max], 0 excluded (default {d.target_max})")
    g.add_argument("--math-test-size", type=int, metavar="N", default=d.math_test_size,
                   help=f"held-out math questions for evaluation, at most --math-test-max-fraction of the unique problems (default {d.math_test_size})")
    g.add_argument("--math-test-max-fraction", type=float, metavar="F", default=d.math_test_max_fraction,
                   help=f"cap of the held-out math slice (default {d.math_test_max_fraction}: 8 of the 42 samples, 500 of DAPO-Math-17k)")
    g.add_argument("--hotpot-test-size", type=int, metavar="N", default=None, help="HotpotQA evaluation questions kept, a seeded subset (default: all)")
    g.add_argument("--seed", type=int, default=d.seed, help=f"seed of every random choice (default {d.seed})")
    g = p.add_argument_group("filters and HotpotQA modification")
    g.add_argument("--max-prompt-tokens", type=int, metavar="N", default=DEFAULT_MAX_PROMPT_TOKENS,
                   help=f"drop prompts longer than this, chat template applied (default {DEFAULT_MAX_PROMPT_TOKENS})")
    g.add_argument("--drop-weights", type=_weights, metavar="W,W,W,W", default=DEFAULT_WEIGHTS,
                   help=f"probabilities of the paragraph-drop schemes {', '.join(SCHEMES)} (default {','.join(map(str, DEFAULT_WEIGHTS))})")
    g.add_argument("--no-drop-paragraphs", dest="drop_paragraphs", action="store_false", help="take HotpotQA contexts as given (already modified inputs)")
    g.add_argument("--skip-invalid", action="store_true", help="skip bad input rows, counted in the summary, instead of stopping")
    g.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bars")
    g = p.add_argument_group("verifiable environments (RLVE): --environments writes their evaluation set instead")
    g.add_argument("--environments", metavar="NAMES", default=None,
                   help="comma-separated environment names or 'all': write the fixed test set of every environment x "
                        "difficulty to --env-output-dir (no DAPO/HotpotQA work; docs/environments.md)")
    g.add_argument("--env-difficulties", metavar="SPEC", default="auto",
                   help="difficulties per environment, e.g. 0-7 or 1,6,7,8; 'auto' = each environment's own list "
                        "(0-7; the Maze: 1,6,7,8 = sizes 7,17,19,21) (default auto)")
    g.add_argument("--env-per-difficulty", type=int, metavar="N", default=env_data.DEFAULT_PER_DIFFICULTY,
                   help=f"problems per environment and difficulty (default {env_data.DEFAULT_PER_DIFFICULTY})")
    g.add_argument("--env-output-dir", type=Path, metavar="DIR", default=Path(from_env("env_output_dir", env_data.DEFAULT_OUTPUT_DIR)),
                   help=f"folder for the environment test.parquet and summary.json {shown('env_output_dir', env_data.DEFAULT_OUTPUT_DIR)}")
    return p


def _from_args(cls: type, args: argparse.Namespace) -> Any:
    """``cls`` built from the command-line options of the same names (every field is an option)."""
    return cls(**{f.name: getattr(args, f.name) for f in fields(cls)})


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m rlec.data.prepare`` / ``rlec-prepare-data``. Returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    if args.environments is not None:
        return _main_environments(parser, args)
    try:
        mix = _from_args(MixConfig, args)
    except ValueError as exc:
        parser.error(str(exc))
    opts = _from_args(PrepareOptions, args)
    start = time.perf_counter()
    try:
        summary = prepare(args.output_dir, mix, opts)
    except (DataError, OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"\ninterrupted: nothing written to {args.output_dir}", file=sys.stderr)
        return 130
    print(format_summary(summary))
    print(f"wrote {args.output_dir}/{{{TRAIN_FILE}, {TEST_FILE}, {SUMMARY_FILE}}} in {time.perf_counter() - start:.1f} s")
    return 0


def _main_environments(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """``--environments``: write the environments' evaluation set (rlec.environments.testset)."""
    try:
        cfg = env_data.EnvTestConfig(environments=tuple(args.environments.split(",")),
                                     difficulties=env_data.parse_difficulties(args.env_difficulties),
                                     per_difficulty=args.env_per_difficulty, seed=args.seed,
                                     max_prompt_tokens=args.max_prompt_tokens)
    except ValueError as exc:
        parser.error(str(exc))
    start = time.perf_counter()
    try:
        summary = env_data.prepare_environments(args.env_output_dir, cfg, tokenizer_path=args.tokenizer, progress=args.progress)
    except (FileNotFoundError, FileExistsError, NotADirectoryError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(env_data.format_env_summary(summary))
    print(f"wrote {args.env_output_dir}/{{{TEST_FILE}, {SUMMARY_FILE}}} in {time.perf_counter() - start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
