"""Bad input: each case stops with an error naming file, row and key, or is skipped and counted."""

from __future__ import annotations

import copy
import json

import pytest

from rlec.data.prepare import main
from rlec.data.readers import DataError, InvalidRows, iter_records
from rlec.data.sources import load_items, parse_hotpot, parse_math


@pytest.fixture
def dapo(sample_files):
    return [r for _, r in iter_records(sample_files["dapo"])]


@pytest.fixture
def hotpot(sample_files):
    return json.loads(sample_files["hotpot_train"].read_text())


def _error(path, parse) -> DataError:
    with pytest.raises(DataError) as info:
        load_items(path, parse)
    return info.value


def test_missing_file_names_the_path(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.json"):
        load_items(tmp_path / "nope.json", parse_math)


def test_unreadable_json_names_file_and_line(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('[{"problem": "1+1", "answer": "2"},\n {"problem": oops}]')
    err = _error(bad, parse_math)
    assert err.path == str(bad) and "line 2" in str(err)


def test_unreadable_jsonl_names_row_and_line(tmp_path, dapo):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(dapo[0]) + "\n\n" + '{"prompt": [}\n')
    err = _error(bad, parse_math)
    assert err.row == 1 and "line 3" in str(err)


def test_unknown_suffix_and_unreadable_parquet(tmp_path):
    (tmp_path / "x.csv").write_text("a,b\n")
    assert "unknown file type" in str(_error(tmp_path / "x.csv", parse_math))
    (tmp_path / "x.parquet").write_bytes(b"not parquet")
    assert "unreadable parquet" in str(_error(tmp_path / "x.parquet", parse_math))


CASES = [
    # (source, row edit, key named in the error, reason fragment)
    ("dapo", lambda r: r.pop("reward_model"), "reward_model", "missing key"),
    ("dapo", lambda r: r["reward_model"].pop("ground_truth"), "reward_model.ground_truth", "missing key"),
    ("dapo", lambda r: r["reward_model"].update(ground_truth="  "), "reward_model.ground_truth", "empty gold answer"),
    ("dapo", lambda r: r["reward_model"].update(ground_truth=True), "reward_model.ground_truth", "wrong type"),
    ("dapo", lambda r: r.update(prompt="Solve x"), "prompt", "wrong type"),
    ("dapo", lambda r: r.update(extra_info={"index": [1]}), "extra_info.index", "wrong type"),
    ("hotpot", lambda r: r.pop("answer"), "answer", "missing key"),
    ("hotpot", lambda r: r.update(answer=""), "answer", "empty gold answer"),
    ("hotpot", lambda r: r.pop("_id"), "_id", "missing key"),
    ("hotpot", lambda r: r.update(question=7), "question", "wrong type"),
    ("hotpot", lambda r: r.update(context="Varnholt is a town."), "context", "wrong type"),
    ("hotpot", lambda r: r["context"].__setitem__(1, ["Title only"]), "context[1]", "wrong type"),
    ("hotpot", lambda r: r["supporting_facts"].__setitem__(0, ["Varnholt", "0"]), "supporting_facts[0]", "wrong type"),
]


@pytest.mark.parametrize("source,edit,key,reason", CASES, ids=[f"{c[0]}-{c[2]}-{c[3]}" for c in CASES])
def test_bad_row_names_file_row_and_key(source, edit, key, reason, dapo, hotpot, tmp_path):
    rows = copy.deepcopy(dapo if source == "dapo" else hotpot)
    edit(rows[3])
    path = tmp_path / f"{source}.json"
    path.write_text(json.dumps(rows))
    err = _error(path, parse_math if source == "dapo" else parse_hotpot)
    assert (err.path, err.row, err.key) == (str(path), 3, key)
    assert reason in err.reason
    assert f"{path}, row 3, key {key!r}" in str(err)


def test_record_that_is_not_an_object(tmp_path):
    path = tmp_path / "m.json"
    path.write_text(json.dumps([{"problem": "1+1", "answer": "2"}, 5]))
    err = _error(path, parse_math)
    assert err.row == 1 and "expected a JSON object" in str(err)


def test_math_record_of_unknown_shape(tmp_path):
    path = tmp_path / "m.json"
    path.write_text(json.dumps([{"text": "1+1", "label": "2"}]))
    assert "expected a DAPO row" in str(_error(path, parse_math))


def test_duplicate_id_with_different_content_is_an_error(hotpot, tmp_path):
    rows = copy.deepcopy(hotpot[:5])
    rows.append({**rows[1], "answer": "something else"})
    path = tmp_path / "h.json"
    path.write_text(json.dumps(rows))
    err = _error(path, parse_hotpot)
    assert err.row == 5 and err.key == "_id" and "first at row 1" in str(err) and rows[1]["_id"] in str(err)


def test_identical_duplicate_rows_are_collapsed_and_counted(hotpot, tmp_path):
    path = tmp_path / "h.json"
    path.write_text(json.dumps(hotpot[:5] + [hotpot[2], hotpot[2]]))
    loaded = load_items(path, parse_hotpot)
    assert len(loaded.items) == 5 and loaded.duplicate_rows == 2 and loaded.rows_read == 7


def test_same_content_under_new_ids_is_collapsed_while_reading(dapo, tmp_path):
    rows = copy.deepcopy(dapo[:3]) + [copy.deepcopy(dapo[1]) for _ in range(4)]
    for i, r in enumerate(rows[3:]):
        r["extra_info"]["index"] = f"repeat-{i}"
    path = tmp_path / "m.json"
    path.write_text(json.dumps(rows))
    loaded = load_items(path, parse_math)
    assert [m.question_id for m in loaded.items] == [r["extra_info"]["index"] for r in dapo[:3]]
    assert (loaded.repeated_content, loaded.duplicate_rows) == (4, 0)
    # a repeat's id is still remembered: reusing it for a different problem is an error
    rows.append({**copy.deepcopy(dapo[5]), "extra_info": {"index": "repeat-2"}})
    path.write_text(json.dumps(rows))
    err = _error(path, parse_math)
    assert err.row == 7 and "first at row 5" in str(err)


def test_skip_invalid_skips_and_counts_every_bad_row(dapo, tmp_path):
    rows = copy.deepcopy(dapo[:10])
    rows[2]["reward_model"]["ground_truth"] = ""
    rows[5].pop("prompt")
    rows[7]["reward_model"]["ground_truth"] = ""
    path = tmp_path / "m.json"
    path.write_text(json.dumps(rows))
    invalid = InvalidRows()
    loaded = load_items(path, parse_math, skip_invalid=True, invalid=invalid)
    assert len(loaded.items) == 7 and invalid.total == 3
    assert invalid.to_dict()["by_file"][str(path)] == {"empty gold answer": 2, "missing key": 1}
    assert len(invalid.examples) == 3 and "row 2" in invalid.examples[0]


def test_cli_reports_bad_row_then_skip_invalid_completes(dapo, sample_files, tmp_path, capsys, monkeypatch):
    rows = copy.deepcopy(dapo)
    rows[4]["reward_model"]["ground_truth"] = ""
    path = tmp_path / "dapo.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows))
    monkeypatch.setenv("DAPO_JSON", str(path))
    out = tmp_path / "out"
    assert main(["--output-dir", str(out), "--no-progress"]) == 2
    assert f"{path}, row 4, key 'reward_model.ground_truth': empty gold answer" in capsys.readouterr().err
    assert not out.exists()
    assert main(["--output-dir", str(out), "--no-progress", "--skip-invalid"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["dropped"]["invalid_rows"] == 1
    assert summary["questions"]["math"]["unique"] == len(rows) - 1


def test_cli_missing_input_file(tmp_path, capsys):
    assert main(["--hotpot-test", str(tmp_path / "missing.json"), "--output-dir", str(tmp_path / "o"), "--no-progress"]) == 2
    assert "missing.json does not exist" in capsys.readouterr().err
