"""Record format: target labels and grid, validation with line numbers, tail repair, atomic writes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlec.eval.records import (
    DEFAULT_TARGETS,
    DEFAULT_TARGETS_SPEC,
    RecordError,
    RecordWriter,
    atomic_write_json,
    parse_targets,
    read_records,
    repair_tail,
    target_label,
)


def test_default_grid_is_binary_then_tenths() -> None:
    assert parse_targets(DEFAULT_TARGETS_SPEC) == list(DEFAULT_TARGETS)
    assert [target_label(t) for t in DEFAULT_TARGETS] == ["binary"] + [f"0.{k}" for k in range(10)]


def test_target_labels_are_canonical() -> None:
    assert target_label(0.1 * 3) == "0.3" == target_label(0.3)
    assert target_label(0) == "0.0"
    assert parse_targets(" binary, 0.50 ,0.5,0.125") == [None, 0.5, 0.125]


@pytest.mark.parametrize("spec", ["1.0", "binary,x", "-0.1", " , "])
def test_bad_grid_raises(spec: str) -> None:
    with pytest.raises(ValueError):
        parse_targets(spec)


def _write(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines))
    return path


def test_malformed_lines_name_the_line(tmp_path: Path, record_factory) -> None:
    good = json.dumps(record_factory("q1", 0.5, "correct"))
    missing = dict(record_factory("q2", 0.5, "correct"))
    del missing["ground_truth"]
    mismatched = dict(record_factory("q3", 0.5, "correct"), target="0.4")
    path = _write(tmp_path / "r.jsonl", [good, "{not json", json.dumps(missing), "", json.dumps(mismatched), "[1]"])
    with pytest.raises(RecordError, match=r"r\.jsonl:2: invalid JSON"):
        read_records(path)
    records, invalid = read_records(path, skip_invalid=True)
    assert [r["question_id"] for r in records] == ["q1"]
    assert [(bad.line, bad.reason.split(" ")[0]) for bad in invalid] == [(2, "invalid"), (3, "missing"), (5, "key"), (6, "expected")]
    assert "ground_truth" in invalid[1].reason and "'0.4'" in invalid[2].reason


def test_repair_tail_cuts_only_a_partial_last_line(tmp_path: Path, record_factory) -> None:
    path = tmp_path / "r.jsonl"
    with RecordWriter(path) as w:
        w.write_batch([record_factory("q1", None, "correct"), record_factory("q1", 0.0, "abstain")])
    intact = path.read_bytes()
    assert repair_tail(path) == 0
    with path.open("a") as f:
        f.write('{"question_id": "q1", "sou')
    assert repair_tail(path) == len('{"question_id": "q1", "sou')
    assert path.read_bytes() == intact
    assert repair_tail(tmp_path / "absent.jsonl") == 0


def test_atomic_write_leaves_no_temporary_and_refuses_nan(tmp_path: Path) -> None:
    path = atomic_write_json(tmp_path / "out" / "m.json", {"a": 1})
    assert json.loads(path.read_text()) == {"a": 1}
    with pytest.raises(ValueError):
        atomic_write_json(path, {"a": float("nan")})
    assert json.loads(path.read_text()) == {"a": 1}  # the old file survives a failed write
    assert [p.name for p in path.parent.iterdir()] == ["m.json"]
