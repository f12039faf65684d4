"""``python -m rlec.experiments e3 --quick`` end to end through the launcher (verl's trainer on CPU).

One module-scoped run, shared by every assertion: each arm trained with the setting it
names (read back from the per-step metrics verl logged), the result file has every figure, the PNG
exists, and a rerun reuses every finished arm-seed without launching again.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from rlec.experiments import cli, keys as K

pytestmark = [pytest.mark.slow, pytest.mark.minutes(6)]  # tests/conftest.py: the longest modules start first


def _launches(out: Path) -> int:
    return len(list(out.glob("*/seed0/**/launches/*")))


@pytest.fixture(scope="module")
def e3_out(quick) -> Path:  # 2 launches of 3 steps: ~6 min on 2 cores
    return quick("e3", "grpo,scheduler")


def test_e3_arm_moves_the_temperature_and_grpo_has_none(e3_out: Path, arm_metrics) -> None:
    sched = [row[K.M_TEMPERATURE] for row in arm_metrics(e3_out, "scheduler")]
    assert len(sched) == cli.load("e3").quick_steps
    assert sched[0] == 1.0 and len(set(sched)) > 1, sched  # T_0, then the scheduler's update from the step-1 target
    assert not any(K.M_TEMPERATURE in row for row in arm_metrics(e3_out, "grpo"))  # fixed T: E3 not composed
    assert all(K.M_ENTROPY in row for row in arm_metrics(e3_out, "grpo"))


def test_e3_result_file_has_every_figure_for_every_arm(e3_out: Path) -> None:
    result = json.loads((e3_out / "results.json").read_text())
    exp = cli.load("e3")
    assert result["quick"] is True and set(result["arms"]) == {"grpo", "scheduler"}
    assert result["figures"] == [c.name for c in exp.curves] + [f"held-out {n}" for n in exp.heldout.figures]
    for arm in result["arms"].values():
        assert set(arm["curves"]) == {c.name for c in exp.curves}
        for name in exp.heldout.figures:
            point, lo, hi = arm["table"][f"held-out {name}"]
            assert 0.0 <= point <= 1.0 and lo is None and hi is None  # one seed: a mean, no t-interval
        assert arm["raw"]["seed0"]["heldout"].keys() == exp.heldout.figures.keys()
    assert [c["verdict"] for c in result["comparisons"]] == [None, None]  # --quick: the wiring, no verdict
    assert (e3_out / "e3.png").stat().st_size > 10_000 and (e3_out / "table.md").is_file()


def test_e3_rerun_reuses_every_finished_arm_seed(e3_out: Path) -> None:
    before = _launches(e3_out)
    assert before == 2
    assert cli.main(["e3", "--quick", "--seeds", "1", "--arms", "grpo,scheduler", "--out", str(e3_out)]) == 0
    assert _launches(e3_out) == before


def test_e3_logs_the_probe_entropy_at_the_first_and_last_step_and_the_clip_figures_every_step(e3_out: Path, arm_metrics) -> None:
    """The probe hook (rlec.verl_plugin.probe) inside verl's trainer: ``rlec/probe/entropy`` at steps 1 and 3 of 3 (every
    20 steps, the first and the last), within (0, ln V] of the compact vocabulary; verl's clip figures at every step."""
    exp = cli.load("e3")
    vocab = json.loads((e3_out / "shared" / "warm_start" / "config.json").read_text())["vocab_size"]
    for arm in ("grpo", "scheduler"):
        rows = arm_metrics(e3_out, arm)
        assert [r["step"] for r in rows if exp.probe.metric in r] == [1, exp.quick_steps]
        assert all(0 < r[exp.probe.metric] <= math.log(vocab) for r in rows if exp.probe.metric in r)
        assert all(r["rlec/probe/response_length"] >= 1 for r in rows if exp.probe.metric in r)
        for key in (K.M_CLIPFRAC, K.M_CLIPFRAC_LOWER, K.M_PPO_KL):
            assert all(key in r for r in rows), (arm, key)
