"""The demo's warm start: exact full-vocabulary loss on the compact model, expansion, data, cache, CLI."""

from __future__ import annotations

import json
import random
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from rlec.local import warm_start as ws

TINY = ws.WarmStartConfig(steps=3, batch_size=4, hidden_size=16, intermediate_size=32, num_layers=1, num_heads=2,
                          num_kv_heads=1, digits=(1, 2))


@pytest.fixture(scope="module")
def tokenizer():
    from rlec.models import load_tokenizer

    return load_tokenizer()


@pytest.fixture(scope="module")
def encoder(tokenizer) -> ws.Encoder:
    return ws.Encoder(tokenizer, ws.compact_vocabulary(tokenizer))


@pytest.fixture(scope="module")
def compact_and_full(encoder):
    torch.manual_seed(0)
    compact = ws.build_compact_model(TINY, len(encoder.vocab))
    with torch.no_grad():  # logits well away from 0, so both signs and the unused column all matter
        compact.lm_head.weight.mul_(400.0)
    return compact.eval(), ws.expand(compact, encoder.vocab, TINY)


def test_compact_vocabulary_covers_every_target_and_long_sums(encoder) -> None:
    rng = random.Random(0)
    for p in [None, 0.0, 0.01, 0.5, 0.99]:
        for digits in (1, 3, 7):
            problem = ws.addition_problem(rng, digits)
            assert encoder.prompt(problem.question, p)  # raises when a token is outside
            assert encoder.decode(encoder.response(ws.response_text(problem, False))) == f"\\boxed{{{problem.answer}}}"
    assert len(encoder.vocab) < 200 and encoder.decode(encoder.response(ws.IDK_RESPONSE)) == "\\boxed{I don't know}"


def test_expanded_model_has_the_compact_logits_and_zero_elsewhere(encoder, compact_and_full) -> None:
    compact, full = compact_and_full
    assert full.config.vocab_size == ws.FULL_VOCAB_SIZE == full.lm_head.weight.shape[0]
    ids = encoder.prompt("What is 12 + 34?", 0.7)
    small = compact(input_ids=torch.tensor([ids])).logits[0]
    big = full(input_ids=torch.tensor([[encoder.vocab[i] for i in ids]])).logits[0]
    vocab = torch.tensor(encoder.vocab)
    torch.testing.assert_close(big[:, vocab], small, rtol=0, atol=1e-5)
    others = torch.ones(ws.FULL_VOCAB_SIZE, dtype=torch.bool)
    others[vocab] = False
    assert torch.count_nonzero(big[:, others]) == 0


def test_compact_loss_is_the_full_vocabulary_cross_entropy(encoder, compact_and_full) -> None:
    compact, full = compact_and_full
    rng = random.Random(1)
    prompts, responses = [], []
    for problem, target, abstain in ws.sft_examples(rng, TINY, 3):
        prompts.append(encoder.prompt(problem.question, target))
        responses.append(encoder.response(ws.response_text(problem, abstain)))
    loss = ws.sft_loss(compact, encoder, prompts, responses)
    # the same loss from the full model's 151,936-wide logits with torch's cross-entropy
    total, count = 0.0, 0
    for p, r in zip(prompts, responses):
        ids = torch.tensor([[encoder.vocab[i] for i in p + r]])
        logits = full(input_ids=ids).logits[0, len(p) - 1 : -1]
        total += float(torch.nn.functional.cross_entropy(logits, ids[0, len(p):], reduction="sum"))
        count += len(r)
    assert float(loss) == pytest.approx(total / count, rel=1e-5)


def test_compact_greedy_step_matches_the_full_model_argmax(encoder, compact_and_full) -> None:
    compact, full = compact_and_full
    prompts = [encoder.prompt(f"What is {a} + {b}?", p) for a, b, p in [(3, 4, 0.2), (55, 17, None), (801, 99, 0.9)]]
    texts, drawn = ws.generate_compact(compact, encoder, prompts, max_new_tokens=1, return_tokens=True)
    for p, d in zip(prompts, drawn):
        full_choice = int(full(input_ids=torch.tensor([[encoder.vocab[i] for i in p]])).logits[0, -1].argmax())
        if d[0] == len(encoder.vocab):  # the compact model chose "another token": the full argmax is outside the set
            assert full_choice not in encoder.vocab
        else:
            assert full_choice == encoder.vocab[d[0]]


def test_abstention_coin_ignores_target_and_difficulty() -> None:
    cfg = replace(TINY, digits=(1, 2, 3), idk_rate=0.3)
    examples = ws.sft_examples(random.Random(7), cfg, 30_000)
    by_digits: dict[int, list[bool]] = {}
    by_target: dict[str, list[bool]] = {}
    for problem, target, abstain in examples:
        by_digits.setdefault(problem.digits, []).append(abstain)
        by_target.setdefault("binary" if target is None else "low" if target < 0.45 else "high", []).append(abstain)
    for groups in (by_digits, by_target):
        assert len(groups) == 3
        for flags in groups.values():  # binomial sd <= 0.008 for >= 3,000 draws: 0.03 is > 3.5 sd
            assert abs(sum(flags) / len(flags) - 0.3) < 0.03


def test_training_never_sees_held_out_problems() -> None:
    rng = random.Random(3)
    drawn = [ws.training_problem(rng, (2, 3)) for _ in range(3000)]
    assert not any(ws.is_held_out(p) for p in drawn)
    held = [ws.addition_problem(rng, 3) for _ in range(3000)]
    share = sum(ws.is_held_out(p) for p in held) / len(held)
    assert 0.07 < share < 0.13  # ~HELD_OUT_PERCENT of multi-digit problems
    assert not any(ws.is_held_out(ws.addition_problem(rng, 1)) for _ in range(200))


def test_training_is_deterministic_given_the_seed(tokenizer) -> None:
    a, _, hist_a = ws.train(TINY, tokenizer, progress=False)
    b, _, hist_b = ws.train(TINY, tokenizer, progress=False)
    c, _, _ = ws.train(replace(TINY, seed=1), tokenizer, progress=False)
    assert hist_a == hist_b
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))
    assert not all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), c.state_dict().values()))


def test_build_writes_a_model_folder_and_reuses_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from rlec.models import check_model_folder, read_model_config

    out = tmp_path / "ws"
    cfg = replace(TINY, steps=2)
    monkeypatch.setattr(ws, "measure", lambda *a, **k: {"stub": True})  # the report is tested on its own
    ws.build(out, cfg, progress=False)
    check_model_folder(out, model_types=("qwen3",))
    assert read_model_config(out)["vocab_size"] == ws.FULL_VOCAB_SIZE
    manifest = json.loads((out / ws.MANIFEST).read_text())
    assert manifest["key"] == cfg.key() and manifest["config"]["steps"] == 2
    assert ws.cached(out, cfg) and not ws.cached(out, replace(cfg, seed=5))

    def fail(*args, **kwargs):
        raise AssertionError("a cached warm start was retrained")

    monkeypatch.setattr(ws, "train", fail)
    assert ws.build(out, cfg, progress=False) == out


def test_measure_reports_rates_by_digits_and_target(encoder, compact_and_full) -> None:
    compact, _ = compact_and_full
    report = ws.measure(compact, encoder, TINY, per_cell=2, targets=(None, 0.5))
    for mode in ("greedy", "sampled"):
        assert set(report[mode]["by_digits"]) == {"1", "2", "3"} and set(report[mode]["by_target"]) == {"binary", "0.5"}
        for row in report[mode]["by_digits"].values():
            assert row["n"] == 4 and 0 <= row["accuracy"] <= 1 and 0 <= row["abstain_rate"] <= 1
    assert "| digits |" in ws.format_report(report)


def test_cli_rejects_bad_settings(capsys: pytest.CaptureFixture[str]) -> None:
    assert ws.main(["--digits", "0,2"]) == 2
    assert "digits must be" in capsys.readouterr().err
    assert ws.main(["--hidden-size", "30", "--num-heads", "4"]) == 2
