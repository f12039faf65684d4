"""The data-preparation summary: counts per split, source and objective, the target histogram,
prompt-length statistics and dropped rows by reason, as JSON (``summary.json``) and as a table.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Sequence

import numpy as np

from rlec.data.mix import BINARY, RLEC, TARGET_GRID, Sample

HISTOGRAM_BINS = 9  # 0.1 wide over the default target range [0, 0.9]


def _rows(samples: Sequence[Sample], lengths: np.ndarray) -> dict[str, Any]:
    source = np.array([s.question.source for s in samples], dtype=object)
    by_source = Counter(source.tolist())
    by_obj = Counter(s.objective for s in samples)
    by_both = Counter(f"{s.question.source}/{s.objective}" for s in samples)
    questions = {(s.question.source, s.question.question_id): s.question.drop_scheme for s in samples}
    schemes = Counter(scheme for (src, _), scheme in questions.items() if src == "hotpotqa")
    tokens: dict[str, Any] = {}
    for src in sorted(by_source):
        x = lengths[source == src]
        tokens[src] = {"min": int(x.min()), "median": float(np.median(x)), "max": int(x.max())}
    return {
        "rows": len(samples),
        "questions": dict(sorted(Counter(src for src, _ in questions).items())),
        "by_source": dict(sorted(by_source.items())),
        "by_objective": {k: by_obj.get(k, 0) for k in (BINARY, RLEC)},
        "by_source_objective": dict(sorted(by_both.items())),
        "hotpotqa_drop_schemes": dict(sorted(schemes.items())),
        "prompt_tokens": tokens,
    }


def target_histogram(samples: Sequence[Sample], lo: float, hi: float, bins: int = HISTOGRAM_BINS) -> dict[str, list]:
    """Counts of RLEC targets p in ``bins`` equal bins over [lo, hi] (last bin closed).

    Targets lie on the grid of :data:`rlec.data.mix.TARGET_GRID` steps (0.01), so binning is done in integer grid
    steps: a target of exactly 0.30 counts in [0.30, 0.40), not in the bin below through float round-off.
    """
    steps = np.round(np.array([s.target_p for s in samples if s.objective == RLEC], dtype=np.float64) * TARGET_GRID)
    edges = np.linspace(lo, hi if hi > lo else lo + 1 / TARGET_GRID, bins + 1)
    counts, _ = np.histogram(steps, bins=np.round(edges * TARGET_GRID, 6))
    return {"edges": [round(float(e), 4) for e in edges], "counts": counts.tolist()}


def build_summary(
    *,
    train: Sequence[Sample],
    train_lengths: np.ndarray,
    test: Sequence[Sample],
    test_lengths: np.ndarray,
    target_range: tuple[float, float],
    **sections: Any,
) -> dict[str, Any]:
    """Assemble ``summary.json``: per-split row statistics plus the caller's sections.

    Args:
        train, test: the rows written, with their prompt lengths in tokens (shape (N,)).
        target_range: (target_min, target_max) for the histogram.
        sections: further top-level entries (config, inputs, questions, dropped, warnings...).
    """
    return {
        **sections,
        "splits": {"train": _rows(train, train_lengths), "test": _rows(test, test_lengths)},
        "target_histogram": target_histogram(train, *target_range),
    }


def format_summary(summary: dict[str, Any]) -> str:
    """A plain-text report of a summary: one table of splits, then histogram and drops."""
    lines = [f"{'split':<6} {'source':<9} {'questions':>9} {'rows':>8} {'binary':>7} {'rlec':>7} {'tokens min/med/max':>20}"]
    for split, info in summary["splits"].items():
        for src in info["by_source"]:
            t = info["prompt_tokens"][src]
            lines.append(
                f"{split:<6} {src:<9} {info['questions'][src]:>9} {info['by_source'][src]:>8} "
                f"{info['by_source_objective'].get(f'{src}/binary', 0):>7} {info['by_source_objective'].get(f'{src}/rlec', 0):>7} "
                f"{t['min']:>6}/{t['median']:>6.0f}/{t['max']:>6}"
            )
        lines.append(f"{split:<6} {'all':<9} {sum(info['questions'].values()):>9} {info['rows']:>8} {info['by_objective'][BINARY]:>7} {info['by_objective'][RLEC]:>7}")
    hist = summary["target_histogram"]
    top = max(hist["counts"], default=0) or 1
    lines.append("\ntarget p of RLEC training rows:")
    last = len(hist["counts"]) - 1
    for i, (lo, hi, n) in enumerate(zip(hist["edges"], hist["edges"][1:], hist["counts"])):
        lines.append(f"  [{lo:.2f}, {hi:.2f}{']' if i == last else ')'} {n:>8} {'#' * round(30 * n / top)}")
    for split, info in summary["splits"].items():
        if info["hotpotqa_drop_schemes"]:
            schemes = ", ".join(f"{k} {v}" for k, v in info["hotpotqa_drop_schemes"].items())
            lines.append(f"hotpotqa paragraph drops ({split} questions): {schemes}")
    dropped = summary.get("dropped", {})
    reasons = [f"{k} {v}" for k, v in dropped.items() if isinstance(v, int) and v]
    lines.append("dropped: " + (", ".join(reasons) if reasons else "nothing"))
    if summary.get("warnings"):  # each was logged when it happened; the table only counts them
        lines.append(f"warnings: {len(summary['warnings'])} (logged above; listed in summary.json)")
    return "\n".join(lines)
