"""The evaluation set as the evaluator reads it: one :class:`EvalItem` per question.

Input is data preparation's evaluation parquet (verl schema; the data contract of the project):
``data_source`` picks the grader, ``extra_info.task_text`` is re-rendered for every target,
``extra_info.question_id`` / ``extra_info.source`` identify the question and
``reward_model.ground_truth`` is the gold answer.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rlec.data.contract import field as _field
from rlec.grading import TASKS, has_grader


@dataclass(frozen=True)
class EvalItem:
    """One question of the evaluation set (the fields the evaluator needs from a parquet row)."""

    question_id: str
    source: str
    data_source: str
    task_text: str
    ground_truth: str
    index: int
    drop_scheme: str = ""


def load_eval_items(path: str | Path, limit: int | None = None) -> list[EvalItem]:
    """Read the evaluation parquet (data contract in the project brief) into :class:`EvalItem` s.

    Rows repeating a (source, question_id) with the same task text are dropped (one question is
    evaluated once per target and sample); repeats with a different task text are an error.

    Args:
        path: the parquet file.
        limit: keep ``limit`` questions taken round-robin over the data sources (the first of
            each source, then the second, ...), returned in file order. The evaluation file
            lists one source after the other, so "the first N rows" would test one source only.

    Raises:
        FileNotFoundError: no such file.
        IsADirectoryError: ``path`` is a folder.
        ValueError: not a parquet file, no rows, a row without ``extra_info.task_text`` / ``question_id`` / ``source`` or
            ``reward_model.ground_truth``, an empty value, an unknown ``data_source``, or a
            conflicting repeat (the message names the file, the row and the key), or
            ``limit < 1``.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(f"evaluation parquet {path} is a folder; expected a file such as {path / 'test.parquet'}")
    if not path.is_file():
        raise FileNotFoundError(f"evaluation parquet {path} does not exist")
    try:
        table = pq.read_table(path)
    except (pa.ArrowException, OSError) as exc:
        raise ValueError(f"evaluation parquet {path}: not a readable parquet file ({str(exc).splitlines()[0]})") from None
    items: dict[tuple[str, str], EvalItem] = {}
    for i, row in enumerate(table.to_pylist()):
        where = f"{path}: row {i}"
        data_source = _field(row, "data_source", where)
        if not has_grader(data_source):
            raise ValueError(f"{where}: data_source {data_source!r} has no grader; known: {sorted(TASKS)}")
        values = {}
        for key in ("extra_info.task_text", "extra_info.question_id", "extra_info.source", "reward_model.ground_truth"):
            value = _field(row, key, where)
            if isinstance(value, (int, float)) and not isinstance(value, bool) and key != "extra_info.task_text":
                value = str(value)
            if not isinstance(value, str) or not value.strip():
                raise ValueError(f"{where}: key {key!r} must be a non-empty string, got {value!r}")
            values[key.split(".")[1]] = value
        item = EvalItem(
            question_id=values["question_id"],
            source=values["source"],
            data_source=data_source,
            task_text=values["task_text"],
            ground_truth=values["ground_truth"],
            index=i,
            drop_scheme=str((row.get("extra_info") or {}).get("drop_scheme") or ""),
        )
        key = (item.source, item.question_id)
        if key in items:
            if items[key].task_text != item.task_text:
                raise ValueError(f"{where}: question {key} repeats row {items[key].index} with a different task_text")
            continue
        items[key] = item
    if not items:
        raise ValueError(f"{path}: no rows")
    if limit is not None and limit < 1:
        raise ValueError(f"{path}: limit must be >= 1, got {limit}")
    if limit is None or limit >= len(items):
        return list(items.values())
    by_source: dict[str, list[EvalItem]] = {}
    for item in items.values():
        by_source.setdefault(item.data_source, []).append(item)
    rank = {it.index: k for queue in by_source.values() for k, it in enumerate(queue)}  # position within its source
    keep = sorted(items.values(), key=lambda it: (rank[it.index], it.index))[:limit]
    return sorted(keep, key=lambda it: it.index)
