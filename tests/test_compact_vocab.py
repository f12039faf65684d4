"""The compact-vocabulary tokenizer (rlec.compact_vocab): the toy tasks' texts encode into Qwen3's token strings,
loaded by AutoTokenizer with no remote code; text outside its vocabulary is refused, naming the row and the character."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rlec.compact_vocab import CHAT_SPECIALS, Coverage, bpe_symbols, build_compact_tokenizer, check_texts


@pytest.fixture(scope="module")
def qwen():
    from rlec.models import load_tokenizer

    return load_tokenizer()


@pytest.fixture(scope="module")
def compact_dir(tmp_path_factory, qwen) -> Path:
    from rlec.demo.warm_start import toy_corpus

    out = tmp_path_factory.mktemp("compact_tok")
    build_compact_tokenizer(out, toy_corpus(qwen))
    return out


@pytest.fixture(scope="module")
def compact(compact_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(compact_dir), local_files_only=True)


def _toy_texts(tmp_path: Path, qwen) -> list[tuple[str, str]]:
    """``(where, text)`` of every prompt and response kind the demo, the experiments and the addition environment make."""
    from rlec.data.mix import EVAL_TARGET_GRID
    from rlec.demo import warm_start as ws
    from rlec.demo.data import write_demo_data
    from rlec.environments.addition import Addition
    from rlec.prompts import build_messages, math_task, render

    texts: list[tuple[str, str]] = []
    # the demo's and the experiments' data files (targets 0.1 / 0.8, the data preparation's mix with binary rows)
    for targets, binary in (([0.1, 0.8], 0.0), (None, 0.5)):
        paths = write_demo_data(tmp_path / f"d{binary}", train_rows=60, test_questions=12, binary_fraction=binary, targets=targets)
        for name, path in paths.items():
            for i, messages in enumerate(pq.read_table(path).column("prompt").to_pylist()):
                texts.append((f"{name} row {i}", render(qwen, messages)))
                texts.append((f"{name} row {i} (thinking template)", render(qwen, messages, enable_thinking=True)))
    # the evaluation's re-rendering at every target of the grid and the binary prompt
    rng = random.Random(0)
    for d in (1, 2, 3, 4):
        question = ws.addition_problem(rng, d).question
        for p in (None, *EVAL_TARGET_GRID, 0.01, 0.99, 0.55):
            texts.append((f"eval {question} p={p}", render(qwen, build_messages(math_task(question), p))))
    # the addition environment (RLVE's), difficulties 0-5
    env = Addition()
    for difficulty in range(6):
        task_text = env.generate(difficulty, difficulty).prompt
        texts.append((f"addition d={difficulty}", render(qwen, build_messages(task_text, 0.3))))
    # responses: every form the warm start learnt, and what the grader reads
    for restate in ws.RESTATE_MODES:
        for abstain in (False, True):
            for target in (None, 0.1, 0.8, 0.07):
                problem = ws.addition_problem(rng, 3)
                texts.append((f"response {restate} {abstain} {target}",
                              ws.response_text(problem, abstain, target, restate) + "<|im_end|>"))
    texts += [("idk", "\\boxed{I don't know}"), ("sum", "\\boxed{1998}<|im_end|>"), ("pad", "<|endoftext|>")]
    return texts


def test_every_toy_text_encodes_into_qwen3s_token_strings(tmp_path: Path, qwen, compact, compact_dir) -> None:
    config = json.loads((compact_dir / "tokenizer_config.json").read_text())
    assert "auto_map" not in config and "{%- if messages[0].role == 'system' %}" in config["chat_template"]
    vocab = compact.get_vocab()
    assert len(compact) == len(vocab) == max(vocab.values()) + 1 < 300  # ids 0 .. K-1, nothing added on load
    assert compact.eos_token == "<|im_end|>" and compact.pad_token == "<|endoftext|>"
    texts = _toy_texts(tmp_path, qwen)
    assert len(texts) > 300
    for where, text in texts:
        assert compact.tokenize(text) == qwen.tokenize(text), where
        ids = compact(text, add_special_tokens=False)["input_ids"]
        assert compact.decode(ids) == text, where
    # the chat template renders the same with the compact tokenizer (its own special tokens)
    messages = [{"role": "user", "content": "What is 12 + 30?"}]
    for kwargs in ({"enable_thinking": False}, {}):
        assert (compact.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, **kwargs)
                == qwen.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, **kwargs))


def test_the_many_answer_tasks_texts_encode_with_its_warm_starts_tokenizer(tmp_path: Path, qwen) -> None:
    """Pass@k's warm start (``pair_sum_share`` > 0) adds the ``pair_sum`` task to the corpus: its prompts (every level,
    the binary prompt and every target, both templates; the pool's rows) and answers, and every text of the toy tasks
    above, encode into Qwen3's token strings."""
    from transformers import AutoTokenizer

    from rlec.data.mix import EVAL_TARGET_GRID
    from rlec.demo import warm_start as ws
    from rlec.demo.warm_start import toy_corpus
    from rlec.environments import get_environment
    from rlec.environments.pool import pool_rows
    from rlec.experiments import passk
    from rlec.prompts import build_messages, render

    out = tmp_path / "tok"
    build_compact_tokenizer(out, toy_corpus(qwen, passk.WARM_START))
    compact = AutoTokenizer.from_pretrained(str(out), local_files_only=True)
    env = get_environment("pair_sum")
    texts = _toy_texts(tmp_path, qwen)
    for d in range(6):
        problem = env.generate(d + 11, d)
        for p in (None, *EVAL_TARGET_GRID, 0.01, 0.99):
            messages = build_messages(problem.prompt, p)
            texts += [(f"pair_sum d={d} p={p}", render(qwen, messages)),
                      (f"pair_sum d={d} p={p} (thinking)", render(qwen, messages, enable_thinking=True))]
        texts.append((f"pair_sum answer d={d}", ws.response_text(ws.AdditionProblem("", problem.answer, d + 1), False) + "<|im_end|>"))
    train, test = pool_rows(passk.POOL, 8)
    texts += [(f"pool row {i}", render(qwen, row["prompt"])) for i, row in enumerate(train + test)]
    for where, text in texts:
        assert compact.tokenize(text) == qwen.tokenize(text), where
    assert len(compact) < 320


def test_the_vocabulary_is_the_corpus_tokens_with_their_merge_intermediates(compact, qwen) -> None:
    # "Ġfollowing" is a final token of the template; BPE builds it through "Ġfollow" (kept, never final here)
    vocab = compact.get_vocab()
    assert {"Ġfollowing", "Ġfollow", "<|im_start|>", "<think>"} <= set(vocab)
    assert "Ġfollow" not in {tok for text in ("Solve the following math problem",) for tok in qwen.tokenize(text)}
    assert set(CHAT_SPECIALS) <= set(vocab) and "<|vision_pad|>" not in vocab


def test_bpe_symbols_by_hand() -> None:
    ranks = {("a", "b"): 0, ("ab", "c"): 1, ("b", "c"): 2}
    assert bpe_symbols("abc", ranks) == (["abc"], {"a", "b", "c", "ab", "abc"})
    assert bpe_symbols("bca", ranks) == (["bc", "a"], {"a", "b", "c", "bc"})


def test_text_outside_the_vocabulary_is_refused_naming_the_row_and_character(compact_dir, compact) -> None:
    # the tokenizer itself drops the character silently: the reason for the check
    assert compact.decode(compact("What is é?")["input_ids"]) == "What is ?"
    cov = Coverage(compact_dir / "tokenizer.json")
    assert not cov.complete
    assert cov.unencodable("<|im_start|>What is 7 + 5?<|im_end|>") is None
    assert cov.unencodable("What is 7 × 5?") == (10, "×")
    assert cov.unencodable("What is é?") == (8, "é")
    with pytest.raises(ValueError, match=r"train.parquet row 3: character 'é' \(U\+00E9\) at position 8"):
        check_texts(cov, [("train.parquet row 2", "What is 1 + 2?"), ("train.parquet row 3", "What is é?")])


def test_qwen3s_own_tokenizer_encodes_anything(qwen) -> None:
    from rlec.models import bundled_tokenizer_path

    cov = Coverage(bundled_tokenizer_path() / "tokenizer.json")
    assert cov.complete and cov.unencodable("×é漢字") is None
    check_texts(cov, [("row 0", "×é漢字")])


def test_the_launch_refuses_data_the_models_tokenizer_cannot_encode(tmp_path: Path, compact_dir) -> None:
    from rlec.cluster.paths import _encodable
    from rlec.run_config import VerlKeys

    model = tmp_path / "model"
    model.mkdir()
    (model / "tokenizer.json").write_bytes((compact_dir / "tokenizer.json").read_bytes())
    good = [[{"role": "user", "content": "What is 1 + 2?"}]] * 3
    bad = good + [[{"role": "user", "content": "What is 1 + 2 (in €)?"}]]
    for name, prompts in (("train", good), ("test", bad)):
        pq.write_table(pa.table({"prompt": prompts}), tmp_path / f"{name}.parquet")
    cfg = {"actor_rollout_ref": {"model": {"path": str(model)}},
           "data": {"train_files": str(tmp_path / "train.parquet"), "val_files": str(tmp_path / "test.parquet")}}
    (finding,) = _encodable(VerlKeys.read(cfg))
    assert finding.key == "data.val_files"
    assert f"{tmp_path / 'test.parquet'} row 3 (prompt message 0): character '€' (U+20AC)" in finding.message
    cfg["data"]["val_files"] = str(tmp_path / "train.parquet")
    assert _encodable(VerlKeys.read(cfg)) == []
