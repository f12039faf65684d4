"""The shipped samples are in the real formats and internally consistent."""

from __future__ import annotations

import json

from rlec.data.dedup import normalize_text
from rlec.data.readers import iter_records
from rlec.data.sources import DAPO_PREFIX, DAPO_SUFFIX, load_items, parse_hotpot, parse_math
from rlec.grading import grade_batch
from rlec.grading.outcome import Outcome


def _hotpot(path):
    return json.loads(path.read_text())


def test_math_sample_rows_are_dapo_rows_whose_gold_grades_correct(sample_files):
    rows = [r for _, r in iter_records(sample_files["dapo"])]
    assert 35 <= len(rows) <= 50
    for r in rows:
        assert set(r) == {"data_source", "prompt", "ability", "reward_model", "extra_info"}
        assert r["data_source"] == "math_dapo" and r["ability"] == "MATH"
        assert r["reward_model"]["style"] == "rule-lighteval/MATH_v2" and set(r["extra_info"]) == {"index"}
        (msg,) = r["prompt"]
        assert msg["role"] == "user"
        assert msg["content"].startswith(DAPO_PREFIX) and msg["content"].endswith(DAPO_SUFFIX)
    golds = [r["reward_model"]["ground_truth"] for r in rows]
    assert any(g.startswith("\\") or "\\" in g for g in golds) and any(g.isdigit() for g in golds)
    results = grade_batch([f"Work.\n\\boxed{{{g}}}" for g in golds], golds, ["math_dapo"] * len(golds))
    assert [r.outcome for r in results] == [Outcome.CORRECT] * len(golds)
    # and a wrong answer is not accepted (the check can fail)
    assert grade_batch(["\\boxed{-12345}"], [golds[0]], ["math_dapo"])[0].outcome == Outcome.INCORRECT


def test_math_sample_parses_to_unique_problems(sample_files):
    loaded = load_items(sample_files["dapo"], parse_math)
    assert len(loaded.items) == loaded.rows_read
    assert len({normalize_text(m.problem) for m in loaded.items}) == len(loaded.items)
    assert not any("Answer:" in m.problem for m in loaded.items)


def test_hotpot_samples_have_valid_supporting_facts_and_derivable_answers(sample_files):
    for key, lo, hi in (("hotpot_train", 25, 40), ("hotpot_test", 12, 20)):
        items = _hotpot(sample_files[key])
        assert lo <= len(items) <= hi
        assert {it["type"] for it in items} == {"bridge", "comparison"}
        assert {"yes", "no"} <= {it["answer"] for it in items}
        for it in items:
            ctx = dict((t, s) for t, s in it["context"])
            assert len(ctx) == len(it["context"]) >= 6, it["_id"]
            titles = {t for t, _ in it["supporting_facts"]}
            assert len(titles) == 2, it["_id"]
            for title, sid in it["supporting_facts"]:
                assert title in ctx and 0 <= sid < len(ctx[title]), (it["_id"], title, sid)
            evidence = "".join(ctx[t][sid] for t, sid in it["supporting_facts"]).lower()
            answer = it["answer"].lower()
            if answer not in ("yes", "no"):
                # bridge: the answer is stated in a supporting sentence; comparison: it is one of
                # the two entities the question compares
                assert answer in (evidence if it["type"] == "bridge" else it["question"].lower()), it["_id"]
            parse_hotpot(it, sample_files[key], 0)


def test_hotpot_train_and_test_samples_share_no_question(sample_files):
    train = {normalize_text(it["question"]) for it in _hotpot(sample_files["hotpot_train"])}
    test = {normalize_text(it["question"]) for it in _hotpot(sample_files["hotpot_test"])}
    assert not train & test
    ids = [it["_id"] for k in ("hotpot_train", "hotpot_test") for it in _hotpot(sample_files[k])]
    assert len(set(ids)) == len(ids)


def test_shared_paragraphs_state_the_same_facts_everywhere(sample_files):
    seen: dict[str, list[str]] = {}
    for k in ("hotpot_train", "hotpot_test"):
        for it in _hotpot(sample_files[k]):
            for title, sents in it["context"]:
                assert seen.setdefault(title, sents) == sents, title
