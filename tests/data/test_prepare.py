"""End to end on the shipped samples: the data contract, counts, reruns, atomic write, length filter."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter

import pyarrow.parquet as pq
import pytest

from rlec.data import prepare as prepare_mod
from rlec.data.hotpot_modify import SCHEMES
from rlec.data.lengths import PromptLengthCounter
from rlec.data.mix import MixConfig
from rlec.data.mix import EVAL_TARGET_GRID
from rlec.data.prepare import main
from rlec.grading import TASKS
from rlec.models import bundled_tokenizer_path
from rlec.prompts import build_messages, render
from rlec.reward.score import target_of

EXTRA_KEYS = {"index", "split", "question_id", "source", "target_p", "objective", "repeat", "task_text", "drop_scheme", "dropped_titles"}


def _key(r):
    e = r["extra_info"]
    return (e["question_id"], e["repeat"], e["objective"], e["target_p"])


def test_rows_follow_the_data_contract(prepared, rows):
    out, _ = prepared
    for split in ("train", "test"):
        data = rows(out / f"{split}.parquet")
        assert pq.read_schema(out / f"{split}.parquet").names == ["data_source", "prompt", "ability", "reward_model", "extra_info"]
        for i, r in enumerate(data):
            e = r["extra_info"]
            assert set(e) == EXTRA_KEYS and e["index"] == i and e["split"] == split
            assert r["data_source"] in TASKS and (r["data_source"], r["ability"], e["source"]) in {("math_dapo", "math", "math"), ("hotpotqa", "qa", "hotpotqa")}
            assert r["reward_model"]["style"] == "rule" and r["reward_model"]["ground_truth"].strip()
            assert e["objective"] in ("binary", "rlec") and target_of(e) == e["target_p"]
            assert (e["target_p"] == 0.0) == (e["objective"] == "binary")
            assert r["prompt"] == build_messages(e["task_text"], e["target_p"] or None)  # the contract's formula
            if e["source"] == "math":
                assert e["drop_scheme"] == "" and e["dropped_titles"] == []
            else:
                assert e["drop_scheme"] in SCHEMES
                assert not any(f"\n\n{t}: " in e["task_text"] for t in e["dropped_titles"])


def test_training_counts_and_repeats(prepared, rows):
    out, summary = prepared
    train = rows(out / "train.parquet")
    assert len(train) == 5 * (34 + 30)
    assert Counter(r["extra_info"]["objective"] for r in train) == {"binary": 30, "rlec": 290}
    assert summary["splits"]["train"]["by_source"] == {"hotpotqa": 150, "math": 170}
    per_q: dict[str, set] = {}
    for r in train:
        e = r["extra_info"]
        per_q.setdefault(e["question_id"], set()).add((e["task_text"], r["reward_model"]["ground_truth"], e["drop_scheme"]))
        assert 0 <= e["repeat"] < 5 and 0.0 <= e["target_p"] <= 0.9 and abs(e["target_p"] * 100 - round(e["target_p"] * 100)) < 1e-9
    assert all(len(v) == 1 for v in per_q.values())  # one question, one prompt body, every repeat
    assert Counter(Counter(r["extra_info"]["question_id"] for r in train).values()) == {5: 64}


def test_evaluation_set_is_hotpot_test_plus_disjoint_math_slice(prepared, rows, sample_files):
    out, summary = prepared
    test, train = rows(out / "test.parquet"), rows(out / "train.parquet")
    hotpot_ids = [it["_id"] for it in json.loads(sample_files["hotpot_test"].read_text())]
    assert sorted(r["extra_info"]["question_id"] for r in test if r["extra_info"]["source"] == "hotpotqa") == sorted(hotpot_ids)
    math_test = {r["extra_info"]["question_id"] for r in test if r["extra_info"]["source"] == "math"}
    assert len(math_test) == 8 and not math_test & {r["extra_info"]["question_id"] for r in train}
    assert all(r["extra_info"]["objective"] == "binary" and r["extra_info"]["target_p"] == 0.0 and r["extra_info"]["repeat"] == 0 for r in test)
    assert summary["questions"]["math"] == {"unique": 42, "held_out": 8, "train_pool": 34, "train_selected": 34}


def test_summary_file_matches_and_warns_about_small_sources(prepared):
    out, summary = prepared
    assert json.loads((out / "summary.json").read_text()) == summary
    assert sum(summary["target_histogram"]["counts"]) == 290
    assert len(summary["warnings"]) == 2 and all("taking all of them" in w for w in summary["warnings"])
    assert summary["length_counting"]["method"] == "additive"
    assert sorted(p.name for p in out.iterdir()) == ["summary.json", "test.parquet", "train.parquet"]


def test_printed_summary_counts_the_warnings_it_logged_instead_of_repeating_them(prepared):
    from rlec.data.summary import format_summary

    _, summary = prepared
    text = format_summary(summary)
    assert "warnings: 2 (logged above; listed in summary.json)" in text
    assert not any(w in text for w in summary["warnings"])


def test_same_seed_gives_byte_identical_parquet(prepared, run_prepare, tmp_path):
    out, _ = prepared
    run_prepare(tmp_path / "again")
    for name in ("train.parquet", "test.parquet", "summary.json"):
        assert (tmp_path / "again" / name).read_bytes() == (out / name).read_bytes(), name
    run_prepare(tmp_path / "other", MixConfig(seed=1))
    assert (tmp_path / "other" / "train.parquet").read_bytes() != (out / "train.parquet").read_bytes()


def test_interrupted_run_leaves_previous_output_intact(run_prepare, tmp_path, monkeypatch):
    out = tmp_path / "processed"
    run_prepare(out)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    real_write, calls = prepare_mod.write_parquet, []

    def write_then_die(samples, path):
        calls.append(path)
        if len(calls) == 2:  # train.parquet is written, then the run is killed
            raise KeyboardInterrupt
        return real_write(samples, path)

    monkeypatch.setattr(prepare_mod, "write_parquet", write_then_die)
    with pytest.raises(KeyboardInterrupt):
        run_prepare(out, MixConfig(seed=5))
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["processed"]  # no temporary folder left
    monkeypatch.setattr(prepare_mod, "write_parquet", real_write)
    run_prepare(out, MixConfig(seed=5))
    assert (out / "train.parquet").read_bytes() != before["train.parquet"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["processed"]


def test_folder_with_foreign_files_is_never_replaced(run_prepare, tmp_path):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    with pytest.raises(FileExistsError, match="notes.txt"):
        run_prepare(tmp_path / "mine")
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep me"


def test_length_filter_drops_exactly_the_long_prompts(prepared, run_prepare, rows, qwen_tokenizer, tmp_path):
    out, _ = prepared
    full_train, full_test = rows(out / "train.parquet"), rows(out / "test.parquet")

    def exact(task, p):
        text = render(qwen_tokenizer, build_messages(task, p))
        return len(qwen_tokenizer(text, add_special_tokens=False)["input_ids"])

    train_len = {_key(r): exact(r["extra_info"]["task_text"], target_of(r["extra_info"]) if r["extra_info"]["objective"] == "rlec" else None) for r in full_train}
    limit = sorted(train_len.values())[len(train_len) * 3 // 4]  # drops about a quarter of the rows
    summary = run_prepare(tmp_path / "cut", max_prompt_tokens=limit)
    kept = rows(tmp_path / "cut" / "train.parquet")
    assert Counter(map(_key, kept)) == Counter(k for k, n in train_len.items() if n <= limit)
    assert summary["dropped"]["too_long_train_rows"] == sum(n > limit for n in train_len.values()) > 0
    # evaluation prompts must fit with any target the evaluator may state
    p_long = PromptLengthCounter(qwen_tokenizer).longest_target(EVAL_TARGET_GRID)
    test_fits = {r["extra_info"]["question_id"]: max(exact(r["extra_info"]["task_text"], None), exact(r["extra_info"]["task_text"], p_long)) <= limit for r in full_test}
    kept_test = {r["extra_info"]["question_id"] for r in rows(tmp_path / "cut" / "test.parquet")}
    assert kept_test == {q for q, ok in test_fits.items() if ok}
    assert summary["dropped"]["too_long_test_questions"] == sum(not ok for ok in test_fits.values())


def test_additive_length_count_falls_back_to_exact_when_it_disagrees(qwen_tokenizer, monkeypatch, caplog):
    tasks, targets = ["Solve the following math problem step by step.\n\nWhat is 1+1?"] * 3, [None, 0.5, 0.25]
    good = PromptLengthCounter(qwen_tokenizer, progress=False)
    expected = [good.exact(t, p) for t, p in zip(tasks, targets)]
    assert good(tasks, targets).tolist() == expected and good.method == "additive"
    broken = PromptLengthCounter(qwen_tokenizer, progress=False)
    real = broken._additive
    monkeypatch.setattr(broken, "_additive", lambda t, p: real(t, p) + [0, 1, 0])  # as if row 1 did not add up
    assert broken(tasks, targets).tolist() == expected and broken.method == "exact"
    assert "disagrees with the exact count" in caplog.text


def test_cli_help_lists_every_option_and_environment_variable(repo_root):
    res = subprocess.run([sys.executable, "-m", "rlec.data.prepare", "--help"], capture_output=True, text=True, cwd=repo_root, check=True)
    for flag in ("--math-train-size", "--hotpot-train-size", "--repeats", "--binary-fraction", "--target-min", "--target-max",
                 "--math-test-size", "--hotpot-test-size", "--max-prompt-tokens", "--drop-weights", "--skip-invalid", "--seed"):
        assert flag in res.stdout
    for env in ("DAPO_JSON", "HOTPOT_TRAIN_JSON", "HOTPOT_TEST_JSON", "TOKENIZER_PATH", "DATA_DIR"):
        assert env in res.stdout


def test_cli_reads_environment_variables(prepared, tmp_path, monkeypatch, capsys):
    out, _ = prepared
    monkeypatch.setenv("DATA_DIR", str(tmp_path / "from_env"))
    monkeypatch.setenv("TOKENIZER_PATH", str(bundled_tokenizer_path()))
    assert main(["--no-progress", "--repeats", "2", "--binary-fraction", "0.5"]) == 0
    printed = capsys.readouterr().out
    assert "train  all" in printed and "target p of RLEC training rows" in printed
    summary = json.loads((tmp_path / "from_env" / "summary.json").read_text())
    assert summary["splits"]["train"]["rows"] == 2 * 64
    assert summary["splits"]["train"]["by_objective"] == {"binary": 2 * (17 + 15), "rlec": 2 * (17 + 15)}
