"""A fixed pool of one environment's problems: training rows revisited many times, held-out rows, right answers counted.

Pass@k's experiment trains on a small pool of a many-answer task (``pair_sum``) and evaluates held-out problems of
the same task (issue 57 item 5: "a small pool revisited many times", Yue et al. ~56 epochs). :func:`write_pool`
writes, in one atomic folder:

- ``train.parquet``: ``train_rows`` problems in the binary prompt (no target: plain correctness, as the papers),
  difficulties in turn over ``difficulties``, even problem seeds from their own stream (the test set's are odd, so
  no held-out problem is a training row; a prompt can still repeat where the task has few, e.g. pair_sum's d = 0
  has 19);
- ``test.parquet``: ``test_per_difficulty`` problems per difficulty, the environment test set's rows
  (:func:`rlec.environments.testset.build_rows`: odd seeds, binary prompt, ``extra_info.source`` ``<env>/d<d>``);
- ``summary.json``: the settings, and the number of distinct right answers per prompt
  (:meth:`rlec.environments.base.Environment.right_answers`): per split and difficulty min / median / mean / max, and
  per row. :func:`format_pool_summary` prints it.

CLI: ``python -m rlec.environments.pool --environment pair_sum --difficulties 0,1 --out data/pair_sum``.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Sequence

FORMAT = "rlec-env-pool/1"


@dataclass(frozen=True)
class PoolConfig:
    """What a pool holds.

    Attributes:
        environment: a registered environment name.
        difficulties: the difficulties, each >= 0 (training rows cycle through them in order).
        test_per_difficulty: held-out problems per difficulty, >= 1.
    """

    environment: str
    difficulties: tuple[int, ...]
    test_per_difficulty: int = 32

    def __post_init__(self) -> None:
        if not self.difficulties or min(self.difficulties) < 0:
            raise ValueError(f"pool {self.environment!r}: difficulties must be a non-empty list of ints >= 0, "
                             f"got {list(self.difficulties)}")
        if self.test_per_difficulty < 1:
            raise ValueError(f"pool {self.environment!r}: test_per_difficulty must be >= 1, got {self.test_per_difficulty}")


def train_seeds(seed: int, environment: str, difficulty: int, count: int) -> list[int]:
    """``count`` even problem seeds (repeats allowed) for one (environment, difficulty), from their own stream."""
    rng = random.Random(f"rlec.environments.pool/{seed}/{environment}/{difficulty}")
    return [2 * rng.getrandbits(47) for _ in range(count)]


def _answer_figures(counts: Sequence[int | None]) -> dict[str, float | None]:
    import numpy as np

    known = np.array([c for c in counts if c is not None], dtype=float)
    if not len(known):
        return {"rows": len(counts), "min": None, "median": None, "mean": None, "max": None}
    return {"rows": len(counts), "min": float(known.min()), "median": float(np.median(known)), "mean": float(known.mean()),
            "max": float(known.max())}


def pool_rows(cfg: PoolConfig, train_rows: int, seed: int = 0) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The training and held-out rows (verl rows of :func:`rlec.environments.problem_row`, binary prompt).

    Raises:
        ValueError: an unknown environment, a difficulty above its cap, or ``train_rows`` < 1.
    """
    from rlec.environments import get_environment, problem_row
    from rlec.environments.testset import EnvTestConfig, build_rows

    if train_rows < 1:
        raise ValueError(f"pool {cfg.environment!r}: train_rows must be >= 1, got {train_rows}")
    env = get_environment(cfg.environment)
    per = {d: train_seeds(seed, cfg.environment, d, train_rows) for d in cfg.difficulties}
    jobs = [(per[cfg.difficulties[i % len(cfg.difficulties)]][i], cfg.difficulties[i % len(cfg.difficulties)])
            for i in range(train_rows)]
    for d in cfg.difficulties:
        env.check_arguments(0, d)
    train = [problem_row(p, index=i, split="train") for i, p in enumerate(env.generate(s, d) for s, d in jobs)]
    test = build_rows(EnvTestConfig(environments=(cfg.environment,), difficulties=tuple(cfg.difficulties),
                                    per_difficulty=cfg.test_per_difficulty, seed=seed))
    return train, test


def right_answer_counts(rows: Sequence[dict[str, Any]]) -> list[int | None]:
    """Per row, its problem's number of distinct right answers (None where the environment does not count them)."""
    from rlec.environments import get_environment
    from rlec.environments.base import Problem

    out = []
    for row in rows:
        problem = Problem.from_json(row["reward_model"]["ground_truth"])
        out.append(get_environment(problem.environment).right_answers(problem))
    return out


def write_pool(out_dir: str | Path, cfg: PoolConfig, *, train_rows: int, seed: int = 0) -> dict[str, Any]:
    """Write ``train.parquet``, ``test.parquet`` and ``summary.json`` (module docstring) into ``out_dir``, atomically.

    Returns:
        the summary (``summary.json``): settings, row counts, ``right_answers`` per split ({"all" and "d<k>": figures})
        and ``right_answers_per_row`` per split.

    Raises:
        ValueError: bad settings (:func:`pool_rows`); FileExistsError: ``out_dir`` holds files this command did not write.
    """
    import pyarrow.parquet as pq

    from rlec.data.writer import COMPRESSION, ROW_GROUP_ROWS, SUMMARY_FILE, TEST_FILE, TRAIN_FILE, atomic_output_dir, rows_table
    from rlec.io import atomic_write_text

    train, test = pool_rows(cfg, train_rows, seed)
    summary: dict[str, Any] = {"format": FORMAT, "config": {**asdict(cfg), "difficulties": list(cfg.difficulties),
                                                                       "train_rows": train_rows, "seed": seed},
                               "rows": {"train": len(train), "test": len(test)}, "right_answers": {},
                               "right_answers_per_row": {}}
    for split, rows in (("train", train), ("test", test)):
        counts = right_answer_counts(rows)
        figures = {"all": _answer_figures(counts)}
        for d in cfg.difficulties:
            figures[f"d{d}"] = _answer_figures([c for c, r in zip(counts, rows) if r["extra_info"]["difficulty"] == d])
        summary["right_answers"][split] = figures
        summary["right_answers_per_row"][split] = counts
    with atomic_output_dir(out_dir) as tmp:
        for name, rows in ((TRAIN_FILE, train), (TEST_FILE, test)):
            pq.write_table(rows_table(rows), tmp / name, compression=COMPRESSION, row_group_size=ROW_GROUP_ROWS)
        atomic_write_text(tmp / SUMMARY_FILE, json.dumps(summary, indent=1) + "\n")
    return summary


def format_pool_summary(summary: dict[str, Any]) -> str:
    """The distinct right answers per prompt, one line per split and difficulty."""
    cfg = summary["config"]
    lines = [f"{cfg['environment']}: {summary['rows']['train']} training rows, {summary['rows']['test']} held-out rows; "
             "distinct right answers per prompt (min / median / mean / max):"]
    for split, figures in summary["right_answers"].items():
        for group, f in figures.items():
            if f["mean"] is None:
                lines.append(f"  {split} {group}: {f['rows']} rows, not counted by the environment")
            else:
                lines.append(f"  {split} {group}: {f['rows']} rows, {f['min']:.0f} / {f['median']:.1f} / {f['mean']:.1f} / {f['max']:.0f}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point; 2 on bad input (named), else 0."""
    p = argparse.ArgumentParser(prog="python -m rlec.environments.pool", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--environment", required=True, help="a registered environment (pair_sum: many right answers)")
    p.add_argument("--difficulties", default="0,1", help="comma-separated difficulties")
    p.add_argument("--train-rows", type=int, default=256)
    p.add_argument("--test-per-difficulty", type=int, default=32)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True, help="output folder (train.parquet, test.parquet, summary.json)")
    args = p.parse_args(argv)
    try:
        try:
            difficulties = tuple(int(x) for x in args.difficulties.split(",") if x.strip())
        except ValueError:
            raise ValueError(f"--difficulties {args.difficulties!r}: expected comma-separated ints >= 0") from None
        summary = write_pool(args.out, PoolConfig(args.environment, difficulties, args.test_per_difficulty),
                             train_rows=args.train_rows, seed=args.seed)
    except (ValueError, FileExistsError, NotADirectoryError) as exc:
        print(f"rlec.environments.pool: error: {exc}", file=sys.stderr)
        return 2
    print(format_pool_summary(summary))
    print(f"wrote {args.out}/train.parquet, test.parquet, summary.json")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
