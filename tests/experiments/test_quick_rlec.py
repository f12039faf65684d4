"""``python -m rlec.experiments rlec_schedule --quick --arms b1`` end to end (verl's trainer on CPU): the fixed-b arm's reward
uses b = 1 at every step, where RLEC's schedule starts at b = 0 (make run's step 1), and the result file has the
held-out coverage at both targets and their gap, and the training coverage per target the collapse events are read
from. The other arms differ by settings the verl-path tests train with (the schedule: tests/tools/test_verl_cpu_run.py;
the std-normalised advantage of ``rlec_advantage``: tests/verl_plugin/test_advantage.py). The arm-seed, launched again
alone with a Ray cluster of its own, logs the same metrics as in the experiment's shared cluster (issue 54 item 2)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

pytestmark = [pytest.mark.slow, pytest.mark.minutes(5)]  # tests/conftest.py: the longest modules start first


# what differs between two launches of the same computation: wall times, throughput, memory
_NOT_COMPUTED = ("timing_s/", "timing_per_token_ms/", "perf/", "actor/perf/")


@pytest.fixture(scope="module")
def b1_out(quick) -> Path:
    return quick("rlec_schedule", "b1")  # one launch of 2 steps, in the experiment's shared Ray cluster


def test_the_fixed_b_arm_trains_with_b_1_from_its_first_step(b1_out, arm_metrics) -> None:
    out = b1_out
    rows = arm_metrics(out, "b1")
    assert [row["rlec/b"] for row in rows] == [1.0, 1.0], rows
    table = json.loads((out / "results.json").read_text())["arms"]["b1"]["table"]
    assert {"held-out coverage p=0.1", "held-out coverage p=0.8", "held-out coverage gap"} <= set(table), sorted(table)
    from rlec.experiments import keys as K

    assert all(K.M_COVERAGE_LOW in row and K.M_COVERAGE_HIGH in row for row in rows), rows  # the collapse events' input


def test_an_arm_seed_in_the_shared_ray_cluster_logs_what_its_own_launch_logs(b1_out, arm_metrics, tmp_path) -> None:
    """Issue 54 item 2: the experiment's launches share one Ray cluster (rlec.cluster.ray_cluster); the same arm-seed
    launched alone, with a cluster of its own, logs the same value of every computed metric at every step, exactly
    (the CPU run is deterministic: the seeded data order, per-request rollout seeds, fp32 on one process), all but
    wall times, throughput and memory."""
    from rlec.demo.verl_run import launch, read_metrics
    from rlec.experiments import cli, core

    exp = cli.load("rlec_schedule").quick(cli.QUICK_BATCH)
    arm = exp.arm("b1")
    ((overrides, steps),) = arm.stages(exp.quick_steps)
    shared = core.prepare_shared(b1_out, exp)  # the experiment's warm start and data, reused
    alone = tmp_path / "alone"
    launch(alone, [*(f"{k}={v}" for k, v in exp.settings.items()), *core.stage_overrides(arm, 0, overrides)],
           model=shared["model"], train=shared["train"], test=shared["test"], steps=steps, seed=0, ray_address=None)

    def computed(rows: list[dict]) -> list[dict]:
        return [{k: v for k, v in row.items() if not k.startswith(_NOT_COMPUTED)} for row in rows]

    in_shared, by_itself = computed(arm_metrics(b1_out, "b1")), computed(read_metrics(alone))
    assert len(by_itself) == len(in_shared) == steps and len(by_itself[0]) > 50, by_itself
    def same(a: object, b: object) -> bool:
        return a == b or (a != a and b != b)  # NaN logged by both: the same

    differ = [(row["step"], k, row.get(k), other.get(k)) for row, other in zip(in_shared, by_itself)
              for k in sorted(set(row) | set(other)) if not same(row.get(k), other.get(k))]
    assert differ == []
    # the experiment's launch connected to its cluster (no resources of its own declared); the lone one started its own
    declared = [yaml.safe_load(next(folder.glob("launches/*/config.yaml")).read_text())["ray_kwargs"]["ray_init"]["num_cpus"]
                for folder in (b1_out / "b1" / "seed0", alone)]
    assert declared == [None, 8], declared
