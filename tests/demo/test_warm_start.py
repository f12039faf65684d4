"""The demo's warm start: exact full-vocabulary loss on the compact model, expansion, data, cache, CLI."""

from __future__ import annotations

import json
import random
from dataclasses import asdict, replace
from pathlib import Path

import pytest
import torch

from rlec.demo import warm_start as ws

TINY = ws.WarmStartConfig(steps=3, batch_size=4, hidden_size=16, intermediate_size=32, num_layers=1, num_heads=2,
                          num_kv_heads=1, digits=(1, 2), finetune=())


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


def test_restated_responses_put_the_choice_right_after_the_target(encoder) -> None:
    problem = ws.AdditionProblem("What is 12 + 34?", "46", 2)
    answer, abstain = ws.response_text(problem, False, 0.8, "all"), ws.response_text(problem, True, 0.8, "all")
    assert answer == "0.80 \\boxed{46}" and abstain == "0.80 I don't know \\boxed{I don't know}"
    assert ws.response_text(problem, True, None, "all") == "I don't know \\boxed{I don't know}"  # binary: no target
    assert ws.response_text(problem, True, 0.8, "answers") == "0.80 " + ws.IDK_RESPONSE
    assert ws.response_text(problem, True, 0.8, "none") == ws.IDK_RESPONSE
    with pytest.raises(ValueError, match="restate must be"):
        ws.response_text(problem, True, 0.8, "yes")
    a, b = encoder.response(answer), encoder.response(abstain)
    first = next(i for i, (x, y) in enumerate(zip(a, b)) if x != y)
    assert encoder.decode(a[:first]) == "0.80"  # the first token that differs follows the target's digits
    from rlec.grading import grade

    assert grade(abstain, "46", "math").outcome.value == "abstain" and grade(answer, "46", "math").outcome.value == "correct"


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
        total += float(torch.nn.functional.cross_entropy(logits, ids[0, len(p):], reduction="sum").detach())
        count += len(r)
    assert float(loss.detach()) == pytest.approx(total / count, rel=1e-5)


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


def test_warm_start_targets_are_the_training_datas_draw_and_stay_inside_their_bounds() -> None:
    """One draw of target p (rlec.data.mix.draw_targets) for the data, RLVE and the warm start: on the default grid
    bounds the stream is the one the warm start always drew (randint over the bounds' hundredths); bounds off the
    grid keep p inside them (the warm start's own rounding drew 0.90 for target_max = 0.895)."""
    cfg = replace(TINY, binary_fraction=0.0)
    ours, theirs = random.Random(11), random.Random(11)
    for _ in range(200):
        theirs.random()  # the binary coin
        assert ws.draw_target(ours, cfg) == theirs.randint(1, 90) / 100  # target_min, target_max = 0.01, 0.90
    off_grid = replace(cfg, target_min=0.015, target_max=0.895)
    rng = random.Random(5)
    drawn = {ws.draw_target(rng, off_grid) for _ in range(3000)}
    assert min(drawn) == 0.02 and max(drawn) == 0.89


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


def test_finetune_stages_continue_the_weights_with_their_own_digits_and_form(tokenizer, monkeypatch) -> None:
    base, _, _ = ws.train(TINY, tokenizer, progress=False)
    seen: list[tuple[tuple[int, ...], str]] = []
    real = ws.response_text
    monkeypatch.setattr(ws, "response_text", lambda pr, ab, t, mode: seen.append((pr.digits, mode)) or real(pr, ab, t, mode))
    staged, _, history = ws.train(replace(TINY, finetune=((2, "3", 1e-3, "all", 1),)), tokenizer, progress=False)
    assert {d for d, mode in seen[-2 * TINY.batch_size:]} == {3} and {m for _, m in seen[-2 * TINY.batch_size:]} == {"all"}
    assert [h["step"] for h in history][-2:] == [3, 4]  # the stage's steps follow the base pass's
    assert not all(torch.equal(a, b) for a, b in zip(base.state_dict().values(), staged.state_dict().values()))
    for bad in [((0, "1", 1e-3, "all", 1),), ((1, "x", 1e-3, "all", 1),), ((1, "1", 1e-3, "some", 1),)]:
        with pytest.raises(ValueError, match="finetune stage|digit counts"):
            replace(TINY, finetune=bad)
    parsed = ws.config_from_args(ws.build_parser().parse_args(["--finetune", '[[5, "2", 0.001, "all", 1]]']))
    assert parsed.finetune == ((5, "2", 0.001, "all", 1),)
    assert ws.config_from_dict(asdict(parsed)).key() == parsed.key()


def test_constant_schedule_run_is_the_prefix_of_a_longer_one(tokenizer) -> None:
    """A shipped warm start chosen as a snapshot of a longer run is rebuilt exactly by its own step count."""
    cfg = replace(TINY, lr_schedule="constant", steps=5)
    snapshot = {}
    ws.train(cfg, tokenizer, progress=False,
             on_step=lambda step, m: snapshot.update({k: v.clone() for k, v in m.state_dict().items()}) if step == 3 else None)
    short, _, _ = ws.train(replace(cfg, steps=3), tokenizer, progress=False)
    assert all(torch.equal(snapshot[k], v) for k, v in short.state_dict().items())
    cosine, _, _ = ws.train(replace(cfg, steps=3, lr_schedule="cosine"), tokenizer, progress=False)
    assert not all(torch.equal(snapshot[k], v) for k, v in cosine.state_dict().items())
    with pytest.raises(ValueError, match="lr_schedule"):
        replace(cfg, lr_schedule="linear")


def test_build_writes_a_model_folder_and_reuses_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from rlec.models import check_model_folder, read_model_config

    out = tmp_path / "ws"
    cfg = replace(TINY, steps=2)
    monkeypatch.setattr(ws, "measure", lambda *a, **k: {"stub": True})  # the report is tested on its own
    ws.build(out, cfg, progress=False)
    check_model_folder(out, model_types=("qwen3",))
    from rlec.megatron.preflight import check_hf_weights

    check_hf_weights(out)  # the folder's *.safetensors are the model's only (the compact weights in compact/)
    assert (out / ws.COMPACT_DIR / ws.COMPACT_FILE).is_file() and not (out / ws.COMPACT_FILE).exists()
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(out), local_files_only=True)  # the compact tokenizer, rows = its ids
    config = read_model_config(out)
    assert config["vocab_size"] == len(tokenizer) < 300
    assert config["eos_token_id"] == tokenizer.convert_tokens_to_ids("<|im_end|>") == tokenizer.eos_token_id
    manifest = json.loads((out / ws.MANIFEST).read_text())
    assert manifest["key"] == cfg.key() and manifest["config"]["steps"] == 2
    assert manifest["folder_key"] == ws.folder_key(cfg) == f"{cfg.key()}-format{ws.MODEL_FORMAT}"
    assert ws.cached(out, cfg) and not ws.cached(out, replace(cfg, seed=5)) and not ws.cached(out, cfg, experts=4)
    # a folder of the retired format (the model expanded to Qwen3's vocabulary) is not reused
    (out / ws.MANIFEST).write_text(json.dumps({k: v for k, v in manifest.items() if k != "folder_key"}))
    assert not ws.cached(out, cfg)
    (out / ws.MANIFEST).write_text(json.dumps(manifest))

    def fail(*args, **kwargs):
        raise AssertionError("a cached warm start was retrained")

    monkeypatch.setattr(ws, "train", fail)
    assert ws.build(out, cfg, progress=False) == out


def test_shipped_compact_weights_replace_training_only_for_their_settings(tmp_path: Path, tokenizer, monkeypatch) -> None:
    cfg = replace(TINY, steps=2)
    compact, enc, _ = ws.train(cfg, tokenizer, progress=False)
    ws.save_compact(compact, {"key": cfg.key(), "config": asdict(cfg), "compact_vocab": enc.vocab}, tmp_path)
    assert ws.load_shipped(replace(cfg, seed=9), tokenizer, tmp_path) is None  # other settings: not used
    loaded, enc2, manifest = ws.load_shipped(cfg, tokenizer, tmp_path)
    assert enc2.vocab == enc.vocab and manifest["key"] == cfg.key()
    assert all(torch.equal(x, y) for x, y in zip(compact.state_dict().values(), loaded.state_dict().values()))

    def fail(*args, **kwargs):
        raise AssertionError("trained although the shipped weights have these settings")

    monkeypatch.setattr(ws, "SHIPPED_DIR", tmp_path)
    monkeypatch.setattr(ws, "train", fail)
    out = ws.build(tmp_path / "full", cfg, progress=False)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    written = AutoModelForCausalLM.from_pretrained(out)
    compact_ids = AutoTokenizer.from_pretrained(str(out)).convert_tokens_to_ids(tokenizer.convert_ids_to_tokens(enc.vocab[:10]))
    assert torch.equal(written.lm_head.weight[compact_ids], compact.lm_head.weight[:10])
    (tmp_path / ws.COMPACT_FILE).write_bytes(b"not safetensors")
    with pytest.raises(ValueError, match=ws.COMPACT_FILE):
        ws.load_shipped(cfg, tokenizer, tmp_path)


def test_the_repository_ships_the_default_warm_start(tokenizer, tmp_path: Path, capsys) -> None:
    shipped = ws.load_shipped(ws.WarmStartConfig(), tokenizer)
    assert shipped is not None, f"{ws.SHIPPED_DIR} does not hold the default settings' warm start (rebuild: docs/local_run.md)"
    assert (ws.SHIPPED_DIR / ws.COMPACT_FILE).stat().st_size < 2**20
    # the CLI with the default settings converts the shipped copy (no training) and says so
    assert ws.main(["--out", str(tmp_path / "ws"), "--quiet"]) == 0
    assert "converted from the shipped copy" in capsys.readouterr().out
    assert ws.cached(tmp_path / "ws", ws.WarmStartConfig())


def test_remapped_model_has_the_compact_models_logits_on_its_tokens(tokenizer, encoder, compact_and_full, tmp_path: Path) -> None:
    """The model build writes: row j = the compact model's row of the compact tokenizer's token j, other rows 0 (logit 0)."""
    from rlec.compact_vocab import build_compact_tokenizer

    compact, _ = compact_and_full
    tokens = build_compact_tokenizer(tmp_path, ws.toy_corpus(tokenizer))
    model = ws.remap(compact, encoder.vocab, TINY, tokenizer, tokens)
    prompt = encoder.prompt("What is 48 + 37?", 0.8)  # compact-model ids
    strings = tokenizer.convert_ids_to_tokens([encoder.vocab[i] for i in prompt])
    ids = torch.tensor([[tokens.index(t) for t in strings]])
    with torch.no_grad():
        want, got = compact(torch.tensor([prompt])).logits[0, -1], model(ids).logits[0, -1]
    trained = [tokens.index(t) for t in tokenizer.convert_ids_to_tokens(encoder.vocab) if t in tokens]
    assert len(trained) == len(encoder.vocab) - 1  # "}\\": only the training vocabulary's probe string made it
    kept = [i for i, t in enumerate(tokenizer.convert_ids_to_tokens(encoder.vocab)) if t in tokens]
    assert torch.allclose(got[trained], want[kept], atol=1e-5)
    others = sorted(set(range(len(tokens))) - set(trained))
    assert torch.equal(got[others], torch.zeros(len(others)))


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
