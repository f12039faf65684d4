"""Read input records from JSON, JSON Lines or parquet files, with errors that name the spot.

Layouts accepted (chosen by file suffix; ``.json`` files are inspected):

- ``.jsonl`` / ``.ndjson``: one JSON object per line (blank lines ignored);
- ``.json``: a list of objects (HotpotQA and DAPO exports), a *columnar* dict of equal-length
  lists (``{"_id": [...], "question": [...], ...}``, what some copies and ``Dataset.to_dict()``
  write), or a single object with a ``"data"`` list;
- ``.parquet``: read in record batches with pyarrow (nested columns become dicts and lists).

Everything here is format plumbing: which keys a record needs is decided by
:mod:`rlec.data.sources`. Records are yielded with their 0-based row index so every error can
name ``file, row, key``.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

JSON_SUFFIXES = (".json",)
JSONL_SUFFIXES = (".jsonl", ".ndjson")
PARQUET_SUFFIXES = (".parquet",)
PARQUET_BATCH_ROWS = 8192


class DataError(ValueError):
    """Bad input data: names the file, the 0-based row index (if any) and the key (if any).

    Attributes:
        path: the input file.
        row: 0-based row index within the file, or None for file-level errors.
        key: the offending key (dotted path, e.g. ``reward_model.ground_truth``), or None.
        reason: what was expected / found.
    """

    def __init__(self, path: str | os.PathLike[str], reason: str, *, row: int | None = None, key: str | None = None):
        self.path, self.row, self.key, self.reason = str(path), row, key, reason
        where = self.path + (f", row {row}" if row is not None else "") + (f", key {key!r}" if key else "")
        super().__init__(f"{where}: {reason}")


@dataclass
class InvalidRows:
    """Rows skipped under ``--skip-invalid``: counts per (file, reason) and the first messages.

    Attributes:
        counts: ``{file: {reason: n}}``; reason is the short key, e.g. ``missing key 'answer'``.
        examples: the first :attr:`max_examples` full error messages, for the summary.
    """

    counts: dict[str, Counter] = field(default_factory=dict)
    examples: list[str] = field(default_factory=list)
    max_examples: int = 20

    def add(self, err: DataError) -> None:
        """Record one skipped row."""
        self.counts.setdefault(err.path, Counter())[err.reason.split(":")[0]] += 1
        if len(self.examples) < self.max_examples:
            self.examples.append(str(err))

    @property
    def total(self) -> int:
        """Number of skipped rows over all files."""
        return sum(sum(c.values()) for c in self.counts.values())

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable form (sorted keys) for ``summary.json``."""
        return {
            "total": self.total,
            "by_file": {f: dict(sorted(c.items())) for f, c in sorted(self.counts.items())},
            "examples": list(self.examples),
        }


def file_sha256(path: str | os.PathLike[str]) -> str:
    """Hex sha256 of a file's bytes (provenance in ``summary.json``)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _columnar_to_rows(path: Path, obj: dict[str, Any]) -> list[dict[str, Any]]:
    lengths = {k: len(v) for k, v in obj.items()}
    if len(set(lengths.values())) != 1:
        raise DataError(path, f"columnar JSON (a dict of lists) needs equal-length columns, got lengths {lengths}")
    n = next(iter(lengths.values()))
    keys = list(obj)
    return [{k: obj[k][i] for k in keys} for i in range(n)]


_TOO_DEEP = ("JSON nested deeper than Python's parser can read (about sys.getrecursionlimit() = "
             f"{sys.getrecursionlimit()} levels of lists or objects); an input record is a flat object of strings")


def _json_rows(path: Path) -> list[Any]:
    data = path.read_bytes()
    try:
        obj = json.loads(data.decode("utf-8-sig"))
    except json.JSONDecodeError as exc:
        raise DataError(path, f"unreadable JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}") from None
    except RecursionError:
        raise DataError(path, _TOO_DEEP) from None
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise DataError(path, f"not UTF-8 text on line {line} ({exc.reason} at byte {exc.start})") from None
    if isinstance(obj, list):
        return obj
    if isinstance(obj, dict):
        if isinstance(obj.get("data"), list):
            return obj["data"]
        if obj and all(isinstance(v, list) for v in obj.values()):
            return _columnar_to_rows(path, obj)
    raise DataError(path, "expected a JSON list of records, a dict of equal-length lists, or {'data': [...]}")


def _jsonl_rows(path: Path) -> Iterator[tuple[int, Any]]:
    row = 0
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise DataError(path, f"not UTF-8 text on line {lineno} ({exc.reason} at column {exc.start + 1})", row=row) from None
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DataError(path, f"unreadable JSON on line {lineno}, column {exc.colno}: {exc.msg}", row=row) from None
            except RecursionError:
                raise DataError(path, f"line {lineno}: {_TOO_DEEP}", row=row) from None
            yield row, record
            row += 1


def _parquet_rows(path: Path) -> Iterator[tuple[int, Any]]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(path)
    except (pa.ArrowInvalid, OSError) as exc:
        raise DataError(path, f"unreadable parquet: {exc}") from None
    row = 0
    for batch in pf.iter_batches(batch_size=PARQUET_BATCH_ROWS):
        for rec in batch.to_pylist():
            yield row, rec
            row += 1


def iter_records(path: str | os.PathLike[str]) -> Iterator[tuple[int, Any]]:
    """Yield ``(row_index, record)`` for every record of an input file.

    Args:
        path: a ``.json``, ``.jsonl``/``.ndjson`` or ``.parquet`` file (layouts: module docstring).

    Yields:
        (0-based row index, record). Records are normally dicts; anything else is passed on so
        that the row-level check (skippable with ``--skip-invalid``) reports it. Parquet and
        JSON Lines are streamed; a ``.json`` file is parsed whole (the format offers nothing else).

    Raises:
        FileNotFoundError: ``path`` does not exist (the message names it).
        DataError: a folder, unknown suffix, not UTF-8, unreadable JSON / parquet, or a
            top-level layout that is none of the above.
    """
    p = Path(path)
    if p.is_dir():
        raise DataError(p, "is a folder; expected a .json, .jsonl, .ndjson or .parquet file")
    if not p.is_file():
        raise FileNotFoundError(f"input file {p} does not exist")
    suffix = p.suffix.lower()
    if suffix in JSONL_SUFFIXES:
        rows: Iterator[tuple[int, Any]] = _jsonl_rows(p)
    elif suffix in PARQUET_SUFFIXES:
        rows = _parquet_rows(p)
    elif suffix in JSON_SUFFIXES:
        rows = enumerate(_json_rows(p))
    else:
        raise DataError(p, f"unknown file type {suffix!r}; expected .json, .jsonl, .ndjson or .parquet")
    yield from rows
