"""Measure RLVE-Gym's levels: prompt tokens and costs per difficulty, the source of every cap.

For each environment, level d = 0, 1, ... is generated for :data:`PROBE_SEEDS` in the pool of
:mod:`rlec.environments.gym_pool`, and the largest prompt is counted in tokens as verl will see it
(rlec's template at the longest evaluation target, chat template, the bundled Qwen3 tokenizer).
Levels stop at the first one longer than ``max_tokens`` (that level is kept, so every budget up to
``max_tokens`` has an exact cap), at ``max_level``, or at the first level that does not generate
within the pool's limit, or whose gold answer (first seed) is not accepted (its verifier fails or
passes the limit, or the answer is longer than rlec reads). Per level the gold's verification time
is kept (``verify_ms_levels``). An environment whose own reference answer is rejected at d = 0, or
that does not generate at d = 0, gets a refusal ``status``.

``python -m rlec.environments measure`` writes the result to ``rlec/environments/rlve_gym_levels.json``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

from tqdm.auto import tqdm

from rlec.environments.gym_pool import GenerationFailed, GymPool
from rlec.grading.extract import MAX_TAIL_CHARS
from rlec.environments.rlve_gym import gym_identifiers
from rlec.io import atomic_write_text

__all__ = ["FORMAT", "PROBE_SEEDS", "dumps_levels", "measure_levels"]

FORMAT = "rlec-rlve-gym-levels/1"
PROBE_SEEDS = (1, 3)
MAX_ANSWER_CHARS = MAX_TAIL_CHARS - 100  # rlec reads the answer from the response's last 8,192 characters


def measure_levels(identifiers: Sequence[str] | None = None, *, max_tokens: int = 8192, max_level: int = 40,
                   pool: GymPool | None = None, tokenizer: Any | None = None, progress: bool = True,
                   out: str | Path | None = None) -> dict[str, Any]:
    """The level table of ``identifiers`` (default: all 400).

    Args:
        identifiers: RLVE-Gym identifiers.
        max_tokens: levels stop after the first one whose largest prompt exceeds this (tokens).
        max_level: the last level measured.
        pool: the worker pool (default: a new one with a 10 s limit per task and 1 attempt).
        tokenizer: default the bundled Qwen3 tokenizer.
        out: a JSON file rewritten (atomically) after every level, so an interrupted run keeps its levels.

    Returns:
        ``{"format", "max_tokens", "seeds", "environments": {identifier: {"tokens": [per level],
        "gen_ms": [per level, mean], "verify_ms": d = 0's, "verify_ms_levels": [per level, gold of
        the first seed], "gold": "accepted" | "none" | "rejected", "status": "ok" | reason,
        "stopped": why the levels end early (absent otherwise)}}}``.
    """
    from rlec.data.lengths import PromptLengthCounter
    from rlec.data.mix import EVAL_TARGET_GRID

    if tokenizer is None:
        from rlec.models import load_tokenizer

        tokenizer = load_tokenizer(None)
    counter = PromptLengthCounter(tokenizer, progress=False)
    longest = counter.longest_target(EVAL_TARGET_GRID)
    own = pool is None
    pool = pool or GymPool(attempts=1)
    names = list(identifiers or gym_identifiers())
    table: dict[str, dict[str, Any]] = {n: {"tokens": [], "gen_ms": [], "verify_ms": None, "verify_ms_levels": [],
                                            "gold": "none", "status": "ok"} for n in names}
    active = list(names)
    bar = tqdm(total=len(names), desc="rlve_gym levels", unit="env", disable=not progress)
    try:
        for d in range(max_level + 1):
            if not active:
                break
            jobs = [(n, s, d) for n in active for s in PROBE_SEEDS]
            results = pool.generate_many(jobs)
            by_env: dict[str, list[Any]] = {}
            for (n, _, _), r in zip(jobs, results):
                by_env.setdefault(n, []).append(r)
            golds = [(n, rs[0]) for n, rs in by_env.items() if not isinstance(rs[0], GenerationFailed) and rs[0]["answer"]]
            scores = pool.score_many([(n, d, {k: r[k] for k in ("index", "gym_seed", "threshold", "config")}, r["answer"])
                                      for n, r in golds])
            gold_failed: dict[str, str] = {}
            for (n, r), sc in zip(golds, scores):
                ok = not isinstance(sc, str) and sc[0] >= sc[1]
                if not isinstance(sc, str):
                    table[n]["verify_ms_levels"].append(round(1000 * sc[2], 3))
                if len(r["answer"]) > MAX_ANSWER_CHARS:
                    ok, sc = False, f"its answer has {len(r['answer'])} characters > {MAX_ANSWER_CHARS}, rlec's answer window"
                if d == 0:
                    table[n]["verify_ms"] = table[n]["verify_ms_levels"][0] if table[n]["verify_ms_levels"] else None
                    table[n]["gold"] = "accepted" if ok else "rejected"
                    if not ok:
                        table[n]["status"] = f"its reference answer is rejected by its own verifier at d=0 ({sc})"
                elif not ok:
                    gold_failed[n] = str(sc)
            still = []
            for n in active:
                rs = by_env[n]
                failed = [r for r in rs if isinstance(r, GenerationFailed)]
                if n in gold_failed:  # this level is not usable: the levels end below it
                    table[n]["stopped"] = f"d{d}: gold not accepted ({gold_failed[n][:200]})"
                    if len(table[n]["verify_ms_levels"]) > d:
                        table[n]["verify_ms_levels"].pop()
                    bar.update(1)
                    continue
                if failed:
                    if d == 0:
                        table[n]["status"] = f"does not generate at d=0: {failed[0].reasons[0]}"
                    bar.update(1)
                    continue
                tokens = counter([r["prompt"] for r in rs], [longest] * len(rs))
                table[n]["tokens"].append(int(max(tokens)))
                table[n]["gen_ms"].append(round(1000 * sum(r["seconds"] for r in rs) / len(rs), 3))
                if max(tokens) > max_tokens or d == max_level or table[n]["status"] != "ok":
                    bar.update(1)
                    continue
                still.append(n)
            active = still
            if out is not None:
                atomic_write_text(out, dumps_levels(_result(table, max_tokens, d)))
    finally:
        bar.close()
        if own:
            pool.close()
    return _result(table, max_tokens, max_level)


def dumps_levels(result: dict[str, Any]) -> str:
    """The level table as JSON text: sorted keys, one environment per line (diff-friendly, compact)."""
    head = {k: v for k, v in result.items() if k != "environments"}
    lines = [f"  {json.dumps(name)}: {json.dumps(entry, sort_keys=True, separators=(',', ':'))}"
             for name, entry in sorted(result["environments"].items())]
    body = json.dumps(head, sort_keys=True)[:-1]
    return body + ', "environments": {\n' + ",\n".join(lines) + "\n}}\n"


def _result(table: dict[str, Any], max_tokens: int, level: int) -> dict[str, Any]:
    return {"format": FORMAT, "max_tokens": max_tokens, "seeds": list(PROBE_SEEDS), "levels_done": level,
            "environments": table}
