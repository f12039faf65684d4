"""One slow environment never stalls a step: the prompt source submits the next rows' problems to
the RLVE-Gym pool together, and the rows are those of the one-row-at-a-time path.

The environments here are stand-ins run in a real :class:`~rlec.environments.gym_pool.GymPool`
(``gym_fakes.generate_task`` in spawned workers, 2 attempts, a 2 s limit: 40 x the stand-ins' 50 ms,
so only the hangs time out, on a loaded box too): ``slow_gym:Slow`` takes 50 ms per problem,
``slow_gym:Hang`` hangs or raises for some seeds (``gym_fakes.behaviour``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rlec.environments import ENVIRONMENTS, EnvironmentSource
from rlec.environments.gym_pool import GymPool
from rlec.environments.rlve_gym import GymEnvironment

ROWS = 12
SETTINGS = {"environments": ["sorting", "slow_gym:Slow", "slow_gym:Hang"], "seed": 23, "lookahead": ROWS,
            "samples_per_prompt": 1, "min_samples_factor": 1}


class FakeGym(GymEnvironment):
    """A GymEnvironment whose pool runs ``gym_fakes.generate_task`` (no level table: cap 3)."""

    def __init__(self, identifier: str, pool: GymPool) -> None:  # no RLVE-Gym identifier to check
        self.identifier, self._pool = identifier, pool
        self.name = "slow_gym:" + identifier  # type: ignore[misc]
        self.max_difficulty = 3  # type: ignore[misc]

    def cap(self, max_prompt_tokens: int | None) -> int | None:
        return self.max_difficulty


@pytest.fixture
def fake_pools(monkeypatch: pytest.MonkeyPatch):
    """``make()``: a fresh pool with the stand-in environments registered on it."""
    monkeypatch.syspath_prepend(str(Path(__file__).parent))  # spawned workers inherit sys.path
    import gym_fakes

    pools: list[GymPool] = []

    def make() -> GymPool:
        pool = GymPool(max_workers=2, timeout_s=2.0, attempts=2, generate_task=gym_fakes.generate_task, initializer=None,
                       slow_factor=1.0)  # a hang's next-seed retry at once (the same-seed rerun: test_same_seed_...)
        pools.append(pool)
        for identifier in ("Slow", "Hang"):
            monkeypatch.setitem(ENVIRONMENTS, f"slow_gym:{identifier}", FakeGym(identifier, pool))
        return pool

    yield make
    for pool in pools:
        pool.close()


def _gym_counts(pool: GymPool) -> dict[str, Any]:
    return {k: v for k, v in pool.metrics().items() if v}


def test_rows_generated_ahead_equal_the_sequential_rows_with_the_same_counts(fake_pools):
    import gym_fakes

    sequential_pool = fake_pools()
    sequential = EnvironmentSource(SETTINGS)
    expected = [sequential.row(i) for i in range(ROWS)]  # one problem at a time, nothing submitted ahead
    expected_counts, expected_skipped = _gym_counts(sequential_pool), dict(sequential.skipped)

    pool = fake_pools()
    ahead = EnvironmentSource(SETTINGS)
    rows = [ahead.next_row()]  # one step's rows: the first problems of all of them submitted at row 0
    first_draws = [ahead._draw(ahead._rng(k)) for k in range(1, ROWS)]
    assert ahead.pending == sum(name.startswith("slow_gym:") for name, _, _ in first_draws) > 3
    rows += [ahead.next_row() for _ in range(ROWS - 1)]
    assert rows == expected and ahead.pending == 0
    assert _gym_counts(pool) == expected_counts and ahead.skipped == expected_skipped

    # seed 23 covers every case: generated, hung once then retried, raised once then retried, skipped
    seen = {gym_fakes.behaviour("Hang", r["extra_info"]["env_seed"], 0) for r in rows
            if r["extra_info"]["environment"] == "slow_gym:Hang"}
    assert seen >= {"ok", "hang", "fail"}, seen
    counts = pool.metrics()
    assert counts["rlve_gym/Hang/skipped"] >= 1 and counts["rlve_gym/Hang/gen_failures"] >= 1
    assert counts["rlve_gym/Hang/gen_timeouts"] >= 1 + 2 * counts["rlve_gym/Hang/skipped"]
    assert counts["rlve_gym/Hang/retries"] == counts["rlve_gym/Hang/gen_timeouts"] + counts["rlve_gym/Hang/gen_failures"] \
        - counts["rlve_gym/Hang/skipped"]
    assert counts["rlve_gym/Slow/generated"] == sum(r["extra_info"]["environment"] == "slow_gym:Slow" for r in rows)
    assert ahead.skipped == {"slow_gym:Hang": counts["rlve_gym/Hang/skipped"]}
    metrics = ahead.update([{"environment": "slow_gym:Slow", "difficulty": 0, "correct": 1}])
    assert metrics["rlve/gym/Hang/gen_timeouts"] == counts["rlve_gym/Hang/gen_timeouts"]  # logged with the step

    # h of Slow rose: the rows planned at the old h are planned again, and still equal the sequential ones
    assert metrics["rlve/slow_gym:Slow/difficulty"] == 1.0
    sequential.load_state_dict(ahead.state_dict())
    assert [ahead.next_row() for _ in range(4)] == [sequential.row(i) for i in range(ROWS, ROWS + 4)]


def test_same_seed_rerun_gives_a_busy_machine_the_rows_of_a_quiet_one(monkeypatch):
    """Issue 34 item 6: a problem slowed past the limit (a loaded machine) is rerun with the same Gym seed under
    slow_factor x the limit before the next seed is tried, so the seeded rows are those of a quiet machine; with
    no rerun (slow_factor=1, the old behaviour) the busy machine trains on another problem."""
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    import gym_fakes

    def pool(timeout_s: float, slow_factor: float) -> GymPool:
        return GymPool(max_workers=1, timeout_s=timeout_s, attempts=2, generate_task=gym_fakes.generate_task,
                       initializer=None, slow_factor=slow_factor)

    quiet, busy, old = pool(30.0, 1.0), pool(gym_fakes.BUSY_S / 2, 60.0), pool(gym_fakes.BUSY_S / 2, 1.0)
    try:
        jobs = [("Busy", seed, 1) for seed in (3, 4)]
        calm = quiet.generate_many(jobs)
        loaded = busy.generate_many(jobs)
        assert [r["prompt"] for r in loaded] == [r["prompt"] for r in calm] and {r["attempt"] for r in loaded} == {0}
        m = busy.metrics()
        assert (m["rlve_gym/Busy/gen_timeouts"], m["rlve_gym/Busy/slow_retries"], m["rlve_gym/Busy/retries"]) == (2, 2, 0)
        assert quiet.metrics()["rlve_gym/Busy/gen_timeouts"] == 0
        assert [r["attempt"] for r in old.generate_many(jobs)] == [1, 1]  # without the rerun: the next seed's problem
    finally:
        for p in (quiet, busy, old):
            p.close()
