"""The math conventions on both paths (fast path and math-verify), and the warm, killable pool."""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path

import psutil
import pytest

from rlec.grading.math import WARMUP_PAIRS, MathVerifyPool
from rlec.grading.math_forms import fast_verdict, math_verify_inputs, normalize_math, split_percent

# (gold, pred, verdict): each convention of rlec.grading.math_forms, both ways
CONVENTIONS = [
    # thousands vs lists: a spaced comma separates items; a two-element list is not one number
    ("1100", "1, 100", False),
    ("1, 100", "1100", False),
    ("3125", "3, 125", False),
    ("35", "3, 5", False),
    ("12,345", "12345", True),
    ("12345", "12,345", True),
    ("1000", "1{,}000", True),
    ("1000", "1,\\!000", True),
    ("1,100", "1, 100", False),
    ("2, 5", "5, 2", True),  # the same two items (math-verify decides)
    # percent: the sign is a unit; a percent gold also accepts the fraction
    ("50", "50\\%", True),
    ("0.5", "50\\%", False),
    ("0.5", "0.5\\%", True),
    ("0.005", "0.5\\%", False),
    ("35\\%", "35", True),
    ("35\\%", "0.35", True),
    ("35\\%", "35\\%", True),
    ("35\\%", "\\frac{7}{20}", True),
    ("35\\%", "0.35\\%", False),
    ("35", "35 \\text{ percent}", True),
    # an equation for a non-equation gold: an assignment by its right side, else every side
    ("7", "42 = 7", False),
    ("7", "7 = 42", False),
    ("7", "x = 7", True),
    ("7", "x_1 = 7", True),
    ("7", "\\theta = 7", True),
    ("7", "2 + 5 = 7", True),
    ("x = 2", "2", True),
    ("x = 2", "3", False),
    ("2x+1", "f(x) = 2x+1", True),
    # intervals and one-variable inequalities: the same set is the same answer, in either role
    ("(-\\infty, 3)", "x<3", True),
    ("[2, \\infty)", "x \\ge 2", True),
    ("x<3", "(-\\infty, 3)", True),
    ("(1, 3]", "1 < x \\le 3", True),
    ("(-\\infty, 3)", "x \\le 3", False),
    ("[2, \\infty)", "x > 2", False),
    # plain forms
    ("0.5", "\\frac{1}{2}", True),
    ("\\frac{3}{4}", "6/8", True),
    ("-\\frac{1}{2}", "-0.5", True),
    ("12", "12.", True),
    ("(1,2)", "\\left( 1, 2 \\right)", True),
    ("3", "-3", False),
    ("\\frac{1}{2}", "\\frac{1}{3}", False),
    ("(1,2)", "(2,1)", False),
    # radicals and tuples of plain values: decided exactly on the fast path too
    ("2\\sqrt{3}", "\\sqrt{12}", True),
    ("3\\sqrt{5}", "\\sqrt{45}", True),
    ("2\\sqrt{3}", "\\sqrt{6}", False),
    ("-2\\sqrt{2}", "2\\sqrt{2}", False),
    ("4", "\\sqrt{16}", True),
    ("\\frac{\\sqrt{3}}{2}", "\\frac{\\sqrt{12}}{4}", True),
    ("(1,2)", "(1.0, 2)", True),
    ("(-3,4)", "\\left(-3, 4\\right)", True),
    ("(2\\sqrt{2}, 1)", "(\\sqrt{8}, 1)", True),
    ("(1,2)", "(1,2,3)", False),
    # issue 26, grading kinds (values of our own)
    # scientific notation: e/E after a decimal number is a power of ten, on both paths; 2e is Euler's e
    ("1200", "1.2e3", True),
    ("1200", "1.2E3", True),
    ("1200", "12e2", True),
    ("0.005", "5e-3", True),
    ("1.2e3", "1200", True),
    ("1200", "1.2 \\times 10^{3}", True),
    ("x = 1500", "x = 1.5e3", True),
    ("1200", "1.3e3", False),
    ("6", "2e3", False),
    # exact values compare exactly: no numeric tolerance between two exact rationals
    ("\\frac{1}{3^{59}}", "\\frac{1}{3^{60}}", False),
    ("\\frac{1}{3^{60}}", "\\frac{1}{3^{59}}", False),
    ("\\frac{1}{3^{60}}", "3^{-60}", True),
    ("\\frac{1}{2^{70}}", "\\frac{1}{2^{71}} \\cdot 2", True),
    ("9", "3^{2}", True),
    # a malformed command does not leave its numeric prefix as the answer
    ("5", "5\\sqrt(3)", False),
    ("7", "7\\foo{3}", False),
    ("3", "3\\log(2", False),
    ("5", "5 \\times 1", True),  # a real product that equals the number is still right
    ("5", "5 \\text{ cm}", True),  # a unit after the number is not a malformed command
    # the imaginary unit: i is read as a variable (math-verify's reading); an answer states its value
    ("-1", "i^2", False),
    ("i^2", "-1", False),
]


@pytest.mark.parametrize(("gold", "pred", "want"), CONVENTIONS)
def test_fast_path_never_contradicts_the_convention(gold: str, pred: str, want: bool) -> None:
    assert fast_verdict(gold, pred) in (want, None)


def test_math_verify_path_follows_the_same_conventions(pool) -> None:
    got = pool.verify_many((g, p) for g, p, _ in CONVENTIONS)
    wrong = [(g, p, want, r) for (g, p, want), r in zip(CONVENTIONS, got) if r.equal is not want or r.error]
    assert not wrong


@pytest.mark.parametrize(
    ("gold", "pred", "want"),
    [
        ("1100", "1, 100", False),
        ("12,345", "12345", True),
        ("35\\%", "0.35", True),
        ("0.005", "0.5\\%", False),
        ("7", "42 = 7", False),
        ("7", "x = 7", True),
        ("35", "3, 5", False),
        ("5", "", False),  # an empty box answers nothing
        # math-verify decides these
        ("2, 5", "5, 2", None),
        ("0.5", "0,5", None),  # may be a decimal comma
        ("7", "2+5 = 7", None),
        ("2\\sqrt{3}", "\\sqrt{12}", True),
        ("(1,2)", "(2,1)", False),
        ("(1,2)", "[1,2]", None),  # a tuple or an interval: math-verify decides
        ("(1,000)", "(1000)", None),  # a thousands separator or a list
        ("\\sqrt{2}", "\\sqrt{-2}", None),
        ("3", "\\frac{3}{0}", None),
        ("x=2", "y=2", None),
    ],
)
def test_fast_verdict_decides_the_plain_cases(gold: str, pred: str, want: bool | None) -> None:
    assert fast_verdict(gold, pred) is want


def test_normalize_math_keeps_thousands_and_list_commas_apart() -> None:
    assert normalize_math("$\\dfrac{1}{2}$.") == "\\frac{1}{2}"
    assert normalize_math("\\left( 1,\\, 2 \\right)") == "(1,2)"
    assert normalize_math("1,100") == "1{,}100"
    assert normalize_math("1, 100") == "1,100"
    assert normalize_math("x \\rightarrow 2") == "x\\rightarrow2"  # \\right is only removed as a word


@pytest.mark.parametrize(
    ("answer", "want"),
    [("35\\%", ("35", True)), ("35 \\%", ("35", True)), ("35\\,\\%", ("35", True)), ("35\\text{\\%}", ("35", True)),
     ("35 \\text{ percent}", ("35", True)), ("35", ("35", False)), ("\\%", ("\\%", False)), ("50\\% of x", ("50\\% of x", False))],
)
def test_split_percent(answer: str, want: tuple[str, bool]) -> None:
    assert split_percent(answer) == want


def test_math_verify_inputs_offer_the_fraction_of_a_percent_gold() -> None:
    assert math_verify_inputs("35\\%", "0.35") == (("35", "\\frac{35}{100}"), "0.35")
    assert math_verify_inputs("35\\%", "35\\%") == (("35",), "35")
    assert math_verify_inputs("$0.5$", "0.5\\%") == (("0.5",), "0.5")


def test_warmup_pairs_have_their_verdicts(pool) -> None:
    # the warm-up also pins math-verify's behaviour on each slow-to-start form: an upgrade that
    # changes a verdict shows here
    got = pool.verify_many((g, p) for g, p, _ in WARMUP_PAIRS)
    assert [r.equal for r in got] == [want for _, _, want in WARMUP_PAIRS]


def test_pool_rejects_bad_timeout() -> None:
    with pytest.raises(ValueError, match="timeout_s"):
        MathVerifyPool(timeout_s=0)


def test_pool_verify_many_in_order(pool) -> None:
    res = pool.verify_many([("2\\sqrt{3}", "\\sqrt{12}"), ("(1,2)", "(2,1)"), ("35", "3, 5")])
    assert [r.equal for r in res] == [True, False, False]
    assert not any(r.timed_out or r.error for r in res)


def _spawned_workers() -> set[int]:
    """pids of this process's spawned workers (not multiprocessing's resource tracker; zombies skipped)."""
    pids = set()
    for p in psutil.Process().children():
        try:
            if p.status() != psutil.STATUS_ZOMBIE and any("spawn_main" in part for part in p.cmdline()):
                pids.add(p.pid)
        except psutil.Error:  # exited while we looked
            pass
    return pids


def _wait_until(condition, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.05)


EQUAL = ("\\frac{\\sqrt{2}}{2}", "\\frac{1}{\\sqrt{2}}")  # needs math-verify (not the exact path)


def test_a_pool_broken_by_an_idle_worker_killed_from_outside_is_rebuilt_with_as_many_workers() -> None:
    """pebble stops its pool for good when an idle worker is SIGKILLed (OOM killer): without the
    rebuild every later item is a grader error; the broken pool's other workers are stopped."""
    before = _spawned_workers()
    pool = MathVerifyPool(max_workers=2, timeout_s=5.0)
    try:
        first = _spawned_workers() - before
        assert len(first) == 2
        os.kill(min(first), signal.SIGKILL)
        _wait_until(lambda: not pool._pool.active)  # pebble noticed: the next item meets a broken pool
        assert [r.equal for r in pool.verify_many([EQUAL, EQUAL, EQUAL])] == [True, True, True]
        _wait_until(lambda: not (_spawned_workers() & first))  # the survivor of the broken pool is gone
        assert len(_spawned_workers() - before) == 2
    finally:
        pool.close()


def test_items_waiting_in_a_pool_that_breaks_are_graded_in_the_new_one() -> None:
    """An item handed to a worker that is then killed, and items queued behind it, get their verdicts."""
    before = _spawned_workers()
    pool = MathVerifyPool(max_workers=1, timeout_s=5.0)
    try:
        (pid,) = _spawned_workers() - before
        os.kill(pid, signal.SIGSTOP)  # the item reaches the worker (or its queue) and waits there
        futures = [pool.submit(*EQUAL) for _ in range(3)]
        time.sleep(0.5)
        assert not any(f.done() for f in futures)
        os.kill(pid, signal.SIGKILL)
        results = [f.result(timeout=60) for f in futures]
        assert [(r.equal, r.error) for r in results] == [(True, "")] * 3
    finally:
        pool.close()


def test_an_item_whose_worker_is_killed_while_running_it_is_retried_and_graded_right(tmp_path, monkeypatch) -> None:
    """Issue 26 item 3: kill -9 of the worker holding an item (pebble: ProcessExpired, the pool keeps running)
    gave that item a grader error (graded incorrect although right). It runs once more in a fresh worker."""
    import rlec.grading.math as math_module

    monkeypatch.syspath_prepend(str(Path(__file__).parent))  # spawned workers inherit sys.path
    monkeypatch.setenv("RLEC_TEST_HOLD_MARKER", str(tmp_path / "holder.pid"))
    from rlec_held_item import held_check

    pool = MathVerifyPool(max_workers=2, timeout_s=120.0)  # workers spawned with this sys.path and environment
    try:
        monkeypatch.setattr(math_module, "_timed_check", held_check)  # what the pool schedules for each item from now
        marker = tmp_path / "holder.pid"
        future = pool.submit(*EQUAL)
        _wait_until(lambda: marker.exists() and marker.read_text().strip() != "")
        holder = int(marker.read_text())
        assert holder in _spawned_workers() and not future.done()
        os.kill(holder, signal.SIGKILL)  # the worker that holds the item, mid-item
        result = future.result(timeout=60)
        assert (result.equal, result.error, result.timed_out) == (True, "", False)
        assert pool._pool.active  # pebble kept the pool: this was the per-item path, not a rebuild
    finally:
        pool.close()


@pytest.mark.slow  # a math-verify worker pool of its own: ~5 CPU-s of children (the budget guard's limit)
def test_killed_worker_stops_at_once_and_its_replacement_is_warm_then_closed_pool_errors() -> None:
    before = _spawned_workers()
    pool = MathVerifyPool(max_workers=1, timeout_s=5.0)
    try:
        (pid,) = _spawned_workers() - before
        # pebble's own SIGTERM handler runs Python clean-up, which waits for the current C call: the
        # worker keeps its core for up to pebble's 3 s term_timeout. The workers take SIGTERM's
        # default action (immediate exit): the handler must not be installed.
        if Path(f"/proc/{pid}/status").exists():
            caught = int(re.search(r"^SigCgt:\s*([0-9a-f]+)", Path(f"/proc/{pid}/status").read_text(), re.MULTILINE).group(1), 16)
            assert not caught & (1 << (signal.SIGTERM - 1)), "the worker catches SIGTERM"
        start = time.perf_counter()
        stuck = pool.submit("1", "9^{9^{9^9}}").result()
        elapsed = time.perf_counter() - start
        assert stuck.timed_out and not stuck.equal
        assert elapsed < 5.0 + 2.0, f"the stuck worker took {elapsed - 5.0:.1f}s to die after its limit"
        assert not psutil.pid_exists(pid)
        # the replacement warms up before it takes an item: its first equation costs what a warm one
        # does (0.25-0.3 s of CPU here), not the 1.0 s (only the grammar warm) to 2.5 s (nothing
        # warm) of CPU of a cold worker's first equation
        ellipse = pool.submit("\\frac{x^2}{9}+\\frac{y^2}{5}=1", "5x^2+9y^2=45").result()
        assert ellipse.equal and not ellipse.timed_out
        assert ellipse.cpu_s < 0.6, f"the replacement's first equation took {ellipse.cpu_s:.2f} CPU seconds"
        assert _spawned_workers() - before - {pid}
    finally:
        pool.close()
    # a closed pool answers with an error, not an exception
    assert not pool.running
    res = pool.submit("1", "1").result()
    assert not res.equal and "pool unavailable" in res.error


TIMED_OUT_THEN_EXIT = """
from rlec.grading.math import shared_pool

if __name__ == "__main__":
    result = shared_pool(timeout_s=2.0).submit("1", "9^{9^{9^9}}").result()
    print("timed out:", result.timed_out, flush=True)
"""  # exits at once: the killed worker's replacement is still starting while the interpreter shuts down


@pytest.mark.slow  # a math-verify worker pool of its own in a subprocess: ~5 CPU-s of children
def test_exit_right_after_a_timed_out_item_prints_no_traceback(tmp_path) -> None:
    """Issue 55 item 6: multiprocessing's exit handler (registered when pebble is imported, after rlec's) unlinked the
    pool's semaphores while the replacement of the worker killed for the timeout was still starting; the replacement
    then printed a ``FileNotFoundError`` traceback from multiprocessing/synchronize.py (4 of 5 runs here). The pool
    now closes itself first."""
    import subprocess
    import sys

    script = tmp_path / "timed_out_then_exit.py"  # a file: spawned workers re-import __main__
    script.write_text(TIMED_OUT_THEN_EXIT)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    proc = subprocess.run([sys.executable, str(script)], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout == "timed out: True\n", (proc.stdout, proc.stderr[-3000:])
    assert "Traceback" not in proc.stderr and "Error" not in proc.stderr, proc.stderr[-3000:]
