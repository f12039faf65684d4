"""A fixed pool of one environment's problems (rlec.environments.pool): training rows on even seeds, held-out rows on
odd ones, and the distinct right answers per prompt counted, stored and printed (Pass@k's many-answer task)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq

from rlec.environments.base import Problem
from rlec.environments.pair_sum import count_right_answers
from rlec.environments.pool import PoolConfig, format_pool_summary, main, write_pool


def test_the_pool_counts_each_prompts_right_answers(tmp_path: Path) -> None:
    summary = write_pool(tmp_path / "pool", PoolConfig("pair_sum", (0, 1), test_per_difficulty=4), train_rows=6)
    train = pq.read_table(tmp_path / "pool" / "train.parquet").to_pylist()
    test = pq.read_table(tmp_path / "pool" / "test.parquet").to_pylist()
    assert len(train) == 6 and len(test) == 8
    assert [r["extra_info"]["source"] for r in train] == ["pair_sum/d0", "pair_sum/d1"] * 3  # levels in turn
    problems = {split: [Problem.from_json(r["reward_model"]["ground_truth"]) for r in rows]
                for split, rows in (("train", train), ("test", test))}
    assert all(p.seed % 2 == 0 for p in problems["train"]) and all(p.seed % 2 == 1 for p in problems["test"])
    assert all(r["prompt"][-1]["content"].endswith(f"add up to {p.data['n']}?") or f"add up to {p.data['n']}?" in
               r["prompt"][-1]["content"] for r, p in zip(train, problems["train"]))
    for split, ps in problems.items():
        # by brute force: the ordered pairs in [0, m] adding up to n
        brute = [sum(1 for a in range(p.data["m"] + 1) if 0 <= p.data["n"] - a <= p.data["m"]) for p in ps]
        assert summary["right_answers_per_row"][split] == brute
        assert brute == [count_right_answers(p.data["n"], p.data["m"]) for p in ps]
        d0 = [c for c, p in zip(brute, ps) if p.difficulty == 0]
        assert summary["right_answers"][split]["d0"]["max"] == max(d0) <= 10
        assert summary["right_answers"][split]["all"]["mean"] == sum(brute) / len(brute)
    assert json.loads((tmp_path / "pool" / "summary.json").read_text()) == summary
    text = format_pool_summary(summary)
    assert "distinct right answers per prompt" in text and "train d1: 3 rows" in text


def test_bad_input_is_refused_by_name_and_nothing_is_written(tmp_path: Path, capsys) -> None:
    out = tmp_path / "pool"
    assert main(["--environment", "no_such_env", "--out", str(out)]) == 2
    assert "unknown environment 'no_such_env'" in capsys.readouterr().err and not out.exists()
    assert main(["--environment", "pair_sum", "--difficulties", "0,x", "--out", str(out)]) == 2
    assert "--difficulties '0,x'" in capsys.readouterr().err and not out.exists()
    assert main(["--environment", "pair_sum", "--train-rows", "0", "--out", str(out)]) == 2
    assert "train_rows must be >= 1, got 0" in capsys.readouterr().err and not out.exists()
    assert main(["--environment", "pair_sum", "--difficulties", "39", "--out", str(out)]) == 2
    assert "difficulty 39 is above its maximum 38" in capsys.readouterr().err and not out.exists()
