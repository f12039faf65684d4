"""``python -m rlec.experiments e3_budget --quick --arms dynamic`` end to end (verl's trainer on CPU): every prompt
gets ``rollout.n`` while unseen (step 1), then per-prompt n spread by difficulty at the same total once the 4
training rows come back (steps 2-3); the temperature stays at T_0 (the scheduler off); the result file has the arm's figures.
The ``fixed_n`` arm differs by the budget's switch alone (``rlec/experiments/e3_budget.py``)."""

from __future__ import annotations

import json

import pytest

from rlec.experiments import cli, keys as K

pytestmark = [pytest.mark.slow, pytest.mark.minutes(3)]  # tests/conftest.py: the longest modules start first


def test_the_dynamic_budget_spreads_n_once_prompts_come_back_at_the_same_total(quick, arm_metrics) -> None:
    out = quick("e3_budget", "dynamic")  # one launch of 3 steps
    rows = arm_metrics(out, "dynamic")
    assert len(rows) == cli.load("e3_budget").quick_steps
    assert rows[0][K.M_ROLLOUT_N_MAX] == rows[0][K.M_ROLLOUT_N_MIN] == 8  # step 1: every prompt unseen, n = rollout.n
    assert any(row[K.M_ROLLOUT_N_MAX] > 8 > row[K.M_ROLLOUT_N_MIN] for row in rows[1:]), rows  # by rank once seen
    assert all(row["e3/rollout_n/mean"] == pytest.approx(8.0) for row in rows)  # the same total rollouts
    assert all(row[K.M_TEMPERATURE] == 1.0 for row in rows)  # E3 logs its T; only its budget is on: T stays T_0
    arm = json.loads((out / "results.json").read_text())["arms"]["dynamic"]
    assert set(arm["curves"]) == {c.name for c in cli.load("e3_budget").curves}
    assert len(arm["curves"]["all_wrong_share"]["mean"]) == len(rows)
