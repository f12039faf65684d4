"""Data of the local RLEC demo: addition problems as prepared parquet files (the data contract).

``train.parquet`` holds RLEC training rows (a share binary, the rest with a target p on the 0.01
grid), ``test.parquet`` one binary row per held-out question (``rlec.eval.evaluate`` re-renders
every target from ``extra_info.task_text``). Both are written by :func:`rlec.data.writer.to_table`
in the schema of ``docs/data.md`` (source ``math``, graded by the math grader: the gold is the
integer sum).

Held-out: a multi-digit problem belongs to the evaluation set when its text hashes into the
held-out share (:func:`rlec.demo.warm_start.is_held_out`); the warm start and the training rows
skip those problems, so every multi-digit evaluation question is new to the model. One-digit sums
(only 100 exist) are all trained on and are evaluated as the "easy" end of the scale.
"""

from __future__ import annotations

import random
import re
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from rlec.data.mix import BINARY, RLEC, Question, Sample, draw_objectives, stream
from rlec.demo.warm_start import ALWAYS_SEEN_DIGITS, AdditionProblem, addition_problem, is_held_out, training_problem
from rlec.prompts import math_task

_OPERANDS = re.compile(r"What is (\d+) \+ (\d+)\?")


def draw_problems(seed: int, count: int, digits: Sequence[int], *, held_out: bool) -> list[AdditionProblem]:
    """``count`` problems, digit counts uniform over ``digits`` (training) or split evenly (evaluation).

    Training problems (``held_out=False``) are never held out; duplicates are allowed.
    Evaluation problems (``held_out=True``) are held out, except one-digit sums (all 100 of them
    are trained on, :data:`rlec.demo.warm_start.ALWAYS_SEEN_DIGITS`), and unique. Deterministic
    given the arguments.

    Raises:
        ValueError: more evaluation problems of one digit count than exist.
    """
    rng = random.Random(seed)
    if not held_out:
        return [training_problem(rng, digits) for _ in range(count)]
    counts = sorted(set(digits))
    quota = {d: count // len(counts) + (1 if k < count % len(counts) else 0) for k, d in enumerate(counts)}
    out: list[AdditionProblem] = []
    for d in counts:
        seen: set[str] = set()
        for _ in range(200 * quota[d] + 1000):
            if len(seen) == quota[d]:
                break
            problem = addition_problem(rng, d)
            if problem.question not in seen and (d <= ALWAYS_SEEN_DIGITS or is_held_out(problem)):
                seen.add(problem.question)
                out.append(problem)
        else:
            raise ValueError(f"could not draw {quota[d]} distinct evaluation problems with {d}-digit operands")
    return out


def question(problem: AdditionProblem) -> Question:
    """The data-contract question of a problem (source ``math``, question id ``add-<a>+<b>``)."""
    a, b = _OPERANDS.fullmatch(problem.question).groups()  # type: ignore[union-attr]
    return Question(source="math", question_id=f"add-{a}+{b}", task_text=math_task(problem.question), gold=problem.answer)


def training_rows(problems: Sequence[AdditionProblem], *, seed: int, binary_fraction: float = 0.1,
                  target_min: float = 0.01, target_max: float = 0.90,
                  targets: Sequence[float] | None = None) -> list[Sample]:
    """One training row per problem, with objectives and targets drawn as ``rlec.data.prepare`` does.

    ``targets``: draw each RLEC row's p uniformly from this set instead of the 0.01 grid of
    [``target_min``, ``target_max``] (the demo trains at the two targets its goal compares).

    Raises:
        ValueError: a target outside [0, 1).
    """
    stream_ = stream(seed, "demo/targets")
    is_binary, p = draw_objectives(len(problems), binary_fraction, target_min, target_max, stream_)
    if targets is not None:
        if not targets or any(not 0.0 <= t < 1.0 for t in targets):
            raise ValueError(f"targets must be a non-empty list of values in [0, 1), got {list(targets)}")
        p = stream_.choice(np.asarray(targets, dtype=float), size=len(problems))
    return [Sample(question(pr), "train", 0, BINARY if b else RLEC, float(pv))
            for pr, b, pv in zip(problems, is_binary.tolist(), p.tolist())]


def settings(**kwargs: Any) -> dict[str, Any]:
    """The settings of :func:`write_demo_data` as written to ``summary.json`` (lists, not tuples), to compare runs."""
    return {k: list(v) if isinstance(v, (tuple, list)) else v for k, v in kwargs.items()}


def write_demo_data(out_dir: str | Path, *, seed: int = 0, digits: Sequence[int] = (1, 2, 3), train_rows: int = 2000,
                    test_questions: int = 120, binary_fraction: float = 0.1,
                    targets: Sequence[float] | None = None) -> dict[str, Path]:
    """Write ``train.parquet`` and ``test.parquet`` into ``out_dir`` (atomically, as a whole folder).

    Args:
        digits: operand digit counts of the training problems (uniform).
        train_rows: training rows (the sampler cycles through them in seeded epochs).
        test_questions: evaluation questions, split evenly over ``digits``.
        binary_fraction, targets: objectives of the training rows (:func:`training_rows`).

    Returns:
        ``{"train": path, "test": path}``.
    """
    from rlec.data.mix import evaluation_samples
    import json

    from rlec.data.writer import SUMMARY_FILE, TEST_FILE, TRAIN_FILE, atomic_output_dir, write_parquet

    train = draw_problems(seed, train_rows, digits, held_out=False)
    test = draw_problems(seed + 1, test_questions, digits, held_out=True)
    out = Path(out_dir)
    with atomic_output_dir(out) as tmp:
        summary = {"generator": "rlec.demo.data", "settings": settings(seed=seed, digits=digits, train_rows=train_rows,
                   test_questions=test_questions, binary_fraction=binary_fraction, targets=targets)}
        (tmp / SUMMARY_FILE).write_text(json.dumps(summary, indent=1) + "\n")
        write_parquet(training_rows(train, seed=seed, binary_fraction=binary_fraction, targets=targets), tmp / TRAIN_FILE)
        write_parquet(evaluation_samples([question(pr) for pr in test]), tmp / TEST_FILE)
    return {"train": out / TRAIN_FILE, "test": out / TEST_FILE}


def main(argv: Sequence[str] | None = None) -> int:
    """CLI: ``python -m rlec.demo.data --out data/demo`` (see ``--help``); returns the exit status."""
    import argparse
    import sys

    p = argparse.ArgumentParser(prog="python -m rlec.demo.data", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--out", default="data/demo", help="output folder (train.parquet, test.parquet)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--digits", default="1,2,3", help="operand digit counts, comma-separated")
    p.add_argument("--train-rows", type=int, default=2000)
    p.add_argument("--test-questions", type=int, default=120)
    p.add_argument("--binary-fraction", type=float, default=0.1)
    p.add_argument("--targets", default=None, help="comma-separated targets of the RLEC rows (default: uniform on 0.01 ... 0.90)")
    args = p.parse_args(argv)
    try:
        digits = tuple(int(x) for x in args.digits.split(",") if x.strip())
        if not digits or min(digits) < 1 or args.train_rows < 1 or args.test_questions < 1:
            raise ValueError("--digits must list counts >= 1; --train-rows and --test-questions must be >= 1")
        targets = None if args.targets is None else [float(x) for x in args.targets.split(",") if x.strip()]
        paths = write_demo_data(args.out, seed=args.seed, digits=digits, train_rows=args.train_rows,
                                test_questions=args.test_questions, binary_fraction=args.binary_fraction, targets=targets)
    except (ValueError, FileExistsError, NotADirectoryError) as exc:
        print(f"rlec.demo.data: error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {paths['train']} ({args.train_rows} rows) and {paths['test']} ({args.test_questions} held-out questions)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
