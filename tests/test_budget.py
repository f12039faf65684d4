"""The test budget of tests/conftest.py (README "Test budget", issue 36).

A test not marked `slow` whose children use more than --child-cpu-budget CPU-seconds is listed at
the end of the run and still passes (CPU time grows with machine load, so a verdict on it would
depend on the machine); only above --child-cpu-limit, far above what load can do to a fast test,
or when it starts Ray, does it fail. A `slow` test is never checked.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

CHILD = '''
import subprocess, sys
import pytest

BUSY = "import time\\nt = time.process_time()\\nwhile time.process_time() - t < 0.3:\\n    pass"

def test_unmarked():
    subprocess.run([sys.executable, "-c", BUSY], check=True)

@pytest.mark.slow
def test_marked():
    subprocess.run([sys.executable, "-c", BUSY], check=True)

def test_no_child():
    pass
'''


@pytest.fixture
def child_suite(pytester):
    pytester.makeconftest((Path(__file__).with_name("conftest.py")).read_text())
    pytester.makepyfile(test_child=CHILD)
    pytester.makeini("[pytest]\nmarkers =\n    slow: end-to-end\n    gpu: needs a GPU\n")
    return pytester


def test_a_child_over_the_budget_is_reported_and_passes(child_suite) -> None:
    """The default verdict cannot depend on load: over the budget is a line in the report, not a failure."""
    result = child_suite.runpytest_inprocess("--child-cpu-budget=0.2", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(["*tests not marked slow whose children used over 0.2 CPU-s*",
                                 "*CPU-s in children*test_child.py::test_unmarked"])
    report = result.stdout.str().split("whose children used over", 1)[1]
    assert "test_marked" not in report and "test_no_child" not in report


def test_the_default_fail_limit_is_far_above_the_budget() -> None:
    """The fail limit keeps its stated margin: over 10x the worst child-CPU figure measured under load 27 (10.1)."""
    spec = importlib.util.spec_from_file_location("_rlec_conftest", Path(__file__).with_name("conftest.py"))
    conftest = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(conftest)
    assert conftest.CHILD_CPU_FAIL_S >= 10 * 10.1
    assert conftest.CHILD_CPU_FAIL_S > 20 * conftest.CHILD_CPU_BUDGET_S


def test_a_child_over_the_fail_limit_fails_only_an_unmarked_test(child_suite) -> None:
    result = child_suite.runpytest_inprocess("--child-cpu-limit=0.2", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=3, errors=1)
    result.stdout.fnmatch_lines(["*ERROR at teardown of test_unmarked*", "*test budget: its child processes used * CPU-s (limit 0.2*"])
    assert "test_marked" not in "\n".join(line for line in result.outlines if "ERROR" in line)
    off = child_suite.runpytest_inprocess("--child-cpu-limit=0", "-p", "no:cacheprovider")
    off.assert_outcomes(passed=3)


def test_the_longest_modules_are_collected_first_each_kept_whole(pytester) -> None:
    """`make test` hands files to its xdist workers in collection order (--no-loadscope-reorder): a module marked
    ``minutes(m)`` comes before every shorter one, its tests together and in order; unmarked ones keep their order."""
    pytester.makeconftest((Path(__file__).with_name("conftest.py")).read_text())
    pytester.makeini("[pytest]\nmarkers =\n    slow: end-to-end\n    gpu: needs a GPU\n    minutes(m): minutes\n")
    pytester.makepyfile(
        test_a="def test_a1():\n    pass\n\ndef test_a2():\n    pass\n",
        test_b="import pytest\n\npytestmark = pytest.mark.minutes(2)\n\ndef test_b1():\n    pass\n\ndef test_b2():\n    pass\n",
        test_c="import pytest\n\ndef test_c1():\n    pass\n\n@pytest.mark.minutes(9)\ndef test_c2():\n    pass\n",
        test_d="def test_d1():\n    pass\n")
    result = pytester.runpytest_inprocess("--collect-only", "-q", "-p", "no:cacheprovider")
    order = [line.split("::")[1] for line in result.outlines if "::" in line]
    assert order == ["test_c1", "test_c2", "test_b1", "test_b2", "test_a1", "test_a2", "test_d1"]


def _conftest():
    spec = importlib.util.spec_from_file_location("_rlec_conftest", Path(__file__).with_name("conftest.py"))
    conftest = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(conftest)
    return conftest


def test_a_launch_slot_held_elsewhere_makes_the_next_launch_wait(tmp_path) -> None:
    """Issue 55 item 5: with one slot held by another process, a second launch waits (here: times out) instead of
    starting a fourth verl launch on a box without the memory; once the holder exits, the slot is free at once."""
    import subprocess
    import sys

    conftest = _conftest()
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; from rlec.io import FileLock; "
        f"lock = FileLock({str(tmp_path / 'slot0.lock')!r}).acquire(); print('held', flush=True); time.sleep(60)")],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(TimeoutError, match="no free launch slot of 1"):
            conftest.acquire_launch_slot(1, tmp_path, poll_s=0.05, timeout_s=0.3)
        second = conftest.acquire_launch_slot(2, tmp_path, poll_s=0.05, timeout_s=0.3)  # a second slot is free
        assert second.path.name == "slot1.lock"
        second.release()
    finally:
        holder.kill()
        holder.wait()
    lock = conftest.acquire_launch_slot(1, tmp_path, poll_s=0.05, timeout_s=5)
    assert lock.path.name == "slot0.lock"
    lock.release()


def test_launch_slots_follow_memory_and_refuse_a_bad_setting(monkeypatch) -> None:
    """One slot per LAUNCH_SLOT_GIB of memory (at least one); RLEC_TEST_LAUNCH_SLOTS overrides; a bad value is named."""
    conftest = _conftest()
    monkeypatch.delenv("RLEC_TEST_LAUNCH_SLOTS", raising=False)
    total_gib = __import__("os").sysconf("SC_PAGE_SIZE") * __import__("os").sysconf("SC_PHYS_PAGES") / 2**30
    assert conftest.launch_slots() == max(1, int(total_gib // conftest.LAUNCH_SLOT_GIB))
    monkeypatch.setenv("RLEC_TEST_LAUNCH_SLOTS", "0")
    assert conftest.launch_slots() == 0
    monkeypatch.setenv("RLEC_TEST_LAUNCH_SLOTS", "two")
    with pytest.raises(pytest.UsageError, match="RLEC_TEST_LAUNCH_SLOTS='two'"):
        conftest.launch_slots()


def test_a_minutes_module_runs_holding_a_slot(pytester, tmp_path, monkeypatch) -> None:
    """The hook is wired: inside a test of a module marked `minutes` the slot file names this process."""
    monkeypatch.setenv("RLEC_TEST_LAUNCH_SLOTS", "1")
    monkeypatch.setenv("RLEC_TEST_LAUNCH_SLOT_DIR", str(tmp_path / "slots"))
    pytester.makeconftest((Path(__file__).with_name("conftest.py")).read_text())
    pytester.makeini("[pytest]\nmarkers =\n    slow: end-to-end\n    gpu: needs a GPU\n    minutes(m): module minutes\n")
    pytester.makepyfile(test_launch=f'''
import json, os
from pathlib import Path
import pytest
pytestmark = pytest.mark.minutes(1)
def test_holds():
    holder = json.loads(Path({str(tmp_path / "slots" / "slot0.lock")!r}).read_text())
    assert holder["pid"] == os.getpid()
''')
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    assert not (tmp_path / "slots" / "slot0.lock").exists()  # released (the file is deleted on release)
