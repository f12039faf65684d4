"""Every row of the train and validation files is checked against the data contract before a launch starts
(rlec.data.contract.check_parquet, run by rlec.cluster.paths; the retired local loop checked every row, verl's path only the first 256)."""

from __future__ import annotations

import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rlec.cluster.paths import _parquet
from rlec.data.contract import ROWS_PER_BATCH, check_parquet
from rlec.run_config import RunConfig


@pytest.fixture(scope="module")
def train_parquet(sample_data_dir: Path) -> Path:
    return sample_data_dir / "train.parquet"  # prepared once per session (tests/conftest.py)


def test_contract_errors_name_file_row_and_key(tmp_path: Path, train_parquet: Path) -> None:
    rows = pq.read_table(train_parquet).to_pylist()[:3]
    rows[2]["reward_model"] = {"ground_truth": "  "}
    bad = tmp_path / "bad.parquet"
    pq.write_table(pa.Table.from_pylist(rows), bad)
    with pytest.raises(ValueError, match=rf"{bad}: row 2: key 'reward_model.ground_truth' must be a non-empty string"):
        check_parquet(bad)
    (tmp_path / "junk.parquet").write_text("not parquet")
    with pytest.raises(ValueError, match="not a readable parquet file"):
        check_parquet(tmp_path / "junk.parquet")
    with pytest.raises(FileNotFoundError, match="does not exist; prepare it with python -m rlec.data.prepare"):
        check_parquet(tmp_path / "missing.parquet")
    pq.write_table(pa.Table.from_pylist([{"prompt": "x"}]), tmp_path / "schema.parquet")
    with pytest.raises(ValueError, match=r"missing column\(s\) \['data_source', 'reward_model', 'extra_info'\]"):
        check_parquet(tmp_path / "schema.parquet")
    assert check_parquet(train_parquet) == pq.ParquetFile(train_parquet).metadata.num_rows > 0


def test_rlec_rows_without_a_numeric_target_are_refused_naming_file_row_and_key(tmp_path: Path, train_parquet: Path) -> None:
    rows = pq.read_table(train_parquet).to_pylist()[:3]
    rows[1]["extra_info"] = rows[1]["extra_info"] | {"objective": "rlec", "target_p": None}
    bad = tmp_path / "null_target.parquet"
    pq.write_table(pa.Table.from_pylist(rows), bad)
    with pytest.raises(ValueError, match=rf"{bad}: row 1: extra_info\['target_p'\] is null but extra_info\['objective'\] "
                                         r"is 'rlec': expected a number in \[0, 1\)"):
        check_parquet(bad)


def test_a_bad_row_deep_in_the_file_is_refused_before_the_launch(tmp_path: Path, train_parquet: Path) -> None:
    """A bad row in the second read batch (past the 256 rows verl's path used to check): the launch's path check
    names it, so the run does not stop at the step that reads it."""
    good = pq.read_table(train_parquet).to_pylist()
    rows = [good[i % len(good)] for i in range(ROWS_PER_BATCH + 10)]
    where = ROWS_PER_BATCH + 5
    rows[where] = {**rows[where], "extra_info": rows[where]["extra_info"] | {"objective": "rlec", "target_p": 1.5}}
    bad = tmp_path / "deep.parquet"
    pq.write_table(pa.Table.from_pylist(rows), bad, row_group_size=1000)
    findings, summary, count = _parquet("data.train_files", str(bad))
    assert summary is None and count == 0
    assert [f.key for f in findings] == ["data.train_files"]
    assert f"row {where}: extra_info['target_p']" in findings[0].message and "the data contract" in findings[0].message


# issue 55: three parquets passed the data check; tried in a launch (verl's own dataset code, RLHFDataset), each broke
# or silently distorted the run: a null content fails the chat template inside verl's prompt filter, which drops the
# row; Qwen3's template renders a message of role 'hacker\0' as nothing (the prompt became '<|im_start|>assistant\n',
# trained with the question's gold answer); a 1 MB prompt (500,153 tokens) is dropped by the filter
@pytest.mark.parametrize(("edit", "key", "rule"), [
    ({"role": "hacker\x00"}, "prompt[0].role", r"must be one of \['system', 'user', 'assistant', 'tool'\], got 'hacker\\x00'"),
    ({"role": None}, "prompt[0].role", r"must be one of .*, got None"),
    ({"content": None}, "prompt[0].content", r"must be a string, got None: verl's prompt filter fails on it"),
])
def test_a_message_verl_would_drop_or_mangle_is_refused_naming_file_row_and_key(tmp_path: Path, train_parquet: Path,
                                                                                 edit: dict, key: str, rule: str) -> None:
    rows = pq.read_table(train_parquet).to_pylist()[:3]
    rows[1]["prompt"] = [{**rows[1]["prompt"][0], **edit}]
    bad = tmp_path / "bad.parquet"
    pq.write_table(pa.Table.from_pylist(rows), bad)
    with pytest.raises(ValueError, match=rf"{bad}: row 1: key '{re.escape(key)}' {rule}"):
        check_parquet(bad)


def _verl_count(tokenizer, messages) -> int:
    """What verl's prompt filter counts (verl/utils/dataset/rl_dataset.py, ``doc2len`` without a processor)."""
    from verl.utils.tokenizer import normalize_token_ids

    return len(normalize_token_ids(tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True,
                                                                 enable_thinking=False)))


@pytest.fixture(scope="module")
def qwen3_limit():
    from rlec.data.lengths import PromptLimit
    from rlec.models import load_tokenizer

    return PromptLimit(load_tokenizer(), 1024, {"enable_thinking": False})  # make run's data.max_prompt_length


def test_a_prompt_longer_than_max_prompt_length_is_refused_with_verls_count(tmp_path: Path, train_parquet: Path,
                                                                             qwen3_limit) -> None:
    """A 1 MB prompt, counted as verl's prompt filter counts it (apply_chat_template with the config's kwargs)."""
    rows = pq.read_table(train_parquet).to_pylist()[:3]
    rows[2]["prompt"] = [{"role": "user", "content": rows[2]["prompt"][0]["content"] + " x" * 500_000}]
    bad = tmp_path / "long.parquet"
    pq.write_table(pa.Table.from_pylist(rows), bad)
    verl_count = _verl_count(qwen3_limit.tokenizer, rows[2]["prompt"])
    assert verl_count > 500_000
    with pytest.raises(ValueError, match=rf"{bad}: row 2: key 'prompt' is {verl_count:,} tokens with the chat template, "
                                         r"more than data.max_prompt_length = 1,024: verl's prompt filter"):
        check_parquet(bad, qwen3_limit)
    assert check_parquet(bad) == 3  # without the tokenizer (SKIP_PATH_CHECKS' login node) the length is not checked


def test_the_prompt_limit_counts_exactly_at_the_boundary_and_skips_short_prompts(train_parquet: Path, qwen3_limit) -> None:
    from rlec.data.lengths import PromptLimit

    messages = pq.read_table(train_parquet).to_pylist()[0]["prompt"]
    tok = qwen3_limit.tokenizer
    exact = _verl_count(tok, messages)
    assert PromptLimit(tok, exact, {"enable_thinking": False}).excess(messages) is None  # fits exactly
    assert PromptLimit(tok, exact - 1, {"enable_thinking": False}).excess(messages) == exact  # one token over
    assert check_parquet(train_parquet, qwen3_limit) > 0  # make run's sample data fits

    class Counting:  # the real tokenizer, counting the calls that tokenise
        calls = 0

        def apply_chat_template(self, *args, **kwargs):
            return tok.apply_chat_template(*args, **kwargs)

        def __call__(self, *args, **kwargs):
            Counting.calls += 1
            return tok(*args, **kwargs)

    rendered = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False, enable_thinking=False)
    assert PromptLimit(Counting(), len(rendered.encode()), {"enable_thinking": False}).excess(messages) is None
    assert Counting.calls == 0  # at most one token per byte: no need to tokenise


def test_the_launch_check_reads_the_limit_and_the_tokenizer_from_the_config(tmp_path: Path, train_parquet: Path,
                                                                             tiny_moe_dir: Path, compose_rlec) -> None:
    from rlec.cluster.paths import path_findings

    rows = pq.read_table(train_parquet).to_pylist()
    long = rows[0]["prompt"][0]["content"] * 10  # over make run's 1,024 tokens, under 2,048
    rows[5]["prompt"] = [{"role": "user", "content": long}]
    bad = tmp_path / "long.parquet"
    pq.write_table(pa.Table.from_pylist(rows), bad)

    def errors(*overrides):
        cfg = compose_rlec("layout=cpu", "precision=fp32", f"actor_rollout_ref.model.path={tiny_moe_dir}",
                           f"data.train_files={bad}", f"data.val_files={train_parquet}",
                           f"trainer.default_local_dir={tmp_path / 'run'}", *overrides)
        return [f.message for f in path_findings(RunConfig(cfg))[0]]

    (found,) = errors()
    assert f"{bad}: row 5: key 'prompt' is " in found and "more than data.max_prompt_length = 1,024" in found
    assert errors("data.max_prompt_length=2048") == []
    # verl applies no limit when the filter is off and the user chose to truncate
    assert errors("data.filter_overlong_prompts=false", "data.truncation=left") == []
