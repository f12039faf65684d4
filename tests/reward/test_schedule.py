"""The b schedule: a pure, clamped linear function of the step, built from the one config schema."""

from __future__ import annotations

import pytest

from rlec.reward.schedule import EVALUATION_B, LinearSchedule, schedule_from_config, schedule_length
from rlec.run_config import RunConfig


def test_schedule_values() -> None:
    s = LinearSchedule(end_step=101)  # start_step 1: b(1) = 0, b(101) = 1
    assert s(1) == 0.0
    assert s(51) == pytest.approx(0.5)
    assert s(101) == 1.0
    assert s(0) == 0.0 and s(-5) == 0.0  # clamped before the start
    assert s(500) == 1.0  # clamped after the end


def test_schedule_custom_range() -> None:
    s = LinearSchedule(end_step=30, start_value=0.2, end_value=0.8, start_step=10)
    assert s(10) == pytest.approx(0.2)
    assert s(20) == pytest.approx(0.5)
    assert s(30) == pytest.approx(0.8)


@pytest.mark.parametrize("kwargs", [dict(end_step=1), dict(end_step=10, start_step=10), dict(end_step=10, end_value=1.5)])
def test_schedule_rejects_bad_settings(kwargs) -> None:
    with pytest.raises(ValueError):
        LinearSchedule(**kwargs)


def test_schedule_from_config_reads_the_rlec_keys_and_the_step_count() -> None:
    cfg = {"trainer": {"total_training_steps": 11}, "rlec": {"schedule": {"start_value": 0.5, "end_value": 1.0, "start_step": 1}}}
    s = schedule_from_config(RunConfig(cfg))
    assert (s.end_step, s(1), s(6), s(11), s(99)) == (11, 0.5, 0.75, 1.0, 1.0)
    assert schedule_length(RunConfig({"rlec": {"schedule": {"end_step": 5}}, "trainer": {"total_training_steps": 11}})) == 5


def test_evaluation_scores_with_the_end_of_the_schedule() -> None:
    assert EVALUATION_B == 1.0 == schedule_from_config(RunConfig({"trainer": {"total_training_steps": 3}}))(3)
