"""``python -m rlec.experiments rlec --quick --arms b1`` end to end (verl's trainer on CPU): the fixed-b arm's reward
uses b = 1 at every step, where RLEC's schedule starts at b = 0 (make run's step 1), and the result file has the
held-out coverage at both targets, their gap, and the seed-spread figures. The other arms differ by settings the
verl-path tests train with (the schedule: tests/tools/test_verl_cpu_run.py; the std-normalised advantage:
tests/verl_plugin/test_advantage.py)."""

from __future__ import annotations

import json

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.minutes(3)]  # tests/conftest.py: the longest modules start first


def test_the_fixed_b_arm_trains_with_b_1_from_its_first_step(quick, arm_metrics) -> None:
    out = quick("rlec", "b1")  # one launch of 2 steps
    rows = arm_metrics(out, "b1")
    assert [row["rlec/b"] for row in rows] == [1.0, 1.0], rows
    table = json.loads((out / "results.json").read_text())["arms"]["b1"]["table"]
    assert {"held-out coverage p=0.1", "held-out coverage p=0.8", "held-out coverage gap"} <= set(table), sorted(table)
