"""A stand-in for the pool's item function that holds its first item until the test kills its worker.

Imported by the spawned pool workers (the test puts this folder on ``sys.path`` before the pool
starts): the first call writes its worker's pid to the file named by ``RLEC_TEST_HOLD_MARKER`` and
sleeps; every later call (the retry, in a fresh worker) runs the real check.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from rlec.grading.math import _timed_check

MARKER_ENV = "RLEC_TEST_HOLD_MARKER"


def held_check(gold: str, pred: str) -> tuple[bool, float]:
    marker = Path(os.environ[MARKER_ENV])
    try:
        with marker.open("x") as f:  # only the first call anywhere wins the file
            f.write(str(os.getpid()))
    except FileExistsError:
        return _timed_check(gold, pred)
    time.sleep(600)  # held: the test kills this worker now
    return _timed_check(gold, pred)
