"""Reward throughput: rlec's grader vs verl's own graders on one seeded, generated batch.

    python benchmarks/reward_throughput.py                 # 4,096 responses, 1% pathological
    python benchmarks/reward_throughput.py --n 1024 --json out.json

The batch mixes math (DAPO-style integer / fraction / radical / tuple answers) and HotpotQA-style
QA responses, in ``\\boxed{}`` and ``Answer:`` forms, with equivalent rewritings (``1,000``,
``\\dfrac``, ``x = 2``, unreduced fractions, decimals), wrong answers (sign flips, swapped pairs,
``Answer: 3, 5`` for 35, partial entity names), abstentions and format failures. Every item
carries its expected verdict, known by construction (mathematical truth; HotpotQA EM for QA).

Graders compared:
- rlec: ``rlec.grading.grade_batch`` (exact/number/radical/tuple fast path, the hostile-input
  screen, then math-verify in a warm pebble pool with a hard per-item timeout); the summary line
  says how many items each path decided;
- verl math_dapo: ``verl.utils.reward_score.math_dapo.compute_score`` (string normalisation);
- verl math-verify: ``verl.utils.reward_score.math_verify.compute_score`` (spawned pool, one item
  at a time, 30 s limit, stuck workers are not killed).
verl ships no HotpotQA grader for boxed answers, so its QA column uses verl's own pieces:
``math_dapo.last_boxed_only_string`` + ``search_r1_like_qa_em.em_check``.

Agreement is binary (correct vs not correct) so the three graders are comparable; rlec's
three-way agreement (abstain kept apart) is printed too. Throughput is measured on the batch as
each grader is used in training (rlec: one batch call; verl: one call per response, as its reward
managers do). Latency percentiles come from a second, sequential pass for rlec. Each verl grader
runs under a wall-clock budget (``--budget-s``): a grader whose workers jam is reported as not
finishing, with the items it graded.

Console: one progress bar per pass (tqdm, on stderr; ``--no-progress`` turns them off). Third-party
logging is kept off the console: math-verify logs every input it times out on (hundreds of kB on
this batch), from verl's worker processes, which write straight to file descriptor 2. While the verl
graders run, descriptor 2 is redirected to a temporary file (the workers inherit it) and the
parent's third-party loggers are set to ERROR; ``--verbose`` prints the captured text afterwards.

Timeouts, counted honestly: rlec's column counts items its pool stopped at ``--timeout-s``. verl's
math-verify wrapper has two kinds: a call past its 30 s future limit (the parent sees it), and
math-verify's own parse / comparison timeouts inside its workers, which it turns into a verdict of
"not equal" without telling the caller; the second kind is counted from math-verify's log records
("Timeout during parsing" / "Timeout during comparison") in the captured worker output.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import logging
import math
import os
import random
import re
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, TextIO

from tqdm import tqdm

# the loggers of the libraries the graders call; ERROR and above still reach the console
THIRD_PARTY_LOGGERS = ("math_verify", "latex2sympy2_extended", "sympy", "verl")
# math-verify's own timeout records (math_verify/parser.py "Timeout during parsing: <input>",
# math_verify/grader.py "Timeout during comparison")
_MV_TIMEOUT_RE = re.compile(r"Timeout during (?:parsing|comparison)")

FILLER = [
    "Let me work through this carefully.", "First, restate the problem in my own words.",
    "We can simplify the expression step by step.", "Checking the arithmetic again gives the same value.",
    "Consider the two cases separately.", "The paragraphs mention the relevant facts.",
    "Substituting back confirms the result.", "This matches the constraint in the question.",
]
ENTITIES = [
    "Eiffel Tower", "Marie Curie", "Lake Baikal", "The Hague", "Saint Petersburg", "Ada Lovelace",
    "Mount Kilimanjaro", "Nile River", "Isaac Newton", "Great Barrier Reef", "Kyoto", "Amazon River",
]


@dataclass(frozen=True)
class Item:
    """One benchmark response with its expected verdict ("correct" | "incorrect" | "abstain")."""

    response: object
    gold: str
    data_source: str
    expected: str
    kind: str


def _wrap(rng: random.Random, answer: str, style: str) -> str:
    reasoning = " ".join(rng.choice(FILLER) for _ in range(rng.randint(3, 8)))
    if style == "boxed":
        return f"{reasoning}\nTherefore the final answer is \\boxed{{{answer}}}."
    return f"{reasoning}\nAnswer: {answer}"


def _math_item(rng: random.Random) -> tuple[str, str, str]:
    """(gold, answer text, expected) for one math response."""
    kind = rng.choice(["int", "int", "frac", "sqrt", "pair"])
    if kind == "int":
        n = rng.choice([rng.randint(0, 99), rng.randint(100, 999_999), -rng.randint(1, 500)])
        gold = str(n)
        right = [gold, f"{n:,}", f"x = {n}", f"\\text{{{n}}}", f"{n}.0"] if n >= 1000 else [gold, f"x = {n}", f"\\text{{{n}}}", f"{n}.0"]
        wrong = [str(n + 1), str(n - 7), str(n * 10 + 3)] + ([str(-n)] if n else [])
        if 10 <= n <= 99:
            wrong.append(f"{str(n)[0]}, {str(n)[1]}")  # "Answer: 3, 5" for 35
    elif kind == "frac":
        b = rng.choice([2, 3, 4, 5, 7, 8, 9, 11, 16, 20])
        a = rng.choice([k for k in range(1, 3 * b) if math.gcd(k, b) == 1])
        k = rng.randint(2, 5)
        gold = f"\\frac{{{a}}}{{{b}}}"
        right = [gold, f"\\dfrac{{{a}}}{{{b}}}", f"\\frac{{{k * a}}}{{{k * b}}}", f"{a}/{b}"]
        if 100 % b == 0 or b in (8, 16):
            right.append(repr(a / b))  # terminating decimal
        wrong = [f"\\frac{{{a + 1}}}{{{b}}}", f"\\frac{{{a}}}{{{b + 1}}}"] + ([f"\\frac{{{b}}}{{{a}}}"] if a != b else [])
    elif kind == "sqrt":
        m, c = rng.choice([2, 3, 5, 6, 7]), rng.randint(2, 6)
        gold = f"{c}\\sqrt{{{m}}}"
        right = [gold, f"\\sqrt{{{c * c * m}}}", f"{c} \\sqrt{{{m}}}"]
        wrong = [f"{c}\\sqrt{{{m + 1}}}", f"{c + 1}\\sqrt{{{m}}}", f"\\sqrt{{{c * m}}}"]
    else:
        a, b = rng.sample(range(-9, 10), 2)
        gold = f"({a},{b})"
        right = [gold, f"({a}, {b})", f"\\left({a}, {b}\\right)"]
        wrong = [f"({b},{a})", f"({a},{b + 1})"]
    if rng.random() < 0.55:
        return gold, rng.choice(right), "correct"
    return gold, rng.choice(wrong), "incorrect"


def _qa_item(rng: random.Random) -> tuple[str, str, str]:
    if rng.random() < 0.3:
        gold = rng.choice(["yes", "no"])
        if rng.random() < 0.55:
            return gold, rng.choice([gold, gold.capitalize() + ".", gold.upper()]), "correct"
        other = "no" if gold == "yes" else "yes"
        return gold, rng.choice([other, f"{gold} it is"]), "incorrect"
    gold = rng.choice(ENTITIES)
    if rng.random() < 0.55:
        return gold, rng.choice([gold, f"the {gold}", gold.lower(), f"{gold}."]), "correct"
    other = rng.choice([e for e in ENTITIES if e != gold])
    return gold, rng.choice([other, gold.split()[0] + " Street"]), "incorrect"


def pathological(rng: random.Random, i: int) -> Item:
    """Hostile inputs, cycled: each must cost at most the grader's timeout."""
    cases = [
        ("\\boxed{" + "{" * 3000, "1", "incorrect", "nested_braces"),
        ("1+" * 100_000, "2", "incorrect", "runaway_sum"),
        ("\\boxed{9^{9^{9^9}}}", "1", "incorrect", "power_tower"),
        ("x" * 200_000 + "\\boxed{42}", "42", "correct", "200kB_then_answer"),
        ("", "3", "incorrect", "empty"),
        (None, "3", "incorrect", "none"),
    ]
    response, gold, expected, kind = cases[i % len(cases)]
    return Item(response, gold, "math_dapo", expected, f"pathological:{kind}")


def make_batch(n: int = 4096, seed: int = 0, pathological_frac: float = 0.01) -> list[Item]:
    """A seeded mixed batch of ``n`` responses with expected verdicts (see module docstring).

    Raises:
        ValueError: n < 1 or pathological_frac outside [0, 1].
    """
    if n < 1 or not 0.0 <= pathological_frac <= 1.0:
        raise ValueError(f"need n >= 1 and pathological_frac in [0, 1], got n={n}, frac={pathological_frac}")
    rng = random.Random(seed)
    n_bad = round(n * pathological_frac)
    items = [pathological(rng, i) for i in range(n_bad)]
    while len(items) < n:
        is_math = rng.random() < 0.5
        r = rng.random()
        source = "math_dapo" if is_math else "hotpotqa"
        gold, answer, expected = _math_item(rng) if is_math else _qa_item(rng)
        if r < 0.10:
            answer, expected = rng.choice(["I don't know", "I don\u2019t know.", "I do not know"]), "abstain"
            response = _wrap(rng, answer, "boxed")
        elif r < 0.13:
            response, expected = " ".join(rng.choice(FILLER) for _ in range(5)), "incorrect"  # no final answer
        else:
            response = _wrap(rng, answer, "boxed" if (not is_math or rng.random() < 0.75) else "answer_line")
        items.append(Item(response, gold, source, expected, "math" if is_math else "qa"))
    rng.shuffle(items)
    return items


def _verl_graders():
    from verl.utils.reward_score import math_dapo, math_verify
    from verl.utils.reward_score.search_r1_like_qa_em import em_check

    def qa(response: object, gold: str) -> bool:
        boxed = math_dapo.last_boxed_only_string(response) if isinstance(response, str) else None
        return bool(boxed) and em_check(math_dapo.remove_boxed(boxed), gold) == 1

    def dapo(item: Item) -> bool:
        if item.data_source == "hotpotqa":
            return qa(item.response, item.gold)
        return math_dapo.compute_score(item.response, item.gold)["acc"]

    def mv(item: Item) -> bool:
        if item.data_source == "hotpotqa":
            return qa(item.response, item.gold)
        return math_verify.compute_score(item.response, item.gold) == 1.0

    return {"verl math_dapo": dapo, "verl math-verify": mv}


def _shutdown_verl_math_verify_pool() -> None:
    """verl's wrapper never kills a stuck worker; do it here so the benchmark can exit."""
    from verl.utils.reward_score import math_verify

    pool = math_verify._pool
    if pool is not None:
        for proc in list(getattr(pool, "_processes", {}).values()):
            proc.kill()
        # wait=True: joins the executor's manager thread now, not at interpreter exit (where its
        # wake-up pipe is already closed and Python prints "OSError: Bad file descriptor")
        pool.shutdown(wait=True, cancel_futures=True)
        math_verify._pool = None


@contextlib.contextmanager
def captured_fd2(verbose: bool = False) -> Iterator[dict]:
    """Send file descriptor 2 (this process and every child started meanwhile) to a temporary file.

    Yields a dict that holds, after the block, ``"text"`` (what was written, decoded with
    replacement) and ``"bytes"``. Third-party loggers of this process are set to ERROR for the block.
    With ``verbose`` the captured text is written to the restored stderr afterwards.
    """
    levels = {name: logging.getLogger(name).level for name in THIRD_PARTY_LOGGERS}
    for name in THIRD_PARTY_LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)
    out: dict = {"text": "", "bytes": 0}
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as log:
        os.dup2(log.fileno(), 2)
        try:
            yield out
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            for name, level in levels.items():
                logging.getLogger(name).setLevel(level)
            log.seek(0)
            raw = log.read()
            out["bytes"], out["text"] = len(raw), raw.decode("utf-8", "replace")
    if verbose and out["text"]:
        sys.stderr.write(out["text"])
        sys.stderr.flush()


def count_math_verify_timeouts(log_text: str) -> int:
    """math-verify's parse / comparison timeout records in captured log output."""
    return len(_MV_TIMEOUT_RE.findall(log_text))


def _progress_stream() -> TextIO:
    """A text stream on a duplicate of the current stderr: progress bars stay on the console while fd 2 is
    captured (``sys.stderr`` itself when it has no file descriptor, e.g. under pytest's capture)."""
    try:
        return os.fdopen(os.dup(sys.stderr.fileno()), "w", buffering=1)
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is an OSError and a ValueError
        return sys.stderr


def _percentiles(latencies_s: list[float]) -> dict[str, float]:
    ms = sorted(x * 1000 for x in latencies_s)
    if not ms:
        return {"p50_ms": float("nan"), "p99_ms": float("nan"), "max_ms": float("nan")}
    return {"p50_ms": statistics.median(ms), "p99_ms": ms[min(len(ms) - 1, int(0.99 * len(ms)))], "max_ms": ms[-1]}


def _agreement(items: list[Item], correct: list[bool | None]) -> dict[str, float]:
    out = {}
    for name, keep in (("all", lambda it: True), ("math", lambda it: it.data_source == "math_dapo"), ("qa", lambda it: it.data_source == "hotpotqa")):
        pairs = [(it, c) for it, c in zip(items, correct) if c is not None and keep(it)]
        out[f"agree_{name}"] = sum((it.expected == "correct") == c for it, c in pairs) / max(1, len(pairs))
    return out


def run_rlec(items: list[Item], timeout_s: float, workers: int | None, progress: TextIO | None = None) -> dict:
    """Batch throughput, then a sequential pass for per-item latency (``progress``: where its bar goes; None = none)."""
    from rlec.grading import grade, grade_batch
    from rlec.grading.math import MathVerifyPool

    t0 = time.perf_counter()
    pool = MathVerifyPool(max_workers=workers, timeout_s=timeout_s)
    startup_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    results = grade_batch([i.response for i in items], [i.gold for i in items], [i.data_source for i in items], pool=pool)
    elapsed = time.perf_counter() - t0
    latencies = []
    for it in tqdm(items, desc="rlec latency pass", unit="resp", file=progress, disable=progress is None, leave=False):
        t = time.perf_counter()
        grade(it.response, it.gold, it.data_source, pool=pool)
        latencies.append(time.perf_counter() - t)
    pool.close()
    correct = [r.outcome.value == "correct" for r in results]
    three_way = sum(r.outcome.value == it.expected for r, it in zip(results, items)) / len(items)
    paths = collections.Counter("screened" if r.detail.startswith("screened") else r.detail for r in results)
    return {
        "grader": "rlec", "graded": len(items), "seconds": elapsed, "responses_per_s": len(items) / elapsed,
        "timeouts": sum(r.timed_out for r in results), "pool_startup_s": startup_s,
        "paths": dict(paths.most_common()), "grader_errors": sum(bool(r.grader_error) for r in results),
        "agree_3way": three_way, **_agreement(items, correct), **_percentiles(latencies),
    }


def run_verl(name: str, fn, items: list[Item], budget_s: float, progress: TextIO | None = None) -> dict:
    """One call per response (as verl's reward managers do), under a wall-clock budget.

    ``timeouts`` here counts calls past the wrapper's 30 s limit; :func:`main` adds math-verify's
    own timeouts inside the workers (module docstring).
    """
    correct: list[bool | None] = []
    latencies, errors = [], 0
    start = time.perf_counter()
    for it in tqdm(items, desc=name, unit="resp", file=progress, disable=progress is None, leave=False):
        if time.perf_counter() - start > budget_s:
            break
        t = time.perf_counter()
        try:
            correct.append(bool(fn(it)))
        except Exception:  # verl's graders raise on non-string responses
            correct.append(False)
            errors += 1
        latencies.append(time.perf_counter() - t)
    elapsed = time.perf_counter() - start
    slow = sum(x >= 29.0 for x in latencies)  # verl math-verify's 30 s future timeout
    return {
        "grader": name, "graded": len(correct), "seconds": elapsed, "responses_per_s": len(correct) / elapsed,
        "timeouts": slow, "errors": errors, "finished": len(correct) == len(items),
        **_agreement(items[: len(correct)], correct), **_percentiles(latencies),
    }


def format_table(rows: list[dict], n: int) -> str:
    """Markdown table of the benchmark rows."""
    head = "| grader | graded | responses/s | p50 ms | p99 ms | max ms | timeouts | agree (all) | agree math | agree QA |"
    lines = [head, "|" + "---|" * 10]
    for r in rows:
        graded = f"{r['graded']}/{n}" + ("" if r.get("finished", True) else " (budget hit)")
        lines.append(
            f"| {r['grader']} | {graded} | {r['responses_per_s']:.0f} | {r['p50_ms']:.2f} | {r['p99_ms']:.1f} | "
            f"{r['max_ms']:.0f} | {r['timeouts']} | {r['agree_all']:.3f} | {r['agree_math']:.3f} | {r['agree_qa']:.3f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=4096, help="responses in the batch (default 4096)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--pathological-frac", type=float, default=0.01, help="share of hostile inputs (default 0.01)")
    parser.add_argument("--timeout-s", type=float, default=5.0, help="rlec per-item math-verify limit (default 5)")
    parser.add_argument("--workers", type=int, default=None, help="rlec pool size (default min(4, cores))")
    parser.add_argument("--budget-s", type=float, default=180.0, help="wall-clock budget per verl grader (default 180)")
    parser.add_argument("--skip-verl", action="store_true", help="measure rlec only")
    parser.add_argument("--json", type=Path, default=None, help="also write every figure here")
    parser.add_argument("--verbose", action="store_true",
                        help="print the third-party log output (math-verify's warnings) captured while verl's graders ran")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    args = parser.parse_args(argv)
    progress = None if args.no_progress else _progress_stream()

    items = make_batch(args.n, args.seed, args.pathological_frac)
    print(f"batch: {len(items)} responses, {sum(i.data_source == 'math_dapo' for i in items)} math, "
          f"{sum(i.kind.startswith('pathological') for i in items)} pathological, cores={os.cpu_count()}", file=sys.stderr)
    rows = [run_rlec(items, args.timeout_s, args.workers, progress)]
    if not args.skip_verl:
        for name, fn in _verl_graders().items():
            with captured_fd2(args.verbose) as log:
                try:
                    rows.append(run_verl(name, fn, items, args.budget_s, progress))
                finally:
                    if name == "verl math-verify":
                        _shutdown_verl_math_verify_pool()  # its workers exit inside the capture
            row = rows[-1]
            row["future_timeouts"], row["logged_timeouts"] = row["timeouts"], count_math_verify_timeouts(log["text"])
            row["timeouts"] = row["future_timeouts"] + row["logged_timeouts"]
            row["captured_log_bytes"] = log["bytes"]
    if progress is not None and progress is not sys.stderr:
        progress.close()
    print(format_table(rows, len(items)))
    print(f"\nrlec three-way agreement (abstain kept apart): {rows[0]['agree_3way']:.3f}; "
          f"rlec pool start-up {rows[0]['pool_startup_s']:.1f}s (not in responses/s); rlec timeout {args.timeout_s:g}s")
    print("rlec decided by: " + ", ".join(f"{path} {count}" for path, count in rows[0]["paths"].items())
          + f"; grader errors {rows[0]['grader_errors']}")
    for row in rows[1:]:
        if row["captured_log_bytes"]:
            print(f"{row['grader']}: {row['captured_log_bytes']:,} bytes of third-party log output captured "
                  f"(--verbose prints it); timeouts = {row['future_timeouts']} past the 30 s call limit + "
                  f"{row['logged_timeouts']} math-verify parse/comparison timeouts in its workers")
    if len(rows) == 3 and rows[2]["responses_per_s"] > 0:
        print(f"rlec / verl math-verify: {rows[0]['responses_per_s'] / rows[2]['responses_per_s']:.0f}x responses/s")
    if args.json:
        from rlec.io import atomic_write_text

        atomic_write_text(args.json, json.dumps({"settings": vars(args) | {"json": str(args.json)}, "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
