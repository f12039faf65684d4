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

An experiment with :attr:`rlec.experiments.spec.Experiment.pilot_bands` (e3_budget: 32 hard-but-solvable and 32 easy
prompts) keeps the first ``count`` candidates of each band instead, band after band, and the file names any band short
of its count; :attr:`~rlec.experiments.spec.Experiment.pilot_figures` adds figures computed from the kept q's (e3_budget:
the offline all-wrong prediction under both allocations).

On a pool of one environment's problems (``data="pool"``, Pass@k's ``pair_sum``) the candidates are the pool's own
training rows (:func:`rlec.environments.pool.pool_rows`, distinct prompts, first occurrence) and the probe candidates
(:func:`pool_probe_rows`: :attr:`~rlec.experiments.spec.Probe.prompts` prompts of the pool's levels that are no training
prompt, from their own seed stream), each measured the same way and stored with its ``split`` (``train`` / ``probe``),
level, problem seed and number of distinct right answers. The kept training candidates form the pool; the probe
candidates, in order, with ``low_q`` = q < :data:`LOW_Q_BELOW`, the probe set (:func:`write_pool_probe_set`): Pass@k's
premise reads ``rlec/probe/pass@4/low_q`` over them (:mod:`rlec.verl_plugin.probe`).

The probe set of an addition experiment (:func:`write_probe_set`): :attr:`rlec.experiments.spec.Probe.prompts` held-out
two- and three-digit sums (:func:`rlec.demo.data.draw_problems` with ``held_out=True`` and the fixed seed
:data:`PROBE_SEED`), written as binary training rows (the training prompt), the same file for every arm and seed of an
experiment.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from rlec.experiments.spec import INFORMATIVE_BAND, PILOT_SAMPLES, Probe

REPO = Path(__file__).resolve().parents[2]
PROBE_SEED = 57  # the probe set's draw (issue 57); the held-out test set draws with seed 1
PROBE_DIGITS = (2, 3)  # held-out digit counts (one-digit sums are all trained on)
CANDIDATE_SEED = 0
TWO_DIGIT_CANDIDATES = 220
PILOT_TEMPERATURE = 1.0
PILOT_SCHEMA = "rlec.experiments.pilot/v1"
WHY_NO_VERDICT = "a pilot: each candidate prompt's measured q at the warm start (the selection of the experiment's prompts), not a comparison of arms"
LOW_Q_BELOW = 0.3  # a probe prompt of a pool is "low q" below this base q (LAB.md: Pass@k's regime, q 0.05-0.30)
PROBE_DRAWS = 8  # probe candidates drawn per probe prompt and level before a level counts as used up

__all__ = ["LOW_Q_BELOW", "PILOTS", "PILOT_SCHEMA", "PROBE_SEED", "PilotData", "candidate_problems", "listed_candidates", "main", "pilot_path",
           "pilot_kind", "pool_candidates", "pool_probe_rows", "pool_samples", "pool_train_rows", "read_pilot", "row_of", "run_pilot",
           "select_prompts", "warm_start_config", "write_pool_probe_set", "write_pool_rows", "write_probe_set",
           "write_samples"]


def warm_start_config(exp: Any) -> Any:
    """The :class:`rlec.demo.warm_start.WarmStartConfig` the experiment's arms start from (the demo's by default): the
    model its pilot measures and its arms train."""
    from rlec.demo import warm_start

    return exp.warm_start if exp.warm_start is not None else warm_start.WarmStartConfig()


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
    """``samples`` as a verl parquet at ``path``, atomically (:func:`rlec.data.writer.to_table`,
    :func:`rlec.io.atomic_write_parquet`)."""
    from rlec.data.writer import to_table
    from rlec.io import atomic_write_parquet

    return atomic_write_parquet(path, to_table(samples))


def read_pilot(path: Path) -> dict[str, Any]:
    """A pilot file, checked: its schema, band and a non-empty ``kept`` list of candidate ids.

    Raises:
        ValueError: unreadable or no JSON object (:func:`rlec.io.read_json_object`), another schema, or no kept prompt
            (names the file and the rule).
    """
    from rlec.io import read_json_object

    data = read_json_object(path, what="a pilot file's object")
    if data.get("schema") != PILOT_SCHEMA:
        raise ValueError(f"{path}: schema {data.get('schema')!r}, expected {PILOT_SCHEMA!r}")
    ids = {c["question_id"] for c in data.get("candidates", [])}
    if not data.get("kept") or not set(data["kept"]) <= ids:
        raise ValueError(f"{path}: 'kept' must list at least one of its candidates' question_id")
    if not set(data.get("probe", [])) <= ids:
        raise ValueError(f"{path}: 'probe' must list only its candidates' question_id")
    return data


def listed_candidates(pilot: dict[str, Any], key: str = "kept") -> list[dict[str, Any]]:
    """The candidates a pilot file (:func:`read_pilot`) lists by id under ``key``, in its order: ``kept`` (the training
    pool) or ``probe`` (a pool's probe candidates; none when absent)."""
    by_id = {c["question_id"]: c for c in pilot["candidates"]}
    return [by_id[i] for i in pilot.get(key, [])]


def pool_samples(pilot: dict[str, Any], rows: int) -> list[Any]:
    """``rows`` binary training samples: the pilot's kept prompts in its order, cycled (each kept prompt
    ``rows // kept`` or one more times)."""
    from rlec.data.mix import BINARY, Question, Sample

    kept = listed_candidates(pilot)
    out = []
    for k in range(rows):
        c = kept[k % len(kept)]
        out.append(Sample(Question("math", c["question_id"], c["task_text"], c["gold"]), "train", 0, BINARY, 0.0))
    return out


def pool_probe_rows(pool: Any, count: int, exclude: set[str]) -> list[dict[str, Any]]:
    """``count`` probe rows of a pool (verl rows, binary prompt, split ``probe``): distinct prompts none of which is in
    ``exclude`` (the training prompts' texts), drawn level by level in turn over ``pool.difficulties`` from the
    stream of :data:`PROBE_SEED` (odd seeds, as held-out rows), at most :data:`PROBE_DRAWS` x ``count`` draws per
    level (a level whose prompts are all training prompts, pair_sum's d = 0, gives none); deterministic.

    Raises:
        ValueError: fewer than ``count`` such prompts in the pool's levels (names the pool).
    """
    import random

    from rlec.environments import get_environment, problem_row

    env = get_environment(pool.environment)
    fresh: dict[int, list[Any]] = {}
    seen = set(exclude)
    for d in pool.difficulties:
        rng = random.Random(f"rlec.experiments.pilot/probe/{PROBE_SEED}/{pool.environment}/{d}")
        fresh[d] = []
        for _ in range(PROBE_DRAWS * count):
            problem = env.generate(2 * rng.getrandbits(47) + 1, d)
            if problem.prompt not in seen and len(fresh[d]) < count:
                seen.add(problem.prompt)
                fresh[d].append(problem)
    picked = [p for k in range(count) for d in pool.difficulties if k < len(fresh[d]) for p in [fresh[d][k]]][:count]
    if len(picked) < count:
        raise ValueError(f"pool {pool.environment!r} levels {list(pool.difficulties)}: {len(picked)} probe prompts that are "
                         f"no training prompt, {count} wanted")
    return [problem_row(p, index=i, split="probe") for i, p in enumerate(picked)]


def pool_candidates(exp: Any) -> list[dict[str, Any]]:
    """The pilot's candidates on a pool (module docstring): the distinct training prompts of the pool's rows
    (:func:`rlec.environments.pool.pool_rows` with ``exp.train_rows`` and seed 0, as :func:`rlec.experiments.core.prepare_shared`
    writes them), then the probe candidates (:func:`pool_probe_rows`, ``exp.probe.prompts``; none without a probe),
    each as ``{question_id, task_text, gold, split, difficulty, env_seed, right_answers}``."""
    from rlec.environments.pool import pool_rows, right_answer_counts

    train, _ = pool_rows(exp.pool, exp.train_rows, seed=0)
    distinct: dict[str, dict[str, Any]] = {}
    for row in train:
        distinct.setdefault(row["extra_info"]["task_text"], row)
    rows = list(distinct.values())
    probe = pool_probe_rows(exp.pool, exp.probe.prompts, set(distinct)) if exp.probe is not None else []
    out = []
    for split, group in (("train", rows), ("probe", probe)):
        for row, right in zip(group, right_answer_counts(group)):
            info = row["extra_info"]
            out.append({"question_id": info["question_id"], "task_text": info["task_text"],
                        "gold": row["reward_model"]["ground_truth"], "split": split, "difficulty": int(info["difficulty"]),
                        "env_seed": int(info["env_seed"]), "right_answers": right})
    return out


def row_of(candidate: dict[str, Any], index: int, split: str) -> dict[str, Any]:
    """A pool candidate's verl row, generated again from its environment, level and problem seed.

    Raises:
        ValueError: the problem generated now is not the one the pilot measured (another ``question_id`` or text: the
            environment changed since; rerun the pilot).
    """
    from rlec.environments import get_environment, problem_row
    from rlec.environments.base import Problem

    env = get_environment(Problem.from_json(candidate["gold"]).environment)
    row = problem_row(env.generate(int(candidate["env_seed"]), int(candidate["difficulty"])), index=index, split=split)
    info = row["extra_info"]
    if info["question_id"] != candidate["question_id"] or info["task_text"] != candidate["task_text"]:
        raise ValueError(f"pilot candidate {candidate['question_id']}: the environment now generates "
                         f"{info['question_id']} {info['task_text']!r}: rerun the pilot")
    return row


def pool_train_rows(pilot: dict[str, Any], rows: int) -> list[dict[str, Any]]:
    """``rows`` verl training rows of a pool experiment: the pilot's kept candidates in its order, cycled, each generated
    again from its environment (:func:`row_of`)."""
    kept = listed_candidates(pilot)
    return [row_of(kept[k % len(kept)], k, "train") for k in range(rows)]


def write_pool_rows(rows: Sequence[dict[str, Any]], path: Path, low_q: Sequence[bool] | None = None) -> Path:
    """Verl rows of a pool (the static data's arrow schema) as the parquet ``path``, atomically; with ``low_q`` also
    the probe's boolean column :data:`rlec.probe_keys.LOW_Q` (``low_q``)."""
    import pyarrow as pa

    from rlec.data.writer import rows_table
    from rlec.io import atomic_write_parquet

    table = rows_table(rows)
    if low_q is not None:
        table = table.append_column("low_q", pa.array([bool(x) for x in low_q], type=pa.bool_()))
    return atomic_write_parquet(path, table)


def write_pool_probe_set(path: Path, exp: Any, pilot: dict[str, Any] | None) -> Path:
    """A pool experiment's probe set at ``path``: the first ``exp.probe.prompts`` probe candidates of ``pilot`` (its
    ``probe`` list) with their ``low_q`` flags (q < :data:`LOW_Q_BELOW`); without a pilot the same prompts
    (:func:`pool_probe_rows`) unflagged (the probe's entropy and pass@k are measured, ``pass@k/low_q`` is not)."""
    if pilot is None:
        cands = pool_candidates(exp)
        rows = [row_of(c, i, "probe") for i, c in enumerate(c for c in cands if c["split"] == "probe")]
        return write_pool_rows(rows, path)
    chosen = listed_candidates(pilot, "probe")[: exp.probe.prompts]
    if len(chosen) < exp.probe.prompts:
        raise ValueError(f"{pilot_path(exp.name)}: {len(chosen)} probe candidates, the probe set needs {exp.probe.prompts}")
    return write_pool_rows([row_of(c, i, "probe") for i, c in enumerate(chosen)], path,
                           low_q=[c["q"] < LOW_Q_BELOW for c in chosen])


def _addition_candidates(exp: Any, path: Path, two_digit: int, limit: int | None) -> list[dict[str, Any]]:
    """The addition candidates (:func:`candidate_problems`, the first ``limit``) as binary evaluation rows at ``path``."""
    from rlec.data.mix import evaluation_samples
    from rlec.data.writer import write_parquet
    from rlec.demo.data import question

    questions = [question(p) for p in candidate_problems(two_digit)][:limit]
    write_parquet(evaluation_samples(questions), path)
    return [{"question_id": x.question_id, "task_text": x.task_text, "gold": x.gold, "digits": 1 if k < 100 else 2}
            for k, x in enumerate(questions)]


def _pool_candidate_rows(exp: Any, path: Path, two_digit: int, limit: int | None) -> list[dict[str, Any]]:
    """A pool's candidates (:func:`pool_candidates`, the first ``limit``) as its verl rows at ``path``."""
    candidates = pool_candidates(exp)[:limit]
    write_pool_rows([row_of(c, i, c["split"]) for i, c in enumerate(candidates)], path)
    return candidates


@dataclass(frozen=True)
class PilotData:
    """How the pilot serves one kind of training data (:mod:`rlec.experiments.data_kinds`): one entry of :data:`PILOTS`.

    Attributes:
        group: the candidates' field the pilot file breaks its figures down by (``by_<group>``).
        candidates: ``(exp, path, two_digit, limit) -> candidates``: writes the candidates' evaluation parquet at
            ``path`` and returns them (``question_id``, ``task_text``, ``gold``, the ``group`` field, ...), the first
            ``limit`` (all: None); ``two_digit`` is the addition pilot's number of two-digit candidates.
        write_train: ``(pilot, rows, path)``: a committed pilot file's training rows, its kept prompts in its order
            cycled to ``rows``, as the parquet ``path``.
        write_probe: ``(path, exp, pilot)``: the probe set as the parquet ``path`` (``pilot`` None: no committed file).
    """

    group: str
    candidates: Callable[[Any, Path, int, "int | None"], list[dict[str, Any]]]
    write_train: Callable[[dict[str, Any], int, Path], Path]
    write_probe: Callable[[Path, Any, "dict[str, Any] | None"], Path]


PILOTS: dict[str, PilotData] = {
    # additions: the candidates are addition prompts, the probe prompts held-out additions
    "binary": PilotData("digits", _addition_candidates,
                        lambda pilot, rows, path: write_samples(pool_samples(pilot, rows), path),
                        lambda path, exp, pilot: write_probe_set(path, exp.probe)),
    # a pool: its own problems and its probe candidates, generated again from their seeds
    "pool": PilotData("difficulty", _pool_candidate_rows,
                      lambda pilot, rows, path: write_pool_rows(pool_train_rows(pilot, rows), path), write_pool_probe_set),
}
"""The data kinds (:attr:`rlec.experiments.spec.Experiment.data`) whose training prompts a pilot picks; any other kind
has no pilot."""


def select_prompts(candidates: Sequence[dict[str, Any]], bands: Sequence[Any]) -> tuple[list[str], dict[str, Any]]:
    """The kept candidates' ids: every one with q in :data:`rlec.experiments.spec.INFORMATIVE_BAND` (open) without
    ``bands``, else per band (:class:`rlec.experiments.spec.Band`) the first ``count`` with ``lo <= q <= hi`` not kept
    by an earlier band, the bands interleaved (one of each in turn: any first rows of the pool, a ``--quick`` run's,
    hold every band); and per band ``{lo, hi, count, kept, short}``."""
    if not bands:
        lo, hi = INFORMATIVE_BAND
        return [c["question_id"] for c in candidates if lo < c["q"] < hi], {}
    taken: set[str] = set()
    per_band: list[list[str]] = []
    figures = {}
    for band in bands:
        ids = [c["question_id"] for c in candidates if band.lo <= c["q"] <= band.hi and c["question_id"] not in taken][: band.count]
        taken |= set(ids)
        per_band.append(ids)
        figures[band.name] = {"lo": band.lo, "hi": band.hi, "count": band.count, "kept": len(ids), "short": band.count - len(ids)}
    kept = [ids[k] for k in range(max(map(len, per_band))) for ids in per_band if k < len(ids)]
    return kept, figures


def run_pilot(name: str, work: Path, *, two_digit: int = TWO_DIGIT_CANDIDATES, limit: int | None = None,
              max_new_tokens: int | None = None) -> dict[str, Any]:
    """Measure every candidate's base q on the experiment's warm start (module docstring) in ``work``; the pilot's
    content.

    Resumable: the evaluation appends to ``work/records.jsonl`` (``--resume``).

    Raises:
        RuntimeError: the evaluation failed.
    """
    import numpy as np

    from rlec.demo import warm_start
    from rlec.eval import evaluate
    from rlec.eval.metrics import grade_records, load_run, question_counts
    from rlec.eval.selective import C, N
    from rlec.experiments import keys as K
    exp = _experiment(name)
    kind = pilot_kind(exp)
    work.mkdir(parents=True, exist_ok=True)
    config = warm_start_config(exp)
    model = warm_start.build(work / "warm_start", config, progress=False)
    data = work / "candidates.parquet"
    candidates = kind.candidates(exp, data, two_digit, limit)
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
    by_id = {qid: c for (_, qid), c in zip(qkeys, counts)}
    for c in candidates:
        c["q"], c["n"] = float(by_id[c["question_id"]][0, C] / by_id[c["question_id"]][0, N]), int(by_id[c["question_id"]][0, N])
    train = [c for c in candidates if c.get("split", "train") == "train"]
    kept, bands = select_prompts(train, exp.pilot_bands)
    qs = np.array([c["q"] for c in train])
    group = kind.group
    out: dict[str, Any] = {
        "schema": PILOT_SCHEMA, "experiment": name, "warm_start_key": warm_start.folder_key(config),
        "samples": PILOT_SAMPLES, "temperature": PILOT_TEMPERATURE, "top_k": -1, "max_new_tokens": budget,
        "band": list(INFORMATIVE_BAND), "n_candidates": len(train), "n_kept": len(kept), "q_mean": float(qs.mean()),
        "share_in_band": float(np.mean([INFORMATIVE_BAND[0] < q < INFORMATIVE_BAND[1] for q in qs])),
        f"by_{group}": {str(d): {"n": int(sum(c[group] == d for c in train)),
                                 "kept": int(sum(c[group] == d and c["question_id"] in kept for c in train)),
                                 "q_mean": float(np.mean([c["q"] for c in train if c[group] == d]))}
                        for d in sorted({c[group] for c in train})},
        "command": f"python -m rlec.experiments.pilot {name}",
        "verdict": None, "why_no_verdict": WHY_NO_VERDICT}
    if bands:
        out["bands"] = bands
    if exp.pilot_figures is not None:
        chosen = {c["question_id"]: c for c in train}
        out["figures"] = exp.pilot_figures([chosen[i] for i in kept])
    probe = [c for c in candidates if c.get("split") == "probe"]
    if probe:
        out.update({"low_q_below": LOW_Q_BELOW, "probe": [c["question_id"] for c in probe],
                    "probe_low_q": int(sum(c["q"] < LOW_Q_BELOW for c in probe)),
                    "probe_q_mean": float(np.mean([c["q"] for c in probe]))})
    out.update({"kept": kept, "candidates": candidates})
    return out


def pilot_kind(exp: Any) -> PilotData:
    """How the pilot serves ``exp``'s training data (its entry of :data:`PILOTS`).

    Raises:
        ValueError: the experiment's data kind has no pilot (names the experiment and its data).
    """
    kind = PILOTS.get(exp.data)
    if kind is None:
        raise ValueError(f"experiment {exp.name!r} trains on {exp.data!r} data: the pilot's candidates are binary "
                         "addition prompts or a pool's problems")
    return kind


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
    p.add_argument("name", help="the experiment (e3, e3_budget: binary additions; passk: its pool of pair_sum problems)")
    p.add_argument("--work", default=None, help="working folder (warm start, candidates, records; default outputs/pilot/<name>)")
    p.add_argument("--out", default=None, help="the pilot file (default: pilot_<name>.json in docs/results)")
    p.add_argument("--two-digit", type=int, default=TWO_DIGIT_CANDIDATES, help="two-digit candidates besides the 100 one-digit sums")
    args = p.parse_args(argv)
    try:
        pilot_kind(_experiment(args.name))
    except ValueError as exc:
        print(f"rlec.experiments.pilot: error: {exc}", file=sys.stderr)
        return 2
    if args.two_digit < 0:
        print(f"rlec.experiments.pilot: error: --two-digit {args.two_digit}: expected >= 0", file=sys.stderr)
        return 2
    result = run_pilot(args.name, Path(args.work or f"outputs/pilot/{args.name}"), two_digit=args.two_digit)
    out = Path(args.out) if args.out else pilot_path(args.name)
    atomic_write_text(out, json.dumps(result, indent=1) + "\n")
    group = next(k for k in result if k.startswith("by_"))
    print(f"{out}: {result['n_kept']} of {result['n_candidates']} candidates kept ({result.get('bands') or tuple(result['band'])}; "
          f"{group}: {result[group]}" + (f"; probe: {result['probe_low_q']} of {len(result['probe'])} with q < "
                                          f"{LOW_Q_BELOW}" if "probe" in result else "") + ")")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
