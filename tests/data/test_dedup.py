"""Normalised-text de-duplication within a source and across the train / test split."""

from __future__ import annotations

import copy
import json

from rlec.data.dedup import dedupe_within, normalize_text, remove_overlap
from rlec.data.mix import MixConfig
from rlec.data.readers import iter_records
from rlec.data.sources import DAPO_PREFIX, DAPO_SUFFIX, MathItem


def test_normal_form_ignores_case_width_and_spacing():
    assert normalize_text("  What IS\n 2+2?\t") == normalize_text("what is 2+2?") == "what is 2+2?"
    assert normalize_text("Ｆｕｌｌ width") == "full width"
    assert normalize_text("2+2") != normalize_text("2+3")


def test_within_source_keeps_first_copy_and_drops_conflicting_golds():
    items = [
        MathItem("a", "What is 2+2?", "4"),
        MathItem("b", "what is  2+2?", "4"),
        MathItem("c", "Compute 3*3.", "9"),
        MathItem("d", "compute 3*3.", "10"),
        MathItem("e", "Other", "1"),
    ]
    kept, stats = dedupe_within(items, lambda m: m.problem, lambda m: m.answer)
    assert [m.question_id for m in kept] == ["a", "e"]
    assert (stats.duplicate_text, stats.conflicting_gold) == (1, 2)


def test_overlap_with_held_out_is_removed_by_text_or_id():
    cands = [MathItem("1", "A", "x"), MathItem("2", "b ", "x"), MathItem("3", "C", "x"), MathItem("9", "D", "x")]
    held = [MathItem("7", "B", "x"), MathItem("9", "Z", "x")]
    kept, removed = remove_overlap(cands, held, lambda m: m.problem, lambda m: m.question_id)
    assert [m.question_id for m in kept] == ["1", "3"] and removed == 2


def test_end_to_end_duplicates_are_removed_and_counted(sample_files, run_prepare, rows, tmp_path):
    dapo = [r for _, r in iter_records(sample_files["dapo"])]
    # DAPO-Math-17k style repeats: same problem under new ids, re-spaced and re-cased
    copies = []
    for i, r in enumerate(dapo[:5]):
        c = copy.deepcopy(r)
        c["extra_info"]["index"] = f"copy-{i}"
        problem = c["prompt"][0]["content"].removeprefix(DAPO_PREFIX).removesuffix(DAPO_SUFFIX)
        c["prompt"][0]["content"] = DAPO_PREFIX + problem.replace(" ", "  ").upper() + DAPO_SUFFIX
        copies.append(c)
    for i, r in enumerate(dapo[10:13]):  # exact copies under new ids, collapsed while reading
        c = copy.deepcopy(r)
        c["extra_info"]["index"] = f"exact-{i}"
        copies.append(c)
    (tmp_path / "dapo.jsonl").write_text("\n".join(json.dumps(r) for r in dapo + copies))
    hp_train = json.loads(sample_files["hotpot_train"].read_text())
    hp_test = json.loads(sample_files["hotpot_test"].read_text())
    leaked = {**copy.deepcopy(hp_test[0]), "_id": "leaked-1", "question": hp_test[0]["question"].upper()}
    (tmp_path / "hp_train.json").write_text(json.dumps(hp_train + [leaked]))
    summary = run_prepare(
        tmp_path / "out",
        MixConfig(),
        dapo=tmp_path / "dapo.jsonl",
        hotpot_train=tmp_path / "hp_train.json",
        hotpot_test=sample_files["hotpot_test"],
    )
    assert summary["dropped"]["duplicate_text"] == 5 + 3
    assert summary["dropped"]["cross_split_duplicates"] == 1
    train, test = rows(tmp_path / "out" / "train.parquet"), rows(tmp_path / "out" / "test.parquet")
    norm = lambda r: normalize_text(r["extra_info"]["task_text"])  # noqa: E731
    assert not {norm(r) for r in train} & {norm(r) for r in test}
    assert "leaked-1" not in {r["extra_info"]["question_id"] for r in train}
    assert summary["questions"]["math"]["unique"] == len(dapo)
