"""Fixtures of the grading tests: one warm math-verify pool, and a guard against hidden grader bugs.

Grading never raises on a sample: a bug in rlec's grading code becomes an INCORRECT outcome with
``grader_error`` "internal: ..." (rlec.grading.errors). So that such a bug cannot hide behind that
rule, every grading test fails if an internal grader error was recorded while it ran, unless it
asks for the ``internal_errors_expected`` fixture.
"""

from __future__ import annotations

import pytest

from rlec.grading.errors import error_counts
from rlec.grading.math import MathVerifyPool

TIMEOUT_S = 5.0  # the default: a shorter limit times out warm equations when the 2-core box is loaded


@pytest.fixture(scope="session")
def pool():
    """A warm pool of 2 workers with the default 5 s per-item limit, shared by the grading tests."""
    p = MathVerifyPool(max_workers=2, timeout_s=TIMEOUT_S)
    yield p
    p.close()


@pytest.fixture
def internal_errors_expected():
    """Marks a test that provokes internal grader errors on purpose."""
    yield


@pytest.fixture(autouse=True)
def _no_internal_grader_errors(request):
    before = error_counts()["internal"]
    yield
    if "internal_errors_expected" not in request.fixturenames:
        assert error_counts()["internal"] == before, "rlec's grading code raised; it was graded as a grader_error (see the log)"
