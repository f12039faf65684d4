"""``python -m rlec.experiments rlve --quick --arms low_static`` end to end (verl's trainer on CPU): the static
arm's difficulty never moves, and the result file has the held-out accuracy at every difficulty."""

from __future__ import annotations

import json

import pytest

from rlec.experiments import keys as K
from rlec.experiments.core import ENVIRONMENTS

pytestmark = [pytest.mark.slow, pytest.mark.minutes(3)]  # tests/conftest.py: the longest modules start first


def test_rlve_static_arm_never_changes_its_difficulty(quick, arm_metrics) -> None:
    out = quick("rlve", "low_static")  # one launch of 2 steps: ~3 min
    key = K.rlve_difficulty_metric(ENVIRONMENTS[0])
    assert [row[key] for row in arm_metrics(out, "low_static")] == [0.0, 0.0]
    result = json.loads((out / "results.json").read_text())
    assert set(result["arms"]["low_static"]["table"]) >= {f"held-out accuracy d={d}" for d in range(4)}
