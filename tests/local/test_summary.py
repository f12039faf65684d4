"""The local run's training summary: the data behind the curves plot (not its pixels) and the time split."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlec.local.summary import REWARD_NOTE, STEP_PHASES, curve_series, plot_curves, step_time_split, time_split


def _record(step: int, b: float) -> dict:
    # a random policy: the same outcomes every step (reward at b = 1 flat), the step's reward moving with b alone
    return {"step": step, "rlec/b": b, "rlec/reward/mean": -0.7 + 0.4 * b, "rlec/reward_b1/mean": -0.3,
            "rlec/coverage": 0.9, "timing_s/gen": 2.0, "timing_s/reward": 0.5, "timing_s/adv": 0.1,
            "timing_s/old_log_prob": 1.5, "timing_s/update_actor": 3.0, "timing_s/update_weights": 0.4,
            "timing_s/step": 8.0, "rollout/tokens_per_s": 100.0}


RECORDS = [_record(step, (step - 1) / 4) for step in range(1, 6)]


def test_time_split_covers_the_whole_step() -> None:
    # issue 26 item 12: the panel stacked gen, reward, update_actor, update_weights only (5.9 of 8.0 s here)
    split = step_time_split(RECORDS[0])
    assert set(split) == {*STEP_PHASES, "other"}
    assert split["old_log_prob"] == 1.5 and split["adv"] == 0.1 and split["other"] == pytest.approx(0.5)
    assert sum(split.values()) == pytest.approx(RECORDS[0]["timing_s/step"])
    text = time_split(RECORDS)
    assert "old_log_prob 7.5s (19%)" in text and "other 2.5s (6%)" in text and "gen 10.0s (25%)" in text


def test_time_split_without_a_step_time_has_no_negative_rest() -> None:
    split = step_time_split({"timing_s/gen": 1.0})
    assert split["other"] == 0.0 and sum(split.values()) == 1.0


def test_reward_panel_shows_reward_at_fixed_b_and_says_the_rise_is_the_schedule() -> None:
    series = curve_series(RECORDS)
    assert list(series) == ["reward (b of the step)", "reward at b = 1", "b", "coverage"]
    assert series["reward (b of the step)"] == pytest.approx([-0.7, -0.6, -0.5, -0.4, -0.3])  # rises with b only
    assert series["reward at b = 1"] == [-0.3] * 5  # flat: nothing was learned
    assert "b schedule" in REWARD_NOTE and "b = 1" in REWARD_NOTE
    assert "reward at b = 1" not in curve_series([{"step": 1, "rlec/reward/mean": 0.1}])  # older metrics files


def test_plot_is_written(tmp_path: Path) -> None:
    png = plot_curves(RECORDS, tmp_path / "curves.png")
    assert png is not None and png.stat().st_size > 0 and plot_curves([], tmp_path / "none.png") is None


def test_the_table_shows_each_enabled_algorithms_figures():
    from rlec.local.summary import training_table

    plain = training_table([{"step": 1, "rlec/b": 0.0}])
    assert "E3 T" not in plain and "pass@k" not in plain
    table = training_table([{"step": 1, "e3/temperature": 0.95, "passk/active_k": 2, "rlve/maze/difficulty": 3}])
    header, _, row = table.splitlines()
    assert "E3 T" in header and "pass@k k" in header and "maze d" in header
    assert "0.950" in row and "| 2 |" in row and "| 3 |" in row
