"""Input formats: JSON, JSON Lines, parquet, columnar JSON, HotpotQA's dict-of-lists layout."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rlec.data.readers import iter_records
from rlec.data.sources import DAPO_PREFIX, DAPO_SUFFIX, load_items, parse_hotpot, parse_math


def _dapo_rows(sample_files):
    return [r for _, r in iter_records(sample_files["dapo"])]


def _hf_layout(item):
    """HotpotQA as the Hugging Face `hotpot_qa` dataset stores it (dicts of lists, key `id`)."""
    return {
        "id": item["_id"],
        "question": item["question"],
        "answer": item["answer"],
        "type": item["type"],
        "level": item["level"],
        "supporting_facts": {"title": [t for t, _ in item["supporting_facts"]], "sent_id": [i for _, i in item["supporting_facts"]]},
        "context": {"title": [t for t, _ in item["context"]], "sentences": [s for _, s in item["context"]]},
    }


@pytest.mark.parametrize("fmt", ["json", "jsonl", "parquet", "columnar"])
def test_dapo_rows_read_the_same_from_every_format(fmt, sample_files, tmp_path):
    rows = _dapo_rows(sample_files)
    path = tmp_path / f"dapo.{'json' if fmt == 'columnar' else fmt}"
    if fmt == "json":
        path.write_text(json.dumps(rows))
    elif fmt == "jsonl":
        path.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")  # trailing blank line is fine
    elif fmt == "parquet":
        pq.write_table(pa.Table.from_pylist(rows), path)
    else:
        path.write_text(json.dumps({k: [r[k] for r in rows] for k in rows[0]}))
    expected = load_items(sample_files["dapo"], parse_math).items
    assert load_items(path, parse_math).items == expected


def test_dapo_wrapper_is_removed_and_index_is_the_question_id(sample_files):
    row = _dapo_rows(sample_files)[0]
    item = parse_math(row, "f", 0)
    assert item.question_id == row["extra_info"]["index"]
    assert row["prompt"][0]["content"] == f"{DAPO_PREFIX}{item.problem}{DAPO_SUFFIX}"
    assert item.answer == row["reward_model"]["ground_truth"]


def test_plain_math_records_and_content_ids():
    a = parse_math({"problem": "  What is 2+2? ", "answer": 4}, "f", 0)
    assert (a.problem, a.answer) == ("What is 2+2?", "4")
    assert a.question_id.startswith("math-")
    assert parse_math({"question": "what  is 2+2?", "answer": "4"}, "f", 1).question_id == a.question_id
    assert parse_math({"problem": "What is 2+2?", "answer": "4", "id": 17}, "f", 2).question_id == "17"
    # a prompt without the DAPO wrapper is taken as the problem itself
    b = parse_math({"prompt": [{"role": "user", "content": "Compute 3*3."}], "reward_model": {"ground_truth": "9"}}, "f", 3)
    assert b.problem == "Compute 3*3." and b.question_id.startswith("math-")


@pytest.mark.parametrize("fmt", ["json", "jsonl", "parquet", "columnar"])
def test_hotpot_dict_of_lists_layout_reads_like_the_original(fmt, sample_files, tmp_path):
    original = json.loads(sample_files["hotpot_train"].read_text())
    hf = [_hf_layout(it) for it in original]
    path = tmp_path / f"hotpot.{'json' if fmt == 'columnar' else fmt}"
    if fmt == "json":
        path.write_text(json.dumps(hf))
    elif fmt == "jsonl":
        path.write_text("\n".join(json.dumps(r) for r in hf))
    elif fmt == "parquet":
        pq.write_table(pa.Table.from_pylist(hf), path)
    else:
        path.write_text(json.dumps({k: [r[k] for r in hf] for k in hf[0]}))
    expected = load_items(sample_files["hotpot_train"], parse_hotpot).items
    got = load_items(path, parse_hotpot).items
    assert got == expected
    assert got[0].supporting_titles and len(got[0].context) >= 6


def test_already_modified_hotpot_record_keeps_its_scheme(sample_files):
    rec = json.loads(sample_files["hotpot_test"].read_text())[0]
    rec = {**rec, "context": rec["context"][:3], "drop_scheme": "custom", "dropped_titles": ["X", "Y"]}
    item = parse_hotpot(rec, "f", 0)
    assert item.drop_scheme == "custom" and item.dropped_titles == ("X", "Y") and len(item.context) == 3


def test_hotpot_without_supporting_facts_only_when_not_dropping(sample_files):
    rec = {k: v for k, v in json.loads(sample_files["hotpot_test"].read_text())[0].items() if k != "supporting_facts"}
    assert parse_hotpot(rec, "f", 0, require_supporting=False).supporting_titles == ()
    with pytest.raises(ValueError, match="supporting_facts"):
        parse_hotpot(rec, "f", 0)
