"""Fixed evaluation sets of the verifiable environments: every environment x difficulty, one parquet.

``python -m rlec.data.prepare --environments maze,sorting`` (or ``all``) writes
``<env-output-dir>/test.parquet`` and ``summary.json`` (default ``data/environments``). For each
environment and each difficulty (by default the environment's own ``eval_difficulties``: 0..7,
and for the Maze the Pass@k paper's test sizes 7, 17, 19, 21), ``per_difficulty`` problems with
odd seeds (training rows use even seeds, so no test problem is ever trained on), in the binary
prompt: ``rlec.eval.evaluate`` re-renders every target from ``extra_info.task_text``.

The rows have exactly the columns and ``extra_info`` keys of the static evaluation parquet
(``rlec.data.writer.SCHEMA``), so both can be evaluated, or validated by verl, together.
``extra_info.source`` is ``<env>/d<difficulty>``: ``rlec.eval.metrics`` reports every
(environment, difficulty) group and every environment over its difficulties.
"""

from __future__ import annotations

import json
import random
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
from tqdm.auto import tqdm

from rlec.data.mix import EVAL_TARGET_GRID
from rlec.data.writer import COMPRESSION, ROW_GROUP_ROWS, SUMMARY_FILE, TEST_FILE, atomic_output_dir, rows_table
from rlec.environments import get_environment, parse_environment_names, problem_row
from rlec.io import atomic_write_text

DEFAULT_OUTPUT_DIR = "data/environments"
DEFAULT_PER_DIFFICULTY = 32
FORMAT = "rlec-env-data/1"

__all__ = ["DEFAULT_OUTPUT_DIR", "EnvTestConfig", "build_rows", "format_env_summary", "parse_difficulties",
           "prepare_environments", "test_seeds"]


def parse_difficulties(spec: str) -> tuple[int, ...] | None:
    """``"auto"`` -> None (each environment's own list); ``"0-7"``, ``"1,6,7,8"``, ``"0-3,8"`` -> sorted ints.

    Raises:
        ValueError: a malformed item or a negative difficulty.
    """
    if spec.strip().lower() == "auto":
        return None
    out: set[int] = set()
    for item in (s.strip() for s in spec.split(",")):
        if not item:
            continue
        try:
            lo, _, hi = item.partition("-")
            first, last = int(lo), int(hi) if hi else int(lo)
        except ValueError:
            raise ValueError(f"difficulty list item {item!r}: expected N or A-B with integers >= 0") from None
        if first < 0 or last < first:
            raise ValueError(f"difficulty list item {item!r}: expected 0 <= A <= B")
        out.update(range(first, last + 1))
    if not out:
        raise ValueError(f"empty difficulty list {spec!r}")
    return tuple(sorted(out))


@dataclass(frozen=True)
class EnvTestConfig:
    """What the environment test set holds.

    Attributes:
        environments: registered names (``"all"`` expands to every one).
        difficulties: the difficulties of every environment; None = each environment's
            ``eval_difficulties`` (those above an environment's cap are skipped).
        per_difficulty: problems per (environment, difficulty), >= 1.
        seed: seed of the problem seeds.
        max_prompt_tokens: problems whose prompt (chat template, longest target) is longer are dropped.
    """

    environments: tuple[str, ...] = ("all",)
    difficulties: tuple[int, ...] | None = None
    per_difficulty: int = DEFAULT_PER_DIFFICULTY
    seed: int = 0
    max_prompt_tokens: int = 2048

    def __post_init__(self) -> None:
        object.__setattr__(self, "environments", tuple(parse_environment_names(self.environments)))
        if self.per_difficulty < 1:
            raise ValueError(f"per_difficulty must be >= 1, got {self.per_difficulty}")
        if self.max_prompt_tokens < 1:
            raise ValueError(f"max_prompt_tokens must be >= 1, got {self.max_prompt_tokens}")

    def difficulties_of(self, name: str) -> list[int]:
        """The difficulties tested for environment ``name`` (within its cap)."""
        env = get_environment(name)
        wanted = self.difficulties if self.difficulties is not None else env.eval_difficulties
        return [d for d in wanted if env.max_difficulty is None or d <= env.max_difficulty]


def test_seeds(seed: int, environment: str, difficulty: int, count: int) -> list[int]:
    """``count`` distinct odd problem seeds for one (environment, difficulty), from their own generator."""
    # the stream keeps the name of this module before it moved here, so the same problems are drawn
    rng = random.Random(f"rlec.data.environments/{seed}/{environment}/{difficulty}")
    seeds: list[int] = []
    while len(seeds) < count:
        s = 2 * rng.getrandbits(47) + 1
        if s not in seeds:
            seeds.append(s)
    return seeds


def build_rows(cfg: EnvTestConfig, *, progress: bool = False, skipped: dict[str, int] | None = None) -> list[dict[str, Any]]:
    """The rows of the test set, environment by environment, difficulty by difficulty (binary prompt).

    Problems that do not generate (RLVE-Gym's, within the pool's limit and retries) are left out
    and counted per environment in ``skipped`` when given.
    """
    jobs = [(name, d) for name in cfg.environments for d in cfg.difficulties_of(name)]
    rows: list[dict[str, Any]] = []
    for name, d in tqdm(jobs, desc="generate", unit="difficulty", disable=not progress):
        env = get_environment(name)
        problems = env.generate_many([(s, d) for s in test_seeds(cfg.seed, name, d, cfg.per_difficulty)], raise_failed=False)
        for problem in problems:
            if isinstance(problem, Exception):  # RLVE-Gym: no attempt generated within the pool's limit
                if skipped is not None:
                    skipped[name] = skipped.get(name, 0) + 1
                continue
            rows.append(problem_row(problem, index=len(rows), split="test"))
    return rows


def prepare_environments(out_dir: str | Path, cfg: EnvTestConfig, *, tokenizer: Any | None = None, tokenizer_path: str | None = None,
                         progress: bool = True) -> dict[str, Any]:
    """Build and write the environment test set; return the summary (also ``summary.json``).

    Args:
        out_dir: output folder, replaced atomically (``rlec.data.writer.atomic_output_dir``).
        cfg: environments, difficulties, counts, seed, prompt-token limit.
        tokenizer: a loaded tokenizer (else ``tokenizer_path`` or the bundled Qwen3 tokenizer).
        tokenizer_path: a local tokenizer folder.
        progress: progress bars.

    Raises:
        FileExistsError: ``out_dir`` holds files this command did not write.
        ValueError: bad settings.
    """
    from rlec.data.lengths import PromptLengthCounter

    not_generated: dict[str, int] = {}
    rows = build_rows(cfg, progress=progress, skipped=not_generated)
    if tokenizer is None:
        from rlec.models import load_tokenizer

        tokenizer = load_tokenizer(tokenizer_path)
    counter = PromptLengthCounter(tokenizer, progress=progress)
    tasks = [r["extra_info"]["task_text"] for r in rows]
    longest = counter.longest_target(EVAL_TARGET_GRID)
    lengths = np.maximum(counter(tasks, [None] * len(rows)), counter(tasks, [longest] * len(rows)))
    keep = lengths <= cfg.max_prompt_tokens
    kept = [dict(r, extra_info={**r["extra_info"], "index": i}) for i, r in enumerate(r for r, k in zip(rows, keep) if k)]
    counts: dict[str, dict[str, int]] = defaultdict(dict)
    tokens: dict[str, dict[str, float]] = {}
    dropped = Counter(r["extra_info"]["environment"] for r, k in zip(rows, keep) if not k)
    for name in cfg.environments:
        for d in cfg.difficulties_of(name):
            counts[name][str(d)] = sum(1 for r in kept if r["extra_info"]["environment"] == name and r["extra_info"]["difficulty"] == d)
        mine = lengths[[r["extra_info"]["environment"] == name for r in rows]]
        tokens[name] = {"min": int(mine.min()), "median": float(np.median(mine)), "max": int(mine.max())} if mine.size else {}
    summary = {
        "format": FORMAT,
        "config": asdict(cfg),
        "rows": len(kept),
        "questions": dict(counts),
        "difficulty_scale": {name: get_environment(name).difficulty_scale for name in cfg.environments},
        "prompt_tokens": tokens,
        "dropped_too_long": dict(dropped),
        "not_generated": not_generated,
        "tokenizer": str(getattr(tokenizer, "name_or_path", tokenizer_path)),
    }
    with atomic_output_dir(out_dir) as tmp:
        pq.write_table(rows_table(kept), tmp / TEST_FILE, compression=COMPRESSION, row_group_size=ROW_GROUP_ROWS)
        atomic_write_text(tmp / SUMMARY_FILE, json.dumps(summary, indent=2) + "\n")
    return summary


def format_env_summary(summary: dict[str, Any]) -> str:
    """The summary as a table: questions per environment and difficulty, prompt tokens."""
    questions = summary["questions"]
    lines = [f"{'environment':<17} {'difficulties':<24} {'questions':>9} {'tokens min/med/max':>20}"]
    for name, per in questions.items():
        t = summary["prompt_tokens"].get(name) or {"min": 0, "median": 0, "max": 0}
        ds = ",".join(per)
        lines.append(f"{name:<17} {ds:<24} {sum(per.values()):>9} {t['min']:>6}/{t['median']:>6.0f}/{t['max']:>6}")
    lines.append(f"{'all':<17} {'':<24} {summary['rows']:>9}")
    dropped = summary.get("dropped_too_long") or {}
    lines.append("dropped (prompt too long): " + (", ".join(f"{k} {v}" for k, v in dropped.items()) or "nothing"))
    return "\n".join(lines)
