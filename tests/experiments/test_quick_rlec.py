"""``python -m rlec.experiments rlec_schedule --quick --arms b1`` end to end (verl's trainer on CPU): the fixed-b arm's reward
uses b = 1 at every step, where RLEC's schedule starts at b = 0 (make run's step 1), and the result file has the
held-out coverage at both targets and their gap, and the training coverage per target the collapse events are read
from. The other arms differ by settings the verl-path tests train with (the schedule: tests/tools/test_verl_cpu_run.py;
the std-normalised advantage of ``rlec_advantage``: tests/verl_plugin/test_advantage.py)."""

from __future__ import annotations

import json

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.minutes(3)]  # tests/conftest.py: the longest modules start first


def test_the_fixed_b_arm_trains_with_b_1_from_its_first_step(quick, arm_metrics) -> None:
    out = quick("rlec_schedule", "b1")  # one launch of 2 steps
    rows = arm_metrics(out, "b1")
    assert [row["rlec/b"] for row in rows] == [1.0, 1.0], rows
    table = json.loads((out / "results.json").read_text())["arms"]["b1"]["table"]
    assert {"held-out coverage p=0.1", "held-out coverage p=0.8", "held-out coverage gap"} <= set(table), sorted(table)
    from rlec.experiments import keys as K

    assert all(K.M_COVERAGE_LOW in row and K.M_COVERAGE_HIGH in row for row in rows), rows  # the collapse events' input
