"""Deliberately slow, hanging and failing stand-ins for RLVE-Gym's worker-side generator.

Imported by name in the :class:`rlec.environments.gym_pool.GymPool` workers of
``tests/environments/test_gym_lookahead.py`` (the test puts this folder on ``sys.path``, which
spawned workers inherit). What a problem does is a pure function of (identifier, seed, attempt),
so runs with and without look-ahead meet the same timeouts and failures.
"""

from __future__ import annotations

import time
from typing import Any

HANG_S = 3600.0  # far past any test's limit: the pool kills the worker
BUSY_S = 0.6  # "Busy": every first attempt takes this long


def behaviour(name: str, seed: int, attempt: int) -> str:
    """``"ok"``, ``"hang"`` or ``"fail"`` for attempt ``attempt`` of problem (name, seed)."""
    if name != "Hang":
        return "ok"
    kind = (seed // 2) % 4
    if kind == 0:
        return "hang"  # every attempt: the problem is skipped
    if kind == 1 and attempt == 0:
        return "hang"  # the retry (next Gym seed) generates
    if kind == 2 and attempt == 0:
        return "fail"
    return "ok"


def generate_task(name: str, seed: int, difficulty: int, attempt: int) -> dict[str, Any]:
    """:func:`rlec.environments.gym_worker.generate_task`'s dict for a trivial problem, after the behaviour above."""
    what = behaviour(name, seed, attempt)
    if what == "hang":
        time.sleep(HANG_S)
    if what == "fail":
        raise ValueError(f"{name}: generation failed on purpose")
    if name == "Slow":
        time.sleep(0.05)
    if name == "Busy" and attempt == 0:
        time.sleep(BUSY_S)  # a problem slowed past a short limit, as on a loaded machine
    value = (seed + 7 * difficulty + attempt) % 1000
    return {"prompt": f"{name}: what is {value} + {difficulty}?", "answer": str(value + difficulty), "index": 0,
            "gym_seed": seed + attempt, "attempt": attempt, "threshold": 1.0, "config": None, "seconds": 0.0}
