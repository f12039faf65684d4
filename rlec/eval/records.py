"""Raw evaluation records (JSON Lines), the target grid, durable appends and atomic writes.

One record per (question, target, sample), written by ``rlec.eval.evaluate`` and read by
``rlec.eval.metrics``. A record is self-contained (it carries the gold answer and the exact prompt), so
grading rules can change without regenerating. Keys (:data:`REQUIRED_KEYS` are checked on read):

    schema          "rlec.eval.record/v1"
    question_id     str, stable per question (DAPO index / HotpotQA _id)
    source          "math" | "hotpotqa" (the group metrics are reported by)
    data_source     the grader key (``rlec.grading.TASKS``)
    target          "binary" or the target p as text ("0.0", "0.3"): see :func:`target_label`
    target_p        null for the binary prompt, else p in [0, 1)
    objective       "binary" | "rlec"
    sample_index    int >= 0
    ground_truth    the gold answer
    prompt          the exact prompt text given to the model (chat template applied)
    response        the decoded response
    prompt_tokens, response_tokens, finish_reason ("stop" | "length"),
    engine, engine_version, model, sampling {temperature, top_p, max_new_tokens, seed},
    sample_seed, index (row of the evaluation parquet), drop_scheme, timestamp (UTC, ISO 8601)

The key of a record is (source, question_id, target, sample_index): ``--resume`` skips keys
already present; metrics reports duplicates.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

from rlec.io import atomic_write_text
from rlec.reward.formula import check_target

SCHEMA = "rlec.eval.record/v1"
BINARY = "binary"
DEFAULT_TARGETS: tuple[float | None, ...] = (None,) + tuple(round(0.1 * k, 1) for k in range(10))
DEFAULT_TARGETS_SPEC = "binary,0.0,0.1,0.2,0.3,0.4,0.5,0.6,0.7,0.8,0.9"
REQUIRED_KEYS: dict[str, tuple[type, ...]] = {
    "question_id": (str,),
    "source": (str,),
    "data_source": (str,),
    "target": (str,),
    "sample_index": (int,),
    "ground_truth": (str,),
    "response": (str,),
}

Key = tuple[str, str, str, int]


class RecordError(ValueError):
    """A record file line that is not a valid record (the message names file and line)."""


def target_label(p: float | None) -> str:
    """The canonical text of a target: "binary" for None, else ``repr(round(p, 6))`` ("0.3").

    Raises:
        ValueError: p outside [0, 1).
    """
    return BINARY if p is None else repr(round(check_target(p), 6))


def parse_targets(spec: str) -> list[float | None]:
    """Parse a comma-separated target grid such as ``"binary,0.0,0.5,0.9"``.

    Returns:
        The targets in the given order (None = the binary prompt), duplicates removed.

    Raises:
        ValueError: an entry that is neither "binary" nor a number in [0, 1), or an empty grid.
    """
    out: list[float | None] = []
    for raw in spec.split(","):
        item = raw.strip()
        if not item:
            continue
        if item.lower() == BINARY:
            value: float | None = None
        else:
            try:
                value = round(check_target(float(item)), 6)
            except ValueError:
                raise ValueError(f"target grid entry {item!r}: expected 'binary' or a number in [0, 1)") from None
        if value not in out:
            out.append(value)
    if not out:
        raise ValueError(f"empty target grid {spec!r}")
    return out


def record_key(record: dict[str, Any]) -> Key:
    """(source, question_id, target, sample_index) of a record."""
    return (record["source"], record["question_id"], record["target"], int(record["sample_index"]))


def validate_record(record: Any) -> dict[str, Any]:
    """Check a parsed record's required keys, types and target; return it.

    Raises:
        ValueError: not an object, a missing key, a wrong type, or a ``target`` / ``target_p``
            pair that disagrees (the message names the key and what was expected).
    """
    if not isinstance(record, dict):
        raise ValueError(f"expected a JSON object, got {type(record).__name__}")
    for key, types in REQUIRED_KEYS.items():
        if key not in record:
            raise ValueError(f"missing key {key!r}")
        value = record[key]
        if not isinstance(value, types) or isinstance(value, bool):
            raise ValueError(f"key {key!r} must be {'/'.join(t.__name__ for t in types)}, got {value!r}")
    if record["sample_index"] < 0:
        raise ValueError(f"key 'sample_index' must be >= 0, got {record['sample_index']}")
    p = record.get("target_p")
    if p is not None and (not isinstance(p, (int, float)) or isinstance(p, bool) or math.isnan(p)):
        raise ValueError(f"key 'target_p' must be null or a number in [0, 1), got {p!r}")
    try:
        expected = target_label(p)
    except ValueError as exc:
        raise ValueError(f"key 'target_p': {exc}") from None
    if record["target"] != expected:
        raise ValueError(f"key 'target' is {record['target']!r} but target_p {p!r} gives {expected!r}")
    return record


@dataclass(frozen=True)
class InvalidLine:
    """A skipped line of a record file: 1-based line number and the reason."""

    line: int
    reason: str


def read_records(
    path: str | os.PathLike[str],
    *,
    skip_invalid: bool = False,
    hint: str = "pass --skip-invalid to skip bad lines",
    check: Callable[[dict[str, Any]], None] | None = None,
) -> tuple[list[dict[str, Any]], list[InvalidLine]]:
    """Read and validate a record file.

    Blank lines are ignored. A last line without its newline (a write cut by a crash) counts as
    invalid like any other bad line, and so does a line that is not UTF-8 text.

    Args:
        path: the JSON Lines file.
        skip_invalid: skip bad lines (returned in the second list) instead of raising.
        hint: what the error message tells the user to do about a bad line.
        check: a further check of each valid record (raises ValueError naming the problem),
            e.g. that its gold answer can be graded; its failures are bad lines too.

    Returns:
        (records in file order, skipped lines).

    Raises:
        FileNotFoundError: no such file.
        IsADirectoryError: ``path`` is a folder.
        RecordError: a bad line while ``skip_invalid`` is false: ``"<path>:<line>: <reason> (<hint>)"``.
    """
    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(f"record file {path} is a folder; expected a JSON Lines file written by rlec.eval.evaluate")
    if not path.is_file():
        raise FileNotFoundError(f"record file {path} does not exist")
    records: list[dict[str, Any]] = []
    invalid: list[InvalidLine] = []
    with path.open("rb") as f:
        for lineno, raw in enumerate(f, start=1):
            try:
                line = raw.decode("utf-8")
                if not line.strip():
                    continue
                record = validate_record(json.loads(line))
                if check is not None:
                    check(record)
                records.append(record)
            except (json.JSONDecodeError, UnicodeDecodeError, ValueError) as exc:
                if isinstance(exc, json.JSONDecodeError):
                    reason = f"invalid JSON ({exc.msg})"
                elif isinstance(exc, UnicodeDecodeError):
                    reason = f"not UTF-8 text (byte 0x{raw[exc.start]:02x} at column {exc.start + 1})"
                else:
                    reason = str(exc)
                if not skip_invalid:
                    raise RecordError(f"{path}:{lineno}: {reason} ({hint})") from None
                invalid.append(InvalidLine(lineno, reason))
    return records, invalid


def repair_tail(path: str | os.PathLike[str]) -> int:
    """Cut a partial last line (no trailing newline) left by an interrupted append.

    Returns:
        The number of bytes removed (0 when the file ends with a newline, is empty or absent).
    """
    path = Path(path)
    if not path.is_file() or path.stat().st_size == 0:
        return 0
    with path.open("rb+") as f:
        f.seek(0, os.SEEK_END)
        size = f.tell()
        f.seek(size - 1)
        if f.read(1) == b"\n":
            return 0
        pos, chunk = size, 1 << 16
        while pos > 0:  # find the last newline, scanning backwards
            start = max(0, pos - chunk)
            f.seek(start)
            nl = f.read(pos - start).rfind(b"\n")
            if nl >= 0:
                keep = start + nl + 1
                break
            pos = start
        else:
            keep = 0
        f.truncate(keep)
        f.flush()
        os.fsync(f.fileno())
        return size - keep


class RecordWriter:
    """Append records to a JSON Lines file, one batch per write, flushed and fsynced.

    A crash can cut at most the batch being written; :func:`repair_tail` removes a partial line.
    Use as a context manager.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._f = self.path.open("a", encoding="utf-8")

    def write_batch(self, records: Iterable[dict[str, Any]]) -> int:
        """Append records durably; returns how many were written.

        Raises:
            OSError: the write failed (e.g. ``ENOSPC``); the error names the file.
        """
        lines = [json.dumps(r, ensure_ascii=False) + "\n" for r in records]
        try:
            self._f.write("".join(lines))
            self._f.flush()
            os.fsync(self._f.fileno())
        except OSError as exc:  # e.g. a full disk: name the file (a partial last line is cut at --resume)
            raise OSError(exc.errno, exc.strerror or str(exc), str(self.path)) from exc
        return len(lines)

    def close(self) -> None:
        """Close the file (a failed flush of a full disk is not raised again: the write already raised)."""
        try:
            self._f.close()
        except OSError:
            pass

    def __enter__(self) -> "RecordWriter":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def atomic_write_json(path: str | os.PathLike[str], obj: Any) -> Path:
    """Write ``obj`` as indented JSON atomically (NaN is refused: use None for undefined values)."""
    return atomic_write_text(path, json.dumps(obj, indent=2, ensure_ascii=False, allow_nan=False) + "\n")


def atomic_write_jsonl(path: str | os.PathLike[str], records: Iterable[dict[str, Any]]) -> Path:
    """Write records as JSON Lines atomically."""
    return atomic_write_text(path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))
