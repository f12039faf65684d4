"""``python -m rlec.eval.metrics``: grade raw evaluation records and compute the selective-prediction figures.

Reads the JSON Lines records of ``python -m rlec.eval.evaluate``, grades every response with rlec's
grader (``rlec.grading.grade_batch``: correct / incorrect / abstain), scores it with the RLEC
reward at b = 1 (``rlec.reward.formula.rlec_reward``), and reports per source (environment sources
``<env>/d<difficulty>`` also per environment: :func:`source_groups`) and overall: per target
coverage, selective accuracy, accuracy, abstention rate, mean reward and compliance; and the
headlines accuracy (binary prompt), RLEC score, AOC and AURC with question-level bootstrap
intervals; with several samples per question and target (``rlec.eval.evaluate --n-samples N``),
also the unbiased pass@k for k <= N with intervals (``--pass-k``); and per-question calibration
(:mod:`rlec.eval.calibration`: q_i from ``--q-records`` or the run's own binary-prompt samples, c_i from the
sweep, smECE / ECE / Brier / AUROC per stratum, agreement with "answer iff q_i > p", regret,
monotonicity, hallucination, RiskEval utility). Definitions: ``docs/metrics.md``, ``docs/passk.md``.

Outputs, in ``--out-dir`` (default ``<records stem>.metrics/`` beside the records file, or
``<first stem>-vs-<second stem>.metrics/`` for two, so metrics of different record files never
overwrite each other): ``metrics.json`` (every figure), ``metrics.md`` (the tables, also printed),
``graded-<label>.jsonl`` (each record with its grade and reward) and PNG plots. The folder is
written whole into a temporary sibling and renamed at the end: the outputs of one invocation
appear together or not at all (an existing folder is replaced only if it holds nothing but these
outputs). Two record files (``--compare OTHER`` or two positional inputs) are reported side by
side.

Example::

    python -m rlec.eval.metrics outputs/eval/records.jsonl          # -> outputs/eval/records.metrics/
    python -m rlec.eval.metrics outputs/eval/base.jsonl --compare outputs/eval/rlec.jsonl --out-dir outputs/eval/compare
    python -m rlec.eval.metrics outputs/eval/records.jsonl --q-records outputs/eval/q.jsonl   # q_i: 16 binary samples per question
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import math
import re
import sys
from collections import Counter
from pathlib import Path
from typing import Any, Sequence

import numpy as np
from tqdm import tqdm

from rlec.eval.bootstrap import bootstrap_headlines, pass_at_k_figures
from rlec.eval.cli import HelpFormatter
from rlec.eval.records import (
    BINARY,
    DEFAULT_TARGETS_SPEC,
    atomic_write_json,
    atomic_write_jsonl,
    parse_targets,
    read_records,
    record_key,
    target_label,
)
from rlec.eval.report import calibration_comparison, comparison, markdown_report
from rlec.eval.selective import (
    COUNT_FIELDS,
    HEADLINE_NAMES,
    RATE_NAMES,
    default_ks,
    headlines,
    rates,
    risk_coverage_curve,
)
from rlec.grading import check_gold, grade_batch, has_grader
from rlec.grading.math import DEFAULT_TIMEOUT_S
from rlec.io import atomic_dir, atomic_write_text, check_writable
from rlec.reward.formula import rlec_reward
from rlec.reward.schedule import EVALUATION_B

METRICS_SCHEMA = "rlec.eval.metrics/v1"
ALL = "all"
OUTPUT_PATTERNS = ("metrics.json", "metrics.md", "graded-*.jsonl", "*.png")  # what an --out-dir may hold to be replaced


def _num(x: Any) -> float | None:
    """JSON-safe float: NaN / None -> None."""
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else float(x)


def load_run(path: str | Path, targets: Sequence[float | None], *, skip_invalid: bool = False) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Read a record file and keep the records that can be scored.

    Dropped (and counted in the returned diagnostics): invalid lines (only with
    ``skip_invalid``; a gold answer the grader cannot use, such as "" or an article-only HotpotQA
    answer, makes a line invalid), records whose ``data_source`` has no grader, records whose
    target is not in ``targets``, and repeats of a (source, question, target, sample) key (the
    first one is kept).

    Returns:
        (kept records, ``{"read", "kept", "invalid": [{"line", "reason"}], "unknown_source":
        {data_source: n}, "outside_grid": {target: n}, "duplicates": n}``).

    Raises:
        FileNotFoundError, IsADirectoryError, RecordError: see :func:`rlec.eval.records.read_records`.
        ValueError: no record is left to score.
    """
    records, invalid = read_records(path, skip_invalid=skip_invalid, check=_gradable_gold)
    grid = {target_label(t) for t in targets}
    unknown, outside = Counter(), Counter()
    seen: set[tuple[str, str, str, int]] = set()
    kept, duplicates = [], 0
    for rec in records:
        if not has_grader(rec["data_source"]):
            unknown[rec["data_source"]] += 1
        elif rec["target"] not in grid:
            outside[rec["target"]] += 1
        elif record_key(rec) in seen:
            duplicates += 1
        else:
            seen.add(record_key(rec))
            kept.append(rec)
    diagnostics = {
        "read": len(records) + len(invalid),
        "kept": len(kept),
        "invalid": [{"line": bad.line, "reason": bad.reason} for bad in invalid],
        "unknown_source": dict(unknown),
        "outside_grid": dict(outside),
        "duplicates": duplicates,
    }
    if not kept:
        raise ValueError(f"{path}: no scorable records (diagnostics: {diagnostics})")
    return kept, diagnostics


def _gradable_gold(record: dict[str, Any]) -> None:
    if has_grader(record["data_source"]):  # records of unknown sources are counted, not graded
        try:
            check_gold(record["ground_truth"], record["data_source"])
        except ValueError as exc:
            raise ValueError(f"key 'ground_truth': {exc}") from None


def grade_records(records: Sequence[dict[str, Any]], *, timeout_s: float = DEFAULT_TIMEOUT_S, chunk: int = 512, progress: bool = True) -> list[dict[str, Any]]:
    """Grade and score every record.

    Returns:
        One dict per record: the grade (``rlec.grading.GradeResult.to_dict``) plus ``reward`` =
        R_p^(1)(outcome), with p = ``target_p`` (0 for the binary prompt).
    """
    graded: list[dict[str, Any]] = []
    with tqdm(total=len(records), unit="record", desc="grade", disable=not progress) as bar:
        for start in range(0, len(records), chunk):
            part = records[start : start + chunk]
            results = grade_batch([r["response"] for r in part], [r["ground_truth"] for r in part], [r["data_source"] for r in part], timeout_s=timeout_s)
            for rec, res in zip(part, results):
                g = res.to_dict()
                g["reward"] = rlec_reward(res.outcome, rec.get("target_p") or 0.0, EVALUATION_B)
                graded.append(g)
            bar.update(len(part))
    return graded


def question_counts(records: Sequence[dict[str, Any]], graded: Sequence[dict[str, Any]], targets: Sequence[float | None]) -> tuple[list[tuple[str, str]], np.ndarray]:
    """Per-question counts.

    Returns:
        (question keys (source, question_id) in first-seen order, float array (Q, T, 5) over
        ``COUNT_FIELDS``).
    """
    col = {target_label(t): i for i, t in enumerate(targets)}
    index: dict[tuple[str, str], int] = {}
    rows: list[np.ndarray] = []
    for rec, g in zip(records, graded):
        q = index.setdefault((rec["source"], rec["question_id"]), len(index))
        if q == len(rows):
            rows.append(np.zeros((len(targets), len(COUNT_FIELDS))))
        cell = rows[q][col[rec["target"]]]
        cell[0] += 1
        cell[{"correct": 1, "incorrect": 2, "abstain": 3}[g["outcome"]]] += 1
        cell[4] += g["reward"]
    return list(index), np.stack(rows) if rows else np.zeros((0, len(targets), len(COUNT_FIELDS)))


def group_figures(per_question: np.ndarray, strata: np.ndarray, targets: Sequence[float | None], *, group: str, n_boot: int, ci: float, seed: int, ks: Sequence[int] = ()) -> dict[str, Any]:
    """Every figure of one group of questions (see the module docstring for the layout); ``pass_at_k`` when ``ks``."""
    counts = per_question.sum(axis=0)
    r = rates(counts, targets)
    head = headlines(counts, targets)
    intervals = bootstrap_headlines(per_question, strata, targets, n_boot=n_boot, ci=ci, seed=seed, group=group)
    per_target = []
    for i, t in enumerate(targets):
        row = {"target": target_label(t), "target_p": t}
        row.update({f: int(counts[i, k]) for k, f in enumerate(COUNT_FIELDS[:4])})
        row.update({name: _num(r[name][i]) for name in RATE_NAMES})
        per_target.append(row)
    swept = [i for i, t in enumerate(targets) if t is not None]
    x, y = risk_coverage_curve(r["coverage"][swept], 1.0 - r["selective_accuracy"][swept], r["accuracy"][swept])
    figures = {
        "n_questions": int(per_question.shape[0]),
        "n_records": int(counts[:, 0].sum()),
        "headline": {
            name: {"value": _num(float(head[name])), "ci_low": _num(intervals[name][0]), "ci_high": _num(intervals[name][1])}
            for name in HEADLINE_NAMES
        },
        "per_target": per_target,
        "risk_coverage": {"coverage": [float(v) for v in x], "risk": [float(v) for v in y]},
        "missing_targets": [target_label(t) for i, t in enumerate(targets) if counts[i, 0] == 0],
    }
    if ks:
        rows = pass_at_k_figures(per_question, strata, targets, ks, n_boot=n_boot, ci=ci, seed=seed, group=group)
        figures["pass_at_k"] = [{"target": target_label(row.pop("target_p")), **row} for row in rows]
    return figures


def _natural(name: str) -> list[Any]:
    """Sort key that orders ``maze/d2`` before ``maze/d10``."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]


def source_groups(sources: Sequence[str]) -> dict[str, list[str]]:
    """The reported groups of sources: each source, and each prefix of ``prefix/...`` sources
    (an environment over its difficulties: ``maze`` holds ``maze/d1``, ``maze/d6``, ...), in natural order."""
    groups: dict[str, list[str]] = {}
    for src in sorted(sources, key=_natural):
        if "/" in src:
            groups.setdefault(src.split("/", 1)[0], []).append(src)
        groups.setdefault(src, []).append(src)
    return {name: groups[name] for name in sorted(groups, key=_natural)}


def analyze(records: Sequence[dict[str, Any]], graded: Sequence[dict[str, Any]], targets: Sequence[float | None], *, n_boot: int = 1000, ci: float = 0.95, seed: int = 0, ks: Sequence[int] | None = None,
            calibration: bool = False, q_counts: dict[tuple[str, str], tuple[int, int, int]] | None = None,
            q_source: str | None = None, reference: float | None = None) -> dict[str, Any]:
    """Figures for every source group (:func:`source_groups`) and for all records together
    (questions resampled within sources).

    ``ks``: the k of pass@k; None = 1, 2, 4, ... up to the most samples of a question at a target
    (none with one sample each: pass@1 is the accuracy).
    ``calibration``: add the per-question calibration block (:func:`calibration_block`), with q_i
    from ``q_counts`` ((source, question_id) -> (correct, answered, samples) at the ``reference`` prompt
    (None = binary), read from ``q_source``), else from the records' own reference prompt when every
    question has >= 2 samples there.
    """
    keys, per_question = question_counts(records, graded, targets)
    if ks is None:
        most = int(per_question[..., 0].max()) if per_question.size else 0
        ks = default_ks(most) if most > 1 else []
    sources = sorted({src for src, _ in keys})
    strata = np.array([sources.index(src) for src, _ in keys])
    groups = {ALL: group_figures(per_question, strata, targets, group=ALL, n_boot=n_boot, ci=ci, seed=seed, ks=ks)}
    for name, members in source_groups(sources).items():
        mask = np.isin(strata, [sources.index(m) for m in members])
        groups[name] = group_figures(per_question[mask], strata[mask], targets, group=name, n_boot=n_boot, ci=ci, seed=seed, ks=ks)
    details = Counter(g["detail"] for g in graded)
    finish = Counter(r.get("finish_reason", "unknown") for r in records)
    grading = {
        "outcomes": dict(Counter(g["outcome"] for g in graded)),
        "details": dict(details),
        "format_ok_rate": float(np.mean([g["format_ok"] for g in graded])),
        "timed_out": int(sum(g["timed_out"] for g in graded)),
        "finish_reasons": dict(finish),
    }
    out = {"groups": groups, "grading": grading}
    if calibration:
        out["calibration"] = calibration_block(keys, per_question, targets, q_counts, q_source=q_source, reference=reference,
                                               n_boot=n_boot, ci=ci, seed=seed)
    return out


def stated_targets(targets: Sequence[float | None]) -> list[float]:
    """The grid's targets with a stated p, ascending (the binary prompt left out)."""
    return sorted(float(t) for t in targets if t is not None)


def reference_counts(per_question: np.ndarray, targets: Sequence[float | None], reference: float | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(correct, answered, records) per question at the ``reference`` prompt (None = binary); zeros when the grid lacks it."""
    labels = [target_label(t) for t in targets]
    if target_label(reference) not in labels:
        return (np.zeros(per_question.shape[0]),) * 3
    cell = per_question[:, labels.index(target_label(reference)), :]
    return cell[:, 1].copy(), cell[:, 1] + cell[:, 2], cell[:, 0].copy()


def calibration_block(keys: Sequence[tuple[str, str]], per_question: np.ndarray, targets: Sequence[float | None],
                      q_counts: dict[tuple[str, str], tuple[int, int, int]] | None = None, *, q_source: str | None = None,
                      reference: float | None = None, n_boot: int = 1000, ci: float = 0.95, seed: int = 0) -> dict[str, Any] | None:
    """Per-question calibration of one run (``docs/metrics.md``, "Per-question calibration"): q_i, c_i,
    smECE / ECE / Brier / AUROC of c against the correctness of the run's answers at the ``reference``
    prompt (None = binary; abstentions there carry no label) and the decisions per target, in every
    stratum of :func:`rlec.eval.calibration.strata_masks`.

    Questions without a record at every stated target are left out (counted in ``left_out``).

    Returns:
        ``{"q_source", "q_interval", "c_rule", "grid", "left_out", "strata": {name: figures},
        "questions": [...]}``; None when the grid has fewer than two stated targets.
    """
    from rlec.eval.calibration import QuestionTable, question_rows, strata_figures_all

    grid = stated_targets(targets)
    if len(grid) < 2:
        return None
    cols = [list(targets).index(p) for p in grid]
    sweep = per_question[:, cols, :]
    complete = (sweep[..., 0] > 0).all(axis=1)
    label_correct, label_n, label_records = reference_counts(per_question, targets, reference)
    q_correct = q_n = q_records = None
    source = None
    if q_counts is not None:
        q_correct, q_n, q_records = (np.array([q_counts[k][j] for k in keys], dtype=np.float64) for j in range(3))
        source = q_source
    elif len(keys) and (label_records >= 2).all():
        q_correct, q_n, q_records = label_correct.copy(), label_n.copy(), label_records.copy()
        source = f"the run's own records at the {_prompt_name(reference)}"
    kept = [k for k, ok in zip(keys, complete) if ok]
    sources = sorted({src for src, _ in kept})
    table = QuestionTable(
        keys=kept, strata=np.array([sources.index(src) for src, _ in kept], dtype=int), grid=grid, counts=sweep[complete],
        label_correct=label_correct[complete], label_n=label_n[complete],
        q_correct=None if q_correct is None else q_correct[complete], q_n=None if q_n is None else q_n[complete],
        q_records=None if q_records is None else q_records[complete],
    )  # fmt: skip
    return {
        "reference": target_label(reference),
        "q_source": source,
        "q_interval": f"Wilson score, {ci:.0%}" if source else None,
        "c_rule": "answer-rate area" if table.sampled else "largest answered target",
        "grid": grid,
        "left_out": [{"source": s, "question_id": q} for (s, q), ok in zip(keys, complete) if not ok],
        "strata": strata_figures_all(table, source_groups(sources), n_boot=n_boot, ci=ci, seed=seed),
        "questions": question_rows(table, ci),
    }


def _prompt_name(reference: float | None) -> str:
    return "binary prompt" if reference is None else f"target p = {target_label(reference)}"


def load_q_counts(path: Path, keys: set[tuple[str, str]], *, reference: float | None = None, skip_invalid: bool = False) -> list[dict[str, Any]]:
    """Read a q_i record file (``--q-records``) and check it before any grading.

    Returns:
        Its records at the ``reference`` prompt (None = binary; others ignored), one per (source,
        question_id, sample), for the questions in ``keys``.

    Raises:
        ValueError: no record at the reference prompt, a question of the run without records there, or
            one with fewer than 2 samples (the message names the file, the question and the rule).
    """
    records, _ = read_records(path, skip_invalid=skip_invalid, check=_gradable_gold)
    label, where = target_label(reference), _prompt_name(reference)
    seen: set[tuple[str, str, str, int]] = set()
    kept, samples = [], Counter()
    for rec in records:
        if rec["target"] == label and has_grader(rec["data_source"]) and record_key(rec) not in seen:
            seen.add(record_key(rec))
            kept.append(rec)
            samples[(rec["source"], rec["question_id"])] += 1
    how = f"rlec.eval.evaluate --targets {label} --n-samples N (N >= 2) at the run's sampling settings"
    if not kept:
        raise ValueError(f"--q-records {path}: no record at the {where}; q_i needs samples there ({how})")
    missing = sorted(keys - set(samples))
    if missing:
        raise ValueError(f"--q-records {path}: no sample at the {where} for {len(missing)} of the run's {len(keys)} questions "
                         f"(first: {missing[0][0]}/{missing[0][1]}); evaluate the same questions ({how})")
    few = sorted(k for k in keys if samples[k] < 2)
    if few:
        raise ValueError(f"--q-records {path}: {few[0][0]}/{few[0][1]} has {samples[few[0]]} sample(s) at the {where}; "
                         f"q_i needs N >= 2 ({how})")
    return [r for r in kept if (r["source"], r["question_id"]) in keys]


def _labels(paths: Sequence[Path], given: str | None) -> list[str]:
    if given:
        labels = [s.strip() for s in given.split(",")]
        if len(labels) != len(paths) or len(set(labels)) != len(labels):
            raise ValueError(f"--labels needs {len(paths)} distinct names, got {given!r}")
        return labels
    labels = [p.stem for p in paths]
    if len(set(labels)) < len(labels):
        labels = [f"{p.parent.name}/{p.stem}" for p in paths]
    if len(set(labels)) < len(labels):
        labels = [f"run{i + 1}" for i in range(len(paths))]
    return labels


def _pass_ks(spec: str | None) -> list[int] | None:
    """``--pass-k`` as sorted distinct ints >= 1 (None: the default).

    Raises:
        ValueError: not a comma-separated list of integers >= 1.
    """
    if spec is None:
        return None
    try:
        ks = sorted({int(part) for part in spec.split(",") if part.strip()})
    except ValueError:
        ks = []
    if not ks or ks[0] < 1:
        raise ValueError(f"--pass-k must be comma-separated integers >= 1, got {spec!r}")
    return ks


def default_out_dir(paths: Sequence[Path]) -> Path:
    """The output folder when ``--out-dir`` is not given: derived from the record file name(s).

    ``a/records.jsonl`` -> ``a/records.metrics``; two inputs ``a/base.jsonl``, ``b/rlec.jsonl`` ->
    ``a/base-vs-rlec.metrics``. Different record files never share a default folder.
    """
    first = Path(paths[0])
    stem = first.stem if len(paths) == 1 else "-vs-".join(Path(p).stem for p in paths)
    return first.parent / f"{stem}.metrics"


def check_out_dir(out_dir: Path, inputs: Sequence[Path]) -> None:
    """Refuse an output folder this command may not replace as a whole, before any grading.

    Raises:
        NotADirectoryError: ``out_dir`` is a file, or a path component above it is.
        PermissionError: it cannot be written.
        FileExistsError: it holds files other than metrics outputs (:data:`OUTPUT_PATTERNS`),
            e.g. the record files themselves.
    """
    if out_dir.exists() and not out_dir.is_dir():
        raise NotADirectoryError(f"--out-dir {out_dir}: is a file, not a folder")
    check_writable(out_dir, label="--out-dir")
    if out_dir.is_dir():
        resolved = {p.resolve() for p in inputs}
        foreign = sorted(
            p.name for p in out_dir.iterdir()
            if p.resolve() in resolved or p.is_dir() or not any(fnmatch.fnmatch(p.name, pat) for pat in OUTPUT_PATTERNS)
        )  # fmt: skip
        if foreign:
            raise FileExistsError(
                f"--out-dir {out_dir}: holds files metrics did not write ({', '.join(foreign[:5])}); the folder is replaced "
                "as a whole, so choose an empty or new --out-dir (default: <records stem>.metrics beside the records)"
            )


def _previous_inputs(out_dir: Path) -> list[str]:
    try:
        previous = json.loads((out_dir / "metrics.json").read_text(encoding="utf-8"))
        return [run["path"] for run in previous["runs"].values()]
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return []


def build_parser() -> argparse.ArgumentParser:
    """The command-line interface."""
    p = argparse.ArgumentParser(
        prog="python -m rlec.eval.metrics",
        description="Grade evaluation records and report coverage, selective accuracy, RLEC score and AOC "
        "(definitions: docs/metrics.md). Two inputs are compared side by side.",
        formatter_class=HelpFormatter,
    )
    p.add_argument("records", nargs="+", help="record file(s) from rlec.eval.evaluate (at most two)")
    p.add_argument("--compare", default=None, metavar="OTHER.jsonl", help="a second record file to report side by side")
    p.add_argument("--labels", default=None, help="comma-separated run names (default: file names)")
    p.add_argument("--out-dir", default=None, help="output folder, replaced as a whole (default: <records stem>.metrics beside the "
                   "first input; <first stem>-vs-<second stem>.metrics for two)")
    p.add_argument("--targets", default=DEFAULT_TARGETS_SPEC, help="target grid; records outside it are counted and left out")
    p.add_argument("--bootstrap", type=int, default=1000, help="bootstrap replicates (0 = no intervals)")
    p.add_argument("--ci", type=float, default=0.95, help="confidence-interval mass, in (0, 1)")
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed")
    p.add_argument("--pass-k", default=None, metavar="K,K,...", help="k values of pass@k (default with several samples per "
                   "question and target: 1, 2, 4, ... up to the samples; unbiased estimator, questions with fewer samples left out)")
    p.add_argument("--timeout-s", type=float, default=DEFAULT_TIMEOUT_S, help="math-verify time limit per answer in seconds, > 0")
    p.add_argument("--skip-invalid", action="store_true", help="skip malformed record lines (reported) instead of failing")
    p.add_argument("--q-records", nargs="+", default=None, metavar="Q.jsonl",
                   help="per run, a record file of N >= 2 samples per question at the binary prompt (rlec.eval.evaluate --targets "
                   "binary --n-samples N) that q_i is estimated from; '-' = the run's own binary-prompt records. Without it, q_i "
                   "comes from the run's own binary prompt when every question has >= 2 samples there")
    p.add_argument("--q-target", default=BINARY, metavar="binary|P",
                   help="the prompt q_i is sampled at and the calibration labels are read at: 'binary' (the prompt without a "
                   "target, default) or a stated target of the grid, for a model whose answers differ between the two")
    p.add_argument("--no-calibration", action="store_true", help="skip the per-question calibration figures (smECE, ECE, Brier, "
                   "AUROC, agreement, regret, monotonicity)")
    p.add_argument("--no-plots", action="store_true", help="do not write PNG plots")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    return p


def _check_settings(args: argparse.Namespace) -> None:
    if args.bootstrap < 0:
        raise ValueError(f"--bootstrap must be >= 0 (0 = no intervals), got {args.bootstrap}")
    if not 0.0 < args.ci < 1.0:
        raise ValueError(f"--ci must be in (0, 1), e.g. 0.95, got {args.ci}")
    if not 0.0 < args.timeout_s < math.inf:
        raise ValueError(f"--timeout-s must be a positive number of seconds, got {args.timeout_s}")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m rlec.eval.metrics`` / ``rlec-metrics``; returns the exit code.

    Exit status: 0 success; 2 bad input (one line on stderr, nothing written); 130 interrupted
    (nothing written).
    """
    args = build_parser().parse_args(argv)
    paths = [Path(p) for p in args.records] + ([Path(args.compare)] if args.compare else [])
    try:  # every input and setting is checked before any grading
        if len(paths) > 2:
            raise ValueError(f"at most two record files can be compared, got {len(paths)}")
        _check_settings(args)
        targets = parse_targets(args.targets)
        ks = _pass_ks(args.pass_k)
        labels = _labels(paths, args.labels)
        out_dir = Path(args.out_dir) if args.out_dir else default_out_dir(paths)
        check_out_dir(out_dir, paths)
        loaded = [load_run(p, targets, skip_invalid=args.skip_invalid) for p in paths]
        q_loaded = _q_inputs(args, paths, loaded, targets)
    except (ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    previous = [p for p in _previous_inputs(out_dir) if p not in {str(path) for path in paths}]
    try:
        result, written = _write_outputs(args, paths, labels, loaded, targets, out_dir, ks, q_loaded)
    except KeyboardInterrupt:
        print(f"\ninterrupted: nothing written to {out_dir}", file=sys.stderr)
        return 130
    print(markdown_report(result, per_target_groups=[ALL]))
    if previous:
        print(f"note: replaced the metrics of {', '.join(previous)} in {out_dir}", file=sys.stderr)
    print(f"(per-source tables: {out_dir / 'metrics.md'})")
    print("written: " + ", ".join(str(out_dir / p.name) for p in written))
    return 0


def _q_inputs(args: argparse.Namespace, paths: list[Path], loaded: list[tuple[list[dict[str, Any]], dict[str, Any]]],
              targets: list[float | None]) -> list[tuple[Path, list[dict[str, Any]]] | None]:
    """Per run, the ``--q-records`` file and its checked binary-prompt records (None: the run's own), before grading.

    Raises:
        ValueError: ``--q-records`` with another count than the runs, with ``--no-calibration``, a grid with
            fewer than two stated targets, or a bad q file (:func:`load_q_counts`).
    """
    if args.q_target.strip().lower() != BINARY:
        _reference(args, targets)  # a stated --q-target must be a target of the grid
    if args.q_records is None:
        return [None] * len(paths)
    if args.no_calibration:
        raise ValueError("--q-records needs the calibration figures: drop --no-calibration")
    if len(args.q_records) != len(paths):
        raise ValueError(f"--q-records needs one file per run ({len(paths)}; '-' = the run's own binary prompt), got {len(args.q_records)}")
    if len(stated_targets(targets)) < 2:
        raise ValueError(f"--targets {args.targets!r}: c_i and the decisions need at least two targets with a stated p")
    reference = _reference(args, targets)
    label, where = target_label(reference), _prompt_name(reference)
    out: list[tuple[Path, list[dict[str, Any]]] | None] = []
    for q_path, (records, _) in zip(args.q_records, loaded):
        if q_path == "-":
            keys = {(r["source"], r["question_id"]) for r in records}
            few = Counter((r["source"], r["question_id"]) for r in records if r["target"] == label)
            short = sorted(k for k in keys if few[k] < 2)
            if short:
                raise ValueError(f"--q-records -: {short[0][0]}/{short[0][1]} has {few[short[0]]} sample(s) at the {where} of "
                                 "its run; q_i needs N >= 2 (rlec.eval.evaluate --n-samples N)")
            out.append(None)
        else:
            path = Path(q_path)
            keys = {(r["source"], r["question_id"]) for r in records}
            out.append((path, load_q_counts(path, keys, reference=reference, skip_invalid=args.skip_invalid)))
    return out


def _reference(args: argparse.Namespace, targets: Sequence[float | None]) -> float | None:
    """``--q-target`` as a grid target (None = binary).

    Raises:
        ValueError: not 'binary' or a number, or not a target of ``--targets`` (the labels are read there).
    """
    spec = args.q_target.strip()
    try:
        reference = None if spec.lower() == BINARY else parse_targets(spec)[0]
    except ValueError:
        raise ValueError(f"--q-target must be 'binary' or a target p in [0, 1), got {args.q_target!r}") from None
    if target_label(reference) not in {target_label(t) for t in targets}:
        raise ValueError(f"--q-target {target_label(reference)}: not in --targets {args.targets!r}; the calibration labels are the "
                         "run's answers at that prompt")
    return reference


def _write_outputs(
    args: argparse.Namespace, paths: list[Path], labels: list[str], loaded: list[tuple[list[dict[str, Any]], dict[str, Any]]],
    targets: list[float | None], out_dir: Path, ks: list[int] | None = None,
    q_loaded: list[tuple[Path, list[dict[str, Any]]] | None] | None = None,
) -> tuple[dict[str, Any], list[Path]]:
    """Grade, analyse and write every output into a temporary folder that replaces ``out_dir`` at the end.

    Returns:
        (the metrics result, the files written, as paths inside the temporary folder).
    """
    result: dict[str, Any] = {
        "schema": METRICS_SCHEMA,
        "settings": {"targets": [target_label(t) for t in targets], "b": EVALUATION_B, "bootstrap": args.bootstrap, "ci": args.ci, "seed": args.seed},
        "runs": {},
    }
    reference = None if args.no_calibration or args.q_target.strip().lower() == BINARY else _reference(args, targets)
    with atomic_dir(out_dir) as tmp:
        for label, path, (records, diagnostics), q_input in zip(labels, paths, loaded, q_loaded or [None] * len(paths)):
            graded = grade_records(records, timeout_s=args.timeout_s, progress=not args.quiet)
            q_counts = q_source = None
            if q_input is not None:
                q_path, q_records = q_input
                q_graded = grade_records(q_records, timeout_s=args.timeout_s, progress=not args.quiet)
                q_keys, q_cells = question_counts(q_records, q_graded, [reference])
                q_counts = {k: (int(q_cells[i, 0, 1]), int(q_cells[i, 0, 1] + q_cells[i, 0, 2]), int(q_cells[i, 0, 0]))
                            for i, k in enumerate(q_keys)}
                q_source = str(q_path)
            run = analyze(records, graded, targets, n_boot=args.bootstrap, ci=args.ci, seed=args.seed, ks=ks,
                          calibration=not args.no_calibration, q_counts=q_counts, q_source=q_source, reference=reference)
            result["runs"][label] = {"path": str(path), "records": diagnostics, **run}
            atomic_write_jsonl(tmp / f"graded-{label.replace('/', '_')}.jsonl", ({**rec, "grade": g} for rec, g in zip(records, graded)))
        if len(labels) == 2:
            result["comparison"] = comparison(result)
            result["calibration_comparison"] = calibration_comparison(result)
            first, second = ({(r["source"], r["question_id"]) for r in records} for records, _ in loaded)
            result["question_overlap"] = {"common": len(first & second), "only_first": len(first - second), "only_second": len(second - first)}
            if first != second:
                print(f"warning: {labels[0]} and {labels[1]} share {len(first & second)} questions; {len(first - second)} only in "
                      f"{labels[0]}, {len(second - first)} only in {labels[1]}", file=sys.stderr)
        atomic_write_json(tmp / "metrics.json", result)
        atomic_write_text(tmp / "metrics.md", markdown_report(result))
        written = [tmp / "metrics.json", tmp / "metrics.md"]
        if not args.no_plots:
            from rlec.eval.plots import write_plots

            written += write_plots(result, tmp)
    return result, written


if __name__ == "__main__":
    sys.exit(main())
