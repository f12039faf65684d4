"""Bad input: each case stops with an error naming file, row and key, or is skipped and counted."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pyarrow.parquet as pq
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


# ---- an input or split that yields nothing is an error naming it; unreadable inputs name the file ------


@pytest.mark.parametrize(("which", "content"), [("dapo", "[]"), ("hotpot_train", ""), ("hotpot_test", "[]")])
def test_an_empty_source_file_is_an_error_naming_it(which, content, run_prepare, tmp_path):
    empty = tmp_path / f"{which}.{'json' if content else 'jsonl'}"
    empty.write_text(content)
    with pytest.raises(DataError, match=rf"{empty}: no records \(an empty file or an empty list\)"):
        run_prepare(tmp_path / "out", **{which: empty})
    assert not (tmp_path / "out").exists()


def test_an_empty_file_of_a_source_the_mix_does_not_use_is_fine(run_prepare, tmp_path):
    from rlec.data.mix import MixConfig

    empty = tmp_path / "dapo.json"
    empty.write_text("[]")
    summary = run_prepare(tmp_path / "out", MixConfig(math_train_size=0, math_test_size=0), dapo=empty)
    train = summary["splits"]["train"]
    assert train["by_source"] == {"hotpotqa": train["rows"]} and train["rows"] > 0


def test_a_file_whose_rows_are_all_invalid_is_an_error_even_when_skipping(dapo, run_prepare, tmp_path):
    rows = copy.deepcopy(dapo[:4])
    for r in rows:
        r["reward_model"]["ground_truth"] = ""
    path = tmp_path / "dapo.json"
    path.write_text(json.dumps(rows))
    with pytest.raises(DataError, match=rf"{path}: no valid records: all 4 rows were skipped as invalid"):
        run_prepare(tmp_path / "out", dapo=path, skip_invalid=True)


@pytest.mark.parametrize(("sizes", "message"), [
    (dict(math_train_size=0, hotpot_train_size=0), "the training split would be empty: --math-train-size and --hotpot-train-size are"),
    (dict(math_test_size=0, hotpot_test_size=0), "the test split would be empty: --math-test-size and --hotpot-test-size are both 0"),
])  # fmt: skip
def test_an_empty_split_is_an_error_naming_it(sizes, message, run_prepare, tmp_path):
    from rlec.data.mix import MixConfig

    with pytest.raises(ValueError, match=message):
        run_prepare(tmp_path / "out", MixConfig(**sizes))
    assert not (tmp_path / "out").exists()


def test_a_source_the_length_filter_empties_is_an_error_naming_split_and_source(run_prepare, tmp_path):
    message = r"train split: all 150 hotpotqa rows are longer than --max-prompt-tokens 10 \(shortest \d+ tokens"
    with pytest.raises(ValueError, match=message):
        run_prepare(tmp_path / "out", max_prompt_tokens=10)
    assert not (tmp_path / "out").exists()


def test_an_empty_training_pool_is_an_error_naming_the_source(sample_files, run_prepare, tmp_path):
    message = r"hotpotqa: the training pool is empty \(\d+ unique questions, \d+ of them also in the test file\)"
    with pytest.raises(ValueError, match=message):
        run_prepare(tmp_path / "out", hotpot_train=sample_files["hotpot_test"])


def test_writer_keeps_the_schema_of_an_empty_table(tmp_path):
    from rlec.data.writer import SCHEMA, to_table, write_parquet

    assert to_table([]).schema.equals(SCHEMA)
    write_parquet([], tmp_path / "empty.parquet")
    assert pq.read_schema(tmp_path / "empty.parquet").equals(SCHEMA)


@pytest.mark.parametrize("suffix", [".jsonl", ".json"])
def test_input_that_is_not_utf8_names_file_and_line(suffix, tmp_path):
    path = tmp_path / f"m{suffix}"
    path.write_bytes(b'[{"problem": "1+1", "answer": "2"},\n' if suffix == ".json" else b'{"problem": "1+1", "answer": "2"}\n')
    path.write_bytes(path.read_bytes() + b'{"problem": "caf\xe9", "answer": "3"}' + (b"]" if suffix == ".json" else b"\n"))
    err = _error(path, parse_math)
    assert err.path == str(path) and "not UTF-8 text on line 2" in str(err)


def test_a_folder_given_as_an_input_file_says_so(tmp_path):
    assert "is a folder; expected a .json, .jsonl, .ndjson or .parquet file" in str(_error(tmp_path, parse_math))


@pytest.mark.parametrize("case", ["below_a_file", "unwritable"])
def test_cli_unwritable_output_folder_is_one_line_before_any_work(case, tmp_path, capsys):
    (tmp_path / "afile").write_text("x")
    out = tmp_path / "afile" / "processed" if case == "below_a_file" else Path("/sys/rlec-test/processed")
    assert main(["--output-dir", str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: --output-dir {out}: ") and "\n" not in err
    assert ("is a file, not a folder" if case == "below_a_file" else "cannot write in /sys") in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]


@pytest.mark.parametrize(("suffix", "text"), [
    (".json", "[" * 100_000 + "]" * 100_000),  # the whole file one deep list
    (".jsonl", '{"problem": "1+1", "answer": ' + "[" * 100_000 + "]" * 100_000 + "}\n"),  # one record's value
])
def test_json_nested_too_deep_is_one_error_line_with_status_2(suffix, text, tmp_path, capsys):
    """Issue 55: json.loads raised RecursionError, a traceback with exit status 1, from `python -m rlec.data.prepare`."""
    deep = tmp_path / f"deep{suffix}"
    deep.write_text(text)
    out = tmp_path / "out"
    assert main(["--dapo", str(deep), "--output-dir", str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {deep}") and "nested deeper than Python's parser" in err[0], err
    assert (", row 0: line 1:" in err[0]) == (suffix == ".jsonl") and not out.exists()
