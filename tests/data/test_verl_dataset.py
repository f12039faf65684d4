"""verl's own dataset class loads the prepared files with the bundled tokenizer.

verl's length filter hashes the whole tokenizer for ``datasets``' fingerprint and renders every
row again (tens of seconds on a busy 2-core box), so the filter is checked once, on a subset.
"""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest
from omegaconf import OmegaConf

from rlec.data.lengths import PromptLengthCounter
from rlec.prompts import CHAT_TEMPLATE_KWARGS


def _dataset(path, tokenizer, cache_dir, max_prompt_length=None):
    from verl.utils.dataset.rl_dataset import RLHFDataset, collate_fn

    config = OmegaConf.create(
        {
            "prompt_key": "prompt",
            "max_prompt_length": max_prompt_length or 2048,
            "filter_overlong_prompts": max_prompt_length is not None,
            "filter_overlong_prompts_workers": 1,
            "truncation": "error",
            "return_raw_chat": True,
            "apply_chat_template_kwargs": dict(CHAT_TEMPLATE_KWARGS),
            "cache_dir": str(cache_dir),
        }
    )
    return RLHFDataset(data_files=str(path), tokenizer=tokenizer, config=config), collate_fn


@pytest.mark.parametrize("split", ["train", "test"])
def test_rlhf_dataset_loads_every_row(split, prepared, rows, qwen_tokenizer, tmp_path):
    out, summary = prepared
    data = rows(out / f"{split}.parquet")
    ds, collate = _dataset(out / f"{split}.parquet", qwen_tokenizer, tmp_path)
    assert len(ds) == len(data) == summary["splits"][split]["rows"]
    item = ds[3]
    assert item["raw_prompt"] == data[3]["prompt"]
    assert item["index"] == 3 and item["extra_info"] == data[3]["extra_info"]
    assert item["reward_model"] == data[3]["reward_model"] and item["data_source"] == data[3]["data_source"]
    batch = collate([ds[i] for i in range(4)])
    assert [e["target_p"] for e in batch["extra_info"]] == [r["extra_info"]["target_p"] for r in data[:4]]
    assert list(batch["data_source"]) == [r["data_source"] for r in data[:4]]


def test_verl_length_filter_keeps_exactly_what_our_count_allows(prepared, qwen_tokenizer, tmp_path):
    out, _ = prepared
    table = pq.read_table(out / "train.parquet")
    subset = table.take(list(range(0, table.num_rows, table.num_rows // 24))[:24])
    pq.write_table(subset, tmp_path / "subset.parquet")
    info = subset.column("extra_info").to_pylist()
    ours = PromptLengthCounter(qwen_tokenizer, progress=False)(
        [e["task_text"] for e in info], [None if e["objective"] == "binary" else e["target_p"] for e in info]
    )
    limit = int(sorted(ours)[len(ours) // 2])
    ds, _ = _dataset(tmp_path / "subset.parquet", qwen_tokenizer, tmp_path / "cache", max_prompt_length=limit)
    kept = [ds[i]["extra_info"]["index"] for i in range(len(ds))]
    assert kept == [e["index"] for e, n in zip(info, ours) if n <= limit]
    assert 0 < len(kept) < len(info)
