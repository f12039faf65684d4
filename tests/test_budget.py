"""The test budget check of tests/conftest.py (README "Test budget"): a test not marked `slow` whose
child processes use more than --child-cpu-limit CPU-seconds fails at teardown; a `slow` one passes."""

from __future__ import annotations

from pathlib import Path

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


def test_a_child_over_the_cpu_limit_fails_only_an_unmarked_test(pytester) -> None:
    pytester.makeconftest((Path(__file__).with_name("conftest.py")).read_text())
    pytester.makepyfile(test_child=CHILD)
    pytester.makeini("[pytest]\nmarkers =\n    slow: end-to-end\n    gpu: needs a GPU\n")
    result = pytester.runpytest_inprocess("--child-cpu-limit=0.2", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=3, errors=1)
    result.stdout.fnmatch_lines(["*ERROR at teardown of test_unmarked*", "*test budget: its child processes used * CPU-s (limit 0.2*"])
    assert "test_marked" not in "\n".join(line for line in result.outlines if "ERROR" in line)
    off = pytester.runpytest_inprocess("--child-cpu-limit=0", "-p", "no:cacheprovider")
    off.assert_outcomes(passed=3)
