"""The warm start of Pass@k's many-answer task (``WarmStartConfig.pair_sum_share``): its examples answer each
``pair_sum`` prompt with one right pair drawn uniformly, its vocabulary and compact tokenizer cover the task, a built
folder encodes the task's rows, and the demo's settings (share 0) keep their key and their shipped copy."""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest

from rlec.demo import warm_start as ws
from rlec.environments import get_environment
from rlec.environments.base import Problem
from rlec.environments.pair_sum import QUESTION

PAIRS = ws.WarmStartConfig(steps=2, batch_size=4, hidden_size=16, intermediate_size=32, num_layers=1, num_heads=2,
                           num_kv_heads=1, digits=(1, 2), finetune=(), pair_sum_share=0.5, pair_sum_digits=(1, 2))


@pytest.fixture(scope="module")
def tokenizer():
    from rlec.models import load_tokenizer

    return load_tokenizer()


def test_the_demos_key_ignores_the_added_settings_at_their_defaults() -> None:
    import json

    shipped = json.loads((ws.SHIPPED_DIR / ws.MANIFEST).read_text())["key"]
    assert ws.WarmStartConfig().key() == shipped  # the demo's shipped copy still matches its settings
    assert ws.WarmStartConfig(pair_sum_share=0.5).key() != shipped
    assert ws.WarmStartConfig(pair_sum_share=0.5).key() != ws.WarmStartConfig(pair_sum_share=0.5, pair_sum_digits=(1,)).key()
    with pytest.raises(ValueError, match="pair_sum_share must be in"):
        ws.WarmStartConfig(pair_sum_share=1.0)
    cfg = ws.config_from_args(ws.build_parser().parse_args(["--pair-sum-share", "0.5", "--pair-sum-digits", "2"]))
    assert cfg.pair_sum_share == 0.5 and cfg.pair_sum_digits == (2,)


def test_pair_sum_examples_are_right_and_spread_over_the_right_answers() -> None:
    examples = ws.sft_examples(random.Random(0), replace(PAIRS, pair_sum_digits=(1,)), 4000)
    pairs = [p for p, _, _ in examples if p.question.startswith("Which two numbers")]
    assert 0.45 < len(pairs) / len(examples) < 0.55  # the share
    env = get_environment("pair_sum")
    answers: dict[str, Counter] = {}
    for p in pairs:
        n = int(p.question.rsplit(" ", 1)[1].rstrip("?"))
        assert p.question == QUESTION.format(m=9, n=n)
        problem = Problem("pair_sum", 0, 0, p.question, p.answer, {"n": n, "m": 9})
        assert env.verify(ws.response_text(p, False), problem).correct, p
        answers.setdefault(p.question, Counter())[p.answer] += 1
    # n = 9 has 10 right pairs (0 + 9 ... 9 + 0): the examples show each of them, none much more than the others
    nine = answers[QUESTION.format(m=9, n=9)]
    assert len(nine) == 10 and max(nine.values()) < 3 * min(nine.values())
    # share 0 draws nothing extra: the demo's example stream is what it was
    assert ws.sft_examples(random.Random(1), ws.WarmStartConfig(), 50) == ws.sft_examples(random.Random(1), replace(
        ws.WarmStartConfig(), pair_sum_digits=(3,)), 50)


def test_the_vocabulary_and_a_built_folder_cover_the_task(tokenizer, tmp_path: Path, monkeypatch) -> None:
    demo, pairs = set(ws.compact_vocabulary(tokenizer)), set(ws.compact_vocabulary(tokenizer, PAIRS))
    assert demo < pairs  # the task's words added, nothing of the additions lost
    enc = ws.Encoder(tokenizer, sorted(pairs))
    env = get_environment("pair_sum")
    for d in (0, 1, 2, 3):
        problem = env.generate(7, d)
        for p in (None, 0.1, 0.99):
            enc.prompt(QUESTION.format(m=problem.data["m"], n=problem.data["n"]), p)  # raises outside the vocabulary
        enc.response(ws.response_text(ws.AdditionProblem("", problem.answer, d + 1), False))
    with pytest.raises(ValueError, match="outside the compact vocabulary"):
        ws.Encoder(tokenizer, sorted(demo)).prompt(QUESTION.format(m=9, n=5), None)
    # a built folder: its compact tokenizer encodes the environment's rows; the launch's check passes them
    monkeypatch.setattr(ws, "measure", lambda *a, **k: {"stub": True})
    out = ws.build(tmp_path / "ws", PAIRS, progress=False)
    from rlec.compact_vocab import Coverage, check_texts
    from rlec.environments import problem_row
    from rlec.prompts import render

    rows = [problem_row(env.generate(s, d), index=0, split="train") for s in range(3) for d in (0, 1)]
    check_texts(Coverage(out / "tokenizer.json"), [(f"row {i}", render(tokenizer, r["prompt"])) for i, r in enumerate(rows)])
