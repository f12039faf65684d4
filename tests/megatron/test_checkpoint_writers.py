"""Forked checkpoint writers die with their parent (rlec.megatron.compat.writers_die_with_parent).

Megatron's dist-checkpoint writer forks one process per write bucket; killed with SIGKILL, the
parent used to leave them running for good. These tests fork a sleeping child the same way
(``multiprocessing`` fork context) inside the guard, kill the parent, and check the child by pid.
The end-to-end version (a real conversion killed mid-write, then rerun) is in
tests/tools/test_convert_hf_to_mcore.py.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = """
import multiprocessing as mp, sys, time
from rlec.megatron.compat import writers_die_with_parent

def writer():
    time.sleep(600)

fork = mp.get_context("fork")
plain = fork.Process(target=writer, daemon=True)  # the negative control: forked outside the guard
plain.start()
with writers_die_with_parent():
    guarded = fork.Process(target=writer)
    guarded.start()
    print(plain.pid, guarded.pid, flush=True)
    if sys.argv[1] == "raise":
        raise KeyboardInterrupt
    time.sleep(600)
"""


def alive(pid: int) -> bool:
    """The process exists and is not a zombie (a killed child whose new parent has not reaped it yet)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def wait_dead(pid: int, timeout: float = 10.0) -> bool:
    deadline = time.time() + timeout
    while alive(pid) and time.time() < deadline:
        time.sleep(0.05)
    return not alive(pid)


def _start(end: str) -> tuple[subprocess.Popen, int, int]:
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT, end], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    line = proc.stdout.readline().split()
    assert len(line) == 2, proc.stderr.read()
    return proc, int(line[0]), int(line[1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux-only")
def test_sigkill_of_the_parent_kills_the_forked_writer() -> None:
    proc, plain, guarded = _start("sleep")
    try:
        assert alive(guarded) and alive(plain)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        assert wait_dead(guarded), f"writer {guarded} outlived its killed parent"
        assert alive(plain)  # without the guard a forked child outlives its parent: the failure is real here
    finally:
        for pid in (plain, guarded):
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_an_exception_in_the_write_kills_the_writers_before_it_propagates() -> None:
    proc, _, guarded = _start("raise")
    proc.wait(timeout=60)
    assert proc.returncode != 0 and "KeyboardInterrupt" in proc.stderr.read()
    assert wait_dead(guarded, timeout=1.0)


def test_megatron_still_forks_its_checkpoint_writers() -> None:
    """The probe of the workaround: when megatron stops forking writers, drop writers_die_with_parent."""
    from rlec.megatron.compat import forked_writers_needed

    assert forked_writers_needed()
