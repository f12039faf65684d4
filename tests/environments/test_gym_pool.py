"""rlec.environments.gym_pool: the process exits quietly after a task the pool killed for its time limit."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

TIMED_OUT_THEN_EXIT = """
import sys

sys.path.insert(0, sys.argv[1])  # gym_fakes, imported by name in the spawned workers
import gym_fakes
from rlec.environments.gym_pool import GymPool

if __name__ == "__main__":
    pool = GymPool(max_workers=1, timeout_s=0.5, attempts=1, slow_factor=1, generate_task=gym_fakes.generate_task,
                   initializer=None)
    try:
        pool.submit("Hang", 0, 0).result()  # seed 0 hangs at every attempt (gym_fakes.behaviour)
    except Exception as exc:
        print(type(exc).__name__, flush=True)
"""  # exits at once: the killed worker's replacement is still starting while the interpreter shuts down


def test_exit_right_after_a_timed_out_task_prints_no_traceback(tmp_path: Path) -> None:
    """Issue 55 item 6 (the same race as rlec.grading.math's pool): multiprocessing's exit handler, registered when
    pebble is imported (after rlec's), unlinked the pool's semaphores while the replacement of the killed worker was
    still starting: an ``EOFError`` / ``FileNotFoundError`` traceback at exit (1 run in 3 here). The pool now closes
    itself first."""
    script = tmp_path / "timed_out_then_exit.py"  # a file: spawned workers re-import __main__
    script.write_text(TIMED_OUT_THEN_EXIT)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    for _ in range(3):
        proc = subprocess.run([sys.executable, str(script), str(Path(__file__).parent)], env=env, cwd=tmp_path,
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0 and proc.stdout == "GenerationFailed\n", (proc.stdout, proc.stderr[-3000:])
        assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
