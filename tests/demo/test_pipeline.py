"""The learning demo (rlec.demo): its goal check on graded records, its settings, and one tiny end-to-end pass."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

import pytest

from rlec.eval.records import SCHEMA, target_label
from rlec.demo import pipeline as demo

pytestmark = pytest.mark.minutes(3)  # tests/conftest.py: the longest modules start first

RESPONSES = {"C": "\\boxed{4}", "W": "\\boxed{5}", "A": "\\boxed{I don't know}"}


def _records(path: Path, letters_by_target: dict[float, Sequence[str]]) -> Path:
    """One record per question and target; letter C / W / A = correct / wrong / abstain (gold 4)."""
    rows = []
    for target, letters in letters_by_target.items():
        for i, letter in enumerate(letters):
            rows.append({"schema": SCHEMA, "question_id": f"q{i}", "source": "math", "data_source": "math_dapo",
                         "target": target_label(target), "target_p": target, "objective": "rlec", "sample_index": 0,
                         "ground_truth": "4", "prompt": "(prompt)", "response": RESPONSES[letter], "finish_reason": "stop"})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_target_check_passes_a_learned_gap_and_fails_its_absence(tmp_path: Path) -> None:
    n = 40
    # warm start: the same answers at both targets; RLEC: answers everything at 0.1 (half right),
    # only the right half at 0.8
    warm = _records(tmp_path / "warm.jsonl", {0.1: "CW" * (n // 2), 0.8: "CW" * (n // 2)})
    trained = _records(tmp_path / "rlec.jsonl", {0.1: "CW" * (n // 2), 0.8: "CA" * (n // 2)})
    check = demo.target_check(warm, trained, n_boot=200)
    assert check["passed"], check["why"]
    assert check["rlec"]["coverage_gap"][0] == pytest.approx(0.5)
    assert check["rlec"]["coverage"]["high"][2] < check["rlec"]["coverage"]["low"][1]
    assert check["rlec"]["selective_accuracy"]["high"][0] == pytest.approx(1.0)
    assert check["warm_start"]["coverage_gap"][0] == pytest.approx(0.0)
    table = demo.format_check(check)
    assert "| RLEC | 1.00" in table and "[x] RLEC coverage gap >= 0.3" in table

    # no learned gap: the trained model behaves like the warm start -> fails, naming the check
    same = demo.target_check(warm, _records(tmp_path / "same.jsonl", {0.1: "CW" * (n // 2), 0.8: "CW" * (n // 2)}), n_boot=200)
    assert not same["passed"] and "RLEC coverage gap >= 0.3" in same["why"]
    # a warm start that already has the gap fails its own check
    copied = demo.target_check(trained, trained, n_boot=200)
    assert not copied["passed"] and "warm start |coverage gap|" in copied["why"]


def test_target_check_without_the_warm_starts_records_checks_the_trained_model_only(tmp_path: Path) -> None:
    """make run's goal check (rlec.cpu.eval.goal_check): the trained model's checks, no warm-start row."""
    n = 40
    trained = _records(tmp_path / "rlec.jsonl", {0.1: "CW" * (n // 2), 0.8: "CA" * (n // 2)})
    check = demo.target_check(None, trained, n_boot=200)
    assert check["passed"] and "warm_start" not in check and len(check["checks"]) == 3
    table = demo.format_check(check)
    assert "| warm start |" not in table and "| RLEC | 1.00" in table
    flat = demo.target_check(None, _records(tmp_path / "flat.jsonl", {0.1: "CW" * (n // 2), 0.8: "CW" * (n // 2)}), n_boot=200)
    assert not flat["passed"] and "RLEC coverage gap >= 0.3" in flat["why"]


def test_target_check_names_a_missing_target(tmp_path: Path) -> None:
    warm = _records(tmp_path / "warm.jsonl", {0.1: "CW", 0.5: "CW"})
    with pytest.raises(ValueError, match=r"warm.jsonl: no evaluation record at target p = 0.8"):
        demo.target_check(warm, warm, n_boot=10)


def test_run_overrides_put_paths_then_demo_settings_then_the_users(tmp_path: Path) -> None:
    overrides = demo.run_overrides(tmp_path, 7, ["actor_rollout_ref.actor.optim.lr=3e-5"])
    cfg = demo.compose_checked(overrides)
    assert cfg.actor_rollout_ref.model.path == str(tmp_path / "warm_start")
    assert cfg.data.val_files == str(tmp_path / "data" / "test.parquet")
    assert cfg.trainer.total_training_steps == 7
    assert cfg.data.train_batch_size == demo.DEMO_SETTINGS["data.train_batch_size"]
    assert cfg.actor_rollout_ref.actor.optim.lr == pytest.approx(3e-5)  # the user's value wins
    assert cfg.rlec.cpu.scripted_fraction == 0  # a real model: no scripted answers
    assert cfg.rlec.cpu.eval.max_questions == demo.DEMO_SETTINGS["rlec.cpu.eval.max_questions"]  # the evaluation's
    assert cfg.actor_rollout_ref.rollout.top_k == demo.DEMO_SETTINGS["actor_rollout_ref.rollout.top_k"] == -1  # no top-k
    assert cfg.actor_rollout_ref.rollout.temperature == 1.0


def test_launcher_overrides_are_the_demos_settings_then_the_users() -> None:
    got = demo.launcher_overrides(["rlec.cpu.eval.max_questions=4", "actor_rollout_ref.actor.optim.lr=3e-5"])
    assert f"data.train_batch_size={demo.DEMO_SETTINGS['data.train_batch_size']}" in got
    assert got[-1] == "actor_rollout_ref.actor.optim.lr=3e-5"  # the user's value comes last: it wins
    assert demo.compose_checked(got).rlec.cpu.eval.max_questions == 4  # every one a key of the run's config


def test_a_setting_the_run_would_refuse_stops_the_demo_before_its_first_stage(tmp_path: Path, capsys) -> None:
    """What the launcher refuses (the early rule set) the demo refuses before the warm start, naming the key."""
    assert demo.main(["--out", str(tmp_path / "d"), "actor_rollout_ref.actor.optim.lr=-1"]) == 2
    assert "ERROR [actor_rollout_ref.actor.optim.lr]" in capsys.readouterr().err
    assert demo.main(["--out", str(tmp_path / "d"), "rlec.cpu.eval.max_questions=0"]) == 2
    assert "ERROR [rlec.cpu.eval.max_questions]" in capsys.readouterr().err
    assert not (tmp_path / "d").exists()


def test_cli_refuses_bad_settings_before_any_work(tmp_path: Path, capsys) -> None:
    assert demo.main(["--out", str(tmp_path / "d"), "--steps", "0"]) == 2
    assert demo.main(["--out", str(tmp_path / "d"), "--steps", "1"]) == 2  # the b schedule needs two steps
    assert demo.main(["--out", str(tmp_path / "d"), "--train-targets", "0.1,1.5"]) == 2
    assert demo.main(["--out", str(tmp_path / "d"), "--bootstrap", "5"]) == 2
    assert demo.main(["--out", str(tmp_path / "d"), "--warm-start-steps", "0"]) == 2
    assert demo.main(["--out", str(tmp_path / "d"), "actor_rollout_ref.rollout.n=oops"]) == 2
    assert "rlec.demo: error" in capsys.readouterr().err
    assert not (tmp_path / "d").exists()


@pytest.mark.slow
def test_demo_end_to_end_tiny(tmp_path: Path, capsys) -> None:
    """Every stage at toy size: a 3-step warm start, 2 RLEC steps on verl's trainer (one launch of the launcher),
    4 evaluation questions; a rerun reuses every stage."""
    out = tmp_path / "demo"
    args = ["--out", str(out), "--steps", "2", "--warm-start-steps", "3", "--bootstrap", "100",
            "rlec.cpu.eval.max_questions=4", "rlec.cpu.eval.max_new_tokens=12", "data.train_batch_size=4",
            "actor_rollout_ref.rollout.n=2", "actor_rollout_ref.actor.ppo_mini_batch_size=2",
            # verl validates that prompts x n (8) is a multiple of the micro-batch (the demo's 32 fits its 16 x 8)
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4"]
    assert demo.main(args) == 0
    for rel in ("warm_start/model.safetensors", "data/train.parquet", "data/test.parquet", "eval/warm_start.jsonl",
                "run/global_step_2/actor/model/huggingface/model.safetensors", "run/eval/records.jsonl", "compare/metrics.json", "target_check.json"):
        assert (out / rel).exists(), rel
    assert list((out / "compare").glob("*.png")), "the comparison plots"
    check = json.loads((out / "target_check.json").read_text())
    assert set(check) >= {"warm_start", "rlec", "checks", "passed", "why"}
    printed = capsys.readouterr().out
    assert "The demo's goal" in printed and "| warm start |" in printed
    # the rerun reuses every stage: warm start, data, both record files, the finished run
    kept = ["warm_start/model.safetensors", "data/train.parquet", "eval/warm_start.jsonl", "run/eval/records.jsonl",
            "run/rollouts/2.jsonl"]
    mtimes = {rel: (out / rel).stat().st_mtime_ns for rel in kept}
    assert demo.main(args) == 0
    assert {rel: (out / rel).stat().st_mtime_ns for rel in kept} == mtimes
    assert "4/5 RLEC: 2 of 2 steps done and evaluated, reused" in capsys.readouterr().out
    # other settings in the same folder (a warm start, a data seed): refused before anything is written
    assert demo.main([*args[:5], "4", *args[6:]]) == 2
    assert "other settings (warm_start_key" in capsys.readouterr().err
    assert demo.main([*args, "data.seed=5"]) == 2
    assert "data, evaluation" in capsys.readouterr().err
    assert {rel: (out / rel).stat().st_mtime_ns for rel in kept} == mtimes


@pytest.mark.slow  # a rollout of 256 responses on the shipped warm start (its compact tokenizer's 223 rows): ~15 s
def test_demo_rollout_at_t1_without_top_k_rarely_samples_an_untrained_row(tmp_path: Path) -> None:
    """The warm start's model has the compact tokenizer's rows (rlec.compact_vocab), 139 of them untrained (logit 0:
    merge intermediates and specials). Expanded to Qwen3's 151,936 rows (151,851 at logit 0) the same warm start drew
    such a row in 22% of its responses at T = 1 and needed top-k 5; now sampling at T = 1 with no top-k (the demo's
    setting) draws one in under 2% (1 in 256 measured)."""
    import random

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rlec.demo import warm_start as ws
    from rlec.generation import HFEngine
    from rlec.models import load_tokenizer
    from rlec.prompts import build_messages, math_task, render

    assert demo.DEMO_SETTINGS["actor_rollout_ref.rollout.top_k"] == -1
    folder = ws.build(tmp_path / "ws", ws.WarmStartConfig(), progress=False)
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    qwen = load_tokenizer()
    trained = set(qwen.convert_ids_to_tokens(ws.compact_vocabulary(qwen)))
    known = torch.tensor([tok in trained for tok in tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))])
    assert len(known) == 223 and int(known.sum()) == 84
    engine = HFEngine(AutoModelForCausalLM.from_pretrained(folder), tokenizer)
    rng = random.Random(0)
    prompts = engine.encode([render(tokenizer, build_messages(math_task(ws.training_problem(rng, (1, 2, 3)).question), target))
                             for target in (0.1, 0.8) for _ in range(16)])
    batch = engine.sample(prompts, n=8, max_new_tokens=24, temperature=1.0, top_k=-1, seed=0)
    stray = ((~known[batch.responses]) & batch.response_mask.bool()).any(dim=1)
    assert len(batch.texts) == 256 and int(stray.sum()) <= 5, f"{int(stray.sum())} of 256 responses hold an untrained token"
