"""Local-run config layering and the resumable prompt sampler."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rlec.local.config import load_config, schedule_steps
from rlec.local.data import PromptSampler, load_rows


def test_yaml_env_cli_layering() -> None:
    cfg = load_config(["rollout.n=8"], env={"STEPS": "3", "MODEL_PATH": "/m", "ROLLOUT_N": "6", "RESUME": "auto"})
    assert cfg.trainer.steps == 3 and cfg.model.path == "/m" and cfg.trainer.resume is True
    assert cfg.rollout.n == 8  # the command line wins over the environment
    assert schedule_steps(cfg) == 3
    assert load_config([], env={}).trainer.steps == 10  # the YAML default


@pytest.mark.parametrize(
    ("override", "match"),
    [("rollout.nn=3", "keys must exist"), ("rollout.n=1", "rollout.n must be >= 2"), ("trainer.steps=0", "trainer.steps"),
     ("rollout.top_p=1.5", "top_p"), ("rollout.scripted_fraction=1.0", "scripted_fraction")],
)
def test_bad_settings_name_the_key(override: str, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        load_config([override], env={})


def test_sampler_resume_draws_the_same_prompts() -> None:
    full = PromptSampler(7, seed=3)
    uninterrupted = [full.next_indices(3) for _ in range(6)]  # crosses epochs
    first = PromptSampler(7, seed=3)
    head = [first.next_indices(3) for _ in range(2)]
    resumed = PromptSampler(7, seed=3)
    resumed.load_state_dict(first.state_dict())
    assert head + [resumed.next_indices(3) for _ in range(4)] == uninterrupted
    epoch0 = sorted(uninterrupted[0] + uninterrupted[1] + uninterrupted[2][:1])
    assert epoch0 == list(range(7))  # each epoch visits every row once
    with pytest.raises(ValueError, match="7 rows / seed 3"):
        PromptSampler(8, seed=3).load_state_dict(first.state_dict())


def _write(path: Path, rows: list[dict]) -> Path:
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def test_load_rows_reads_the_contract_and_names_bad_rows(tmp_path: Path) -> None:
    good = {"data_source": "math_dapo", "prompt": [{"role": "user", "content": "1+1?"}],
            "reward_model": {"style": "rule", "ground_truth": "2"},
            "extra_info": {"question_id": "q1", "repeat": 0, "index": 0, "target_p": 0.3, "objective": "rlec"}}
    rows = load_rows(_write(tmp_path / "ok.parquet", [good]))
    assert rows[0].uid == "q1/r0/0" and rows[0].ground_truth == "2" and rows[0].extra_info["target_p"] == 0.3
    with pytest.raises(ValueError, match=r"missing column\(s\) \['extra_info'\]"):
        load_rows(_write(tmp_path / "nocol.parquet", [{k: v for k, v in good.items() if k != "extra_info"}]))
    with pytest.raises(FileNotFoundError, match="rlec.data.prepare"):
        load_rows(tmp_path / "absent.parquet")


@pytest.mark.parametrize(("value", "want"), [("1", True), ("auto", True), ("0", False), ("disable", False)])
def test_resume_accepts_both_conventions(value: str, want: bool) -> None:
    assert load_config([], env={"RESUME": value}).trainer.resume is want
    with pytest.raises(ValueError, match="RESUME='maybe'"):
        load_config([], env={"RESUME": "maybe"})
