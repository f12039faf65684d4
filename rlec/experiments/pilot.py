"""The pilot that picks an experiment's training prompts, and the fixed probe set (issue 57 items 4 and 5).

The pilot (``python -m rlec.experiments.pilot e3``) measures each candidate prompt's base q on the warm start: the
share of :data:`rlec.experiments.spec.PILOT_SAMPLES` (32) responses sampled at T = 1 over the whole vocabulary (the
training sampling: no top-k) that the grader counts right, through ``rlec.eval.evaluate`` (the same engine and grader as
every held-out figure). Candidates are the training side of the addition task (never held out): all 100 one-digit sums
and :data:`TWO_DIGIT_CANDIDATES` distinct two-digit ones (the warm start's sampled accuracy is 0.76 / 0.42 / 0 at 1 / 2 /
3 digits, so three-digit sums are never in the band). The prompts with q in
:data:`rlec.experiments.spec.INFORMATIVE_BAND` (open) are kept; the result is committed as
``pilot_<experiment>.json`` in ``docs/results`` (every candidate with its q, the kept ones in order), and
:func:`rlec.experiments.core.prepare_shared` builds the experiment's training rows from it: the kept prompts in the
file's order, cycled to the experiment's ``train_rows``.

The probe set (:func:`write_probe_set`): :attr:`rlec.experiments.spec.Probe.prompts` held-out two- and three-digit
sums (:func:`rlec.demo.data.draw_problems` with ``held_out=True`` and the fixed seed :data:`PROBE_SEED`), written as
binary training rows (the training prompt), the same file for every arm and seed of an experiment.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Sequence

from rlec.experiments.spec import INFORMATIVE_BAND, PILOT_SAMPLES, Probe

REPO = Path(__file__).resolve().parents[2]
PROBE_SEED = 57  # the probe set's draw (issue 57); the held-out test set draws with seed 1
PROBE_DIGITS = (2, 3)  # held-out digit counts (one-digit sums are all trained on)
CANDIDATE_SEED = 0
TWO_DIGIT_CANDIDATES = 220
PILOT_TEMPERATURE = 1.0
PILOT_SCHEMA = "rlec.experiments.pilot/v1"

__all__ = ["PILOT_SCHEMA", "PROBE_SEED", "candidate_problems", "main", "pilot_path", "pool_samples", "read_pilot",
           "run_pilot", "write_probe_set", "write_samples"]


def pilot_path(name: str) -> Path:
    """The committed pilot file of experiment ``name``: ``pilot_<name>.json`` in ``docs/results``."""
    return REPO / "docs" / "results" / f"pilot_{name}.json"


def candidate_problems(two_digit: int = TWO_DIGIT_CANDIDATES, seed: int = CANDIDATE_SEED) -> list[Any]:
    """The pilot's candidates: every one-digit sum (0+0 ... 9+9), then ``two_digit`` distinct two-digit training sums
    (never held out), drawn with ``seed``; deterministic."""
    import random

    from rlec.demo.warm_start import AdditionProblem, QUESTION, training_problem

    ones = [AdditionProblem(QUESTION.format(a=a, b=b), str(a + b), 1) for a in range(10) for b in range(10)]
    rng, seen, twos = random.Random(seed), set(), []
    while len(twos) < two_digit:
        p = training_problem(rng, (2,))
        if p.question not in seen:
            seen.add(p.question)
            twos.append(p)
    return [*ones, *twos]


def write_probe_set(path: Path, probe: Probe) -> Path:
    """The probe prompts (module docstring) as a verl parquet of binary training rows at ``path`` (atomic); the same
    bytes on every call with the same ``probe.prompts``."""
    from rlec.data.mix import BINARY, Sample
    from rlec.demo.data import draw_problems, question

    problems = draw_problems(PROBE_SEED, probe.prompts, PROBE_DIGITS, held_out=True)
    return write_samples([Sample(question(p), "probe", 0, BINARY, 0.0) for p in problems], path)


def write_samples(samples: Sequence[Any], path: Path) -> Path:
    """``samples`` as a verl parquet at ``path``, atomically (:func:`rlec.data.writer.to_table`, one write)."""
    import io

    import pyarrow.parquet as pq

    from rlec.data.writer import to_table
    from rlec.io import atomic_write_bytes

    buf = io.BytesIO()
    pq.write_table(to_table(samples), buf)
    atomic_write_bytes(path, buf.getvalue())
    return path


def read_pilot(path: Path) -> dict[str, Any]:
    """A pilot file, checked: its schema, band and a non-empty ``kept`` list of candidate ids.

    Raises:
        ValueError: unreadable, another schema, or no kept prompt (names the file and the rule).
    """
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: unreadable pilot file ({exc})") from None
    if data.get("schema") != PILOT_SCHEMA:
        raise ValueError(f"{path}: schema {data.get('schema')!r}, expected {PILOT_SCHEMA!r}")
    ids = {c["question_id"] for c in data.get("candidates", [])}
    if not data.get("kept") or not set(data["kept"]) <= ids:
        raise ValueError(f"{path}: 'kept' must list at least one of its candidates' question_id")
    return data


def pool_samples(pilot: dict[str, Any], rows: int) -> list[Any]:
    """``rows`` binary training samples: the pilot's kept prompts in its order, cycled (each kept prompt
    ``rows // kept`` or one more times)."""
    from rlec.data.mix import BINARY, Question, Sample

    by_id = {c["question_id"]: c for c in pilot["candidates"]}
    kept = [by_id[i] for i in pilot["kept"]]
    out = []
    for k in range(rows):
        c = kept[k % len(kept)]
        out.append(Sample(Question("math", c["question_id"], c["task_text"], c["gold"]), "train", 0, BINARY, 0.0))
    return out


def run_pilot(name: str, work: Path, *, two_digit: int = TWO_DIGIT_CANDIDATES, limit: int | None = None,
              max_new_tokens: int | None = None) -> dict[str, Any]:
    """Measure every candidate's base q on the warm start (module docstring) in ``work``; the pilot's content.

    Resumable: the evaluation appends to ``work/records.jsonl`` (``--resume``).

    Raises:
        RuntimeError: the evaluation failed.
    """
    import numpy as np

    from rlec.data.mix import evaluation_samples
    from rlec.data.writer import write_parquet
    from rlec.demo import warm_start
    from rlec.demo.data import question
    from rlec.eval import evaluate
    from rlec.eval.metrics import grade_records, load_run, question_counts
    from rlec.eval.selective import C, N
    from rlec.experiments import keys as K

    exp = _experiment(name)
    work.mkdir(parents=True, exist_ok=True)
    model = warm_start.build(work / "warm_start", warm_start.WarmStartConfig(), progress=False)
    questions = [question(p) for p in candidate_problems(two_digit)][:limit]
    data = work / "candidates.parquet"
    write_parquet(evaluation_samples(questions), data)
    records_path = work / "records.jsonl"
    budget = int(max_new_tokens or exp.settings.get(K.MAX_RESPONSE, 24))
    code = evaluate.main(["--model", str(model), "--data", str(data), "--out", str(records_path), "--targets", "binary",
                          "--n-samples", str(PILOT_SAMPLES), "--temperature", str(PILOT_TEMPERATURE), "--top-k", "-1",
                          "--max-new-tokens", str(budget), "--seed", "0", "--engine", "hf", "--batch-size", "256",
                          "--resume"])
    if code:
        raise RuntimeError(f"pilot evaluation of {model} failed (exit {code})")
    records, _ = load_run(records_path, [None])
    qkeys, counts = question_counts(records, grade_records(records, progress=False), [None])
    q = {qid: float(c[0, C] / c[0, N]) for (_, qid), c in zip(qkeys, counts)}
    lo, hi = INFORMATIVE_BAND
    candidates = [{"question_id": x.question_id, "task_text": x.task_text, "gold": x.gold,
                   "digits": 1 if k < 100 else 2, "q": q[x.question_id],
                   "n": int(counts[qkeys.index(("math", x.question_id))][0, N])} for k, x in enumerate(questions)]
    kept = [c["question_id"] for c in candidates if lo < c["q"] < hi]
    qs = np.array([c["q"] for c in candidates])
    return {"schema": PILOT_SCHEMA, "experiment": name, "warm_start_key": warm_start.folder_key(warm_start.WarmStartConfig()),
            "samples": PILOT_SAMPLES, "temperature": PILOT_TEMPERATURE, "top_k": -1, "max_new_tokens": budget,
            "band": list(INFORMATIVE_BAND), "n_candidates": len(candidates), "n_kept": len(kept),
            "q_mean": float(qs.mean()), "share_in_band": len(kept) / len(candidates),
            "by_digits": {str(d): {"n": int(sum(c["digits"] == d for c in candidates)),
                                   "kept": int(sum(c["digits"] == d and c["question_id"] in kept for c in candidates)),
                                   "q_mean": float(np.mean([c["q"] for c in candidates if c["digits"] == d]))}
                          for d in sorted({c["digits"] for c in candidates})},
            "command": f"python -m rlec.experiments.pilot {name}", "kept": kept, "candidates": candidates}


def _experiment(name: str) -> Any:
    """The spec of ``rlec/experiments/<name>.py`` (imported by name: :mod:`rlec.experiments.cli` imports this module's
    users).

    Raises:
        ValueError: no such experiment module or no ``EXPERIMENT`` in it.
    """
    import importlib

    try:
        return importlib.import_module(f"rlec.experiments.{name}").EXPERIMENT
    except (ImportError, AttributeError):
        raise ValueError(f"unknown experiment {name!r}: no rlec/experiments/{name}.py with an EXPERIMENT") from None


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m rlec.experiments.pilot <experiment> [--work DIR] [--out FILE]``; 2 on bad input."""
    from rlec.io import atomic_write_text

    p = argparse.ArgumentParser(prog="python -m rlec.experiments.pilot", description=__doc__.split("\n\n")[0])
    p.add_argument("name", help="the experiment (e3, e3_budget, passk: the ones trained on binary additions)")
    p.add_argument("--work", default=None, help="working folder (warm start, candidates, records; default outputs/pilot/<name>)")
    p.add_argument("--out", default=None, help="the pilot file (default: pilot_<name>.json in docs/results)")
    p.add_argument("--two-digit", type=int, default=TWO_DIGIT_CANDIDATES, help="two-digit candidates besides the 100 one-digit sums")
    args = p.parse_args(argv)
    try:
        if _experiment(args.name).data != "binary":
            raise ValueError(f"experiment {args.name!r} does not train on binary additions: the pilot's candidates are "
                             "binary addition prompts")
    except ValueError as exc:
        print(f"rlec.experiments.pilot: error: {exc}", file=sys.stderr)
        return 2
    if args.two_digit < 0:
        print(f"rlec.experiments.pilot: error: --two-digit {args.two_digit}: expected >= 0", file=sys.stderr)
        return 2
    result = run_pilot(args.name, Path(args.work or f"outputs/pilot/{args.name}"), two_digit=args.two_digit)
    out = Path(args.out) if args.out else pilot_path(args.name)
    atomic_write_text(out, json.dumps(result, indent=1) + "\n")
    print(f"{out}: {result['n_kept']} of {result['n_candidates']} candidates with q in {tuple(result['band'])} "
          f"(by digits: {result['by_digits']})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
