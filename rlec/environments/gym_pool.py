"""The one process pool of RLVE-Gym: generation and verification outside the caller's process.

RLVE-Gym (``rlve-gym`` 0.0.1, import name ``Gym``) re-seeds Python's ``random``, numpy and torch
globally for every problem and times generation out with a thread it cannot stop. So every call
into it runs in a :func:`rlec.environments.gym_worker` function inside a ``pebble.ProcessPool``
worker (spawned, like the math-verify pool of :mod:`rlec.grading.math`): the caller's global
random state is never touched and no thread of theirs lives in the caller. Each task has a hard
time limit measured from its start in the worker; a worker past it is killed and replaced.

Generation is retried deterministically: attempt k of problem (environment, seed, difficulty)
uses the k-th Gym seed of that problem's own generator (:func:`rlec.environments.gym_worker.draw`).
An attempt that runs past its limit is first run again with the same Gym seed under
:attr:`GymPool.slow_factor` times the limit (counted as ``slow_retries``): a machine busy enough to
slow a problem past the limit gets the same problem a quiet one does, unless it is that many times
slower; only then is the next Gym seed tried. So which problems a seeded run trains on does not
depend on the machine's load.
after :attr:`GymPool.attempts` failed or timed-out attempts the problem is refused with
:class:`GenerationFailed` (the caller skips it). :meth:`GymPool.submit` returns at once with a
future per problem, whose attempts chain in the pool (the next attempt is scheduled when the last
one fails), so problems submitted together overlap and one slow problem delays only its own future. Counted per environment (:meth:`GymPool.metrics`,
``rlve_gym/<Env>/<counter>``): ``generated``, ``gen_failures`` (attempts that raised),
``gen_timeouts``, ``retries``, ``skipped`` (problems given up), ``verified``, ``verify_timeouts``,
``verify_errors``.

The dataset and the evaluation share :func:`shared_gym_pool` (one per process).
"""

from __future__ import annotations

import atexit
import concurrent.futures
import logging
import multiprocessing
import os
import threading
from collections import Counter, defaultdict
from typing import Any, Callable, Sequence

from rlec.environments import gym_worker

__all__ = ["DEFAULT_ATTEMPTS", "DEFAULT_TIMEOUT_S", "GenerationFailed", "GymPool", "shared_gym_pool"]

DEFAULT_TIMEOUT_S = 10.0  # per task (RLVE-Gym's own generation limit is 10 s)
DEFAULT_ATTEMPTS = 3
DEFAULT_SLOW_FACTOR = 6.0  # a timed-out attempt's same-seed rerun gets 6 x the limit (60 s by default)
COUNTERS = ("generated", "gen_failures", "gen_timeouts", "slow_retries", "retries", "skipped", "verified", "verify_timeouts",
            "verify_errors")
logger = logging.getLogger(__name__)


class GenerationFailed(RuntimeError):
    """No attempt of a problem generated within its limit; ``reasons`` holds one text per attempt."""

    def __init__(self, name: str, seed: int, difficulty: int, reasons: Sequence[str]) -> None:
        super().__init__(f"rlve_gym:{name} seed {seed} difficulty {difficulty}: no problem after "
                         f"{len(reasons)} attempts ({'; '.join(reasons)})")
        self.reasons = list(reasons)


def _reason(exc: BaseException, timeout_s: float) -> tuple[str, bool]:
    """(short reason, timed out) of a failed task."""
    if isinstance(exc, concurrent.futures.TimeoutError):
        return f"timeout after {timeout_s:g}s", True
    return f"{type(exc).__name__}: {exc}"[:300], False


class GymPool:
    """Spawned RLVE-Gym workers with a hard per-task time limit and per-environment counters.

    Args:
        max_workers: worker processes (default ``min(4, os.cpu_count())``).
        timeout_s: per task, seconds from its start in a worker (> 0).
        attempts: generation attempts per problem (>= 1).
        slow_factor: an attempt past its limit runs again with the same Gym seed under this many times
            the limit before the next seed is tried (>= 1; 1: no such rerun) (module docstring).
        generate_task: the worker-side generator, ``(identifier, seed, difficulty, attempt) -> dict``
            (default :func:`rlec.environments.gym_worker.generate_task`; a module-level function, it is
            pickled by name; tests pass a deliberately slow one).
        initializer: run once per worker before its first task (default
            :func:`rlec.environments.gym_worker.worker_init`, which imports Gym; None: nothing).

    Raises:
        ValueError: a non-positive ``timeout_s`` or ``attempts``.

    Workers import ``Gym`` once at start (1.5-60 s, outside every task's limit). Thread-safe.
    """

    def __init__(self, max_workers: int | None = None, timeout_s: float = DEFAULT_TIMEOUT_S,
                 attempts: int = DEFAULT_ATTEMPTS, *, generate_task: Callable[..., dict[str, Any]] = gym_worker.generate_task,
                 initializer: Callable[[], None] | None = gym_worker.worker_init,
                 slow_factor: float = DEFAULT_SLOW_FACTOR) -> None:
        if timeout_s <= 0 or attempts < 1 or not slow_factor >= 1:
            raise ValueError(f"timeout_s must be > 0, attempts >= 1 and slow_factor >= 1, got {timeout_s!r}, "
                             f"{attempts!r}, {slow_factor!r}")
        self.timeout_s, self.attempts, self.slow_factor = float(timeout_s), int(attempts), float(slow_factor)
        self._generate_task, self._initializer = generate_task, initializer
        self.max_workers = max_workers or min(4, os.cpu_count() or 1)
        self.counts: dict[str, Counter] = defaultdict(Counter)
        self._lock = threading.Lock()
        self._closed = False
        # generation iterates over sets of strings in some environments: fix the hash seed of the
        # workers (read at their interpreter start; this process's own hashing is unaffected)
        os.environ.setdefault("PYTHONHASHSEED", "0")
        self._pool = self._new_pool()
        # closed at exit before multiprocessing's own exit handler (registered by pebble's import, so it ran first,
        # unlinking the pool's semaphores under a replacement worker still starting: a traceback at exit)
        atexit.register(self.close)

    def _new_pool(self) -> Any:
        import pebble

        return pebble.ProcessPool(max_workers=self.max_workers, initializer=self._initializer,
                                  context=multiprocessing.get_context("spawn"))

    def _schedule(self, fn: Any, args: tuple, timeout_s: float | None = None) -> concurrent.futures.Future:
        with self._lock:
            if self._closed:
                raise RuntimeError("the RLVE-Gym pool is closed")
            if not self._pool.active:  # a worker died outside a task: pebble's pool stops for good
                logger.warning("RLVE-Gym pool stopped: starting a new one")
                self._pool = self._new_pool()
            return self._pool.schedule(fn, args=args, timeout=timeout_s or self.timeout_s)

    def _count(self, name: str, key: str, n: int = 1) -> None:
        with self._lock:
            self.counts[name][key] += n

    def submit(self, name: str, seed: int, difficulty: int, *,
               timeout_s: float | None = None) -> concurrent.futures.Future:
        """Start generating problem ``(Gym identifier, rlec seed, difficulty)``; return at once.

        Attempt k + 1 is scheduled as soon as attempt k fails or times out (never waited for
        here), so what the future holds depends on (identifier, seed, difficulty) and on which
        attempts ran past their limit, never on the order in which problems finish.

        Args:
            timeout_s: overrides the pool's limit per attempt for this problem.

        Returns:
            A future of :func:`rlec.environments.gym_worker.generate_task`'s dict; its ``result()``
            raises :class:`GenerationFailed` when no attempt generated.

        Raises:
            RuntimeError: the pool is closed.
        """
        outer: concurrent.futures.Future = concurrent.futures.Future()
        reasons: list[str] = []
        limit = timeout_s or self.timeout_s

        def start(attempt: int, slow: bool = False) -> None:
            inner = self._schedule(self._generate_task, (name, seed, difficulty, attempt),
                                   limit * self.slow_factor if slow else timeout_s)
            inner.add_done_callback(lambda future: done(future, attempt, slow))

        def done(inner: concurrent.futures.Future, attempt: int, slow: bool) -> None:  # in pebble's manager thread
            try:
                result = inner.result()
            except Exception as exc:  # noqa: BLE001 - anything the environment raises, or a killed worker
                text, timed_out = _reason(exc, limit * self.slow_factor if slow else limit)
                self._count(name, "gen_timeouts" if timed_out else "gen_failures")
                reasons.append(text)
                if timed_out and not slow and self.slow_factor > 1:  # the same Gym seed, with time to spare
                    self._count(name, "slow_retries")
                    try:
                        start(attempt, slow=True)
                    except Exception as again:  # noqa: BLE001 - the pool was closed meanwhile
                        outer.set_exception(again)
                    return
                if attempt + 1 < self.attempts:
                    self._count(name, "retries")
                    try:
                        start(attempt + 1)
                    except Exception as again:  # noqa: BLE001 - the pool was closed meanwhile
                        outer.set_exception(again)
                    return
                self._count(name, "skipped")
                failed = GenerationFailed(name, seed, difficulty, reasons)
                logger.warning("%s", failed)
                outer.set_exception(failed)
                return
            self._count(name, "generated")
            outer.set_result(result)

        start(0)
        return outer

    def generate_many(self, jobs: Sequence[tuple[str, int, int]], *,
                      timeout_s: float | None = None) -> list[dict[str, Any] | GenerationFailed]:
        """Generate problems ``(Gym identifier, rlec seed, difficulty)``, in order, all at once (:meth:`submit` each).

        ``timeout_s`` overrides the pool's limit per attempt for this call.

        Returns:
            Per job, :func:`rlec.environments.gym_worker.generate_task`'s dict, or the
            :class:`GenerationFailed` that ended it (returned, not raised).
        """
        futures = [self.submit(*job, timeout_s=timeout_s) for job in jobs]
        results: list[dict[str, Any] | GenerationFailed] = []
        for future in futures:
            try:
                results.append(future.result())
            except GenerationFailed as failed:
                results.append(failed)
        return results

    def generate(self, name: str, seed: int, difficulty: int) -> dict[str, Any]:
        """One problem (see :meth:`generate_many`).

        Raises:
            GenerationFailed: every attempt failed or timed out.
        """
        result = self.generate_many([(name, seed, difficulty)])[0]
        if isinstance(result, GenerationFailed):
            raise result
        return result

    def score_many(self, items: Sequence[tuple[str, int, dict[str, Any], str]]) -> list[tuple[float, float, float] | str]:
        """Score ``(Gym identifier, difficulty, Problem.data, answer)`` items, in order.

        Returns:
            Per item ``(shaped score in [-1, 1], passing threshold, seconds in the worker)``, or a reason text when the
            verifier raised or ran past the limit (never raises).
        """
        futures = []
        for name, difficulty, data, answer in items:
            try:
                futures.append(self._schedule(gym_worker.score_task, (name, difficulty, data, answer)))
            except RuntimeError as exc:
                futures.append(exc)
        out: list[tuple[float, float, float] | str] = []
        for (name, *_), future in zip(items, futures):
            try:
                if isinstance(future, BaseException):
                    raise future
                out.append(future.result())
                self._count(name, "verified")
            except Exception as exc:  # noqa: BLE001
                text, timed_out = _reason(exc, self.timeout_s)
                self._count(name, "verify_timeouts" if timed_out else "verify_errors")
                out.append(text)
        return out

    def metrics(self, prefix: str = "rlve_gym") -> dict[str, float]:
        """Counters since start: ``{"<prefix>/<Env>/<counter>": count}`` for every counter of every environment seen."""
        with self._lock:
            return {f"{prefix}/{name}/{key}": float(c[key]) for name, c in sorted(self.counts.items()) for key in COUNTERS}

    def close(self) -> None:
        """Stop the workers (running tasks are killed). Called at exit too; a second call does nothing."""
        atexit.unregister(self.close)
        with self._lock:
            if self._closed:
                return
            self._closed = True
            pool = self._pool
        try:
            pool.stop()
            pool.join(timeout=10)
        except Exception:  # noqa: BLE001 - already stopped
            pass


_shared: GymPool | None = None
_shared_lock = threading.Lock()


def shared_gym_pool() -> GymPool:
    """The process-wide pool, started on first use (``RLEC_GYM_WORKERS``, ``RLEC_GYM_TIMEOUT_S``
    and ``RLEC_GYM_ATTEMPTS`` override its defaults) and closed at exit."""
    global _shared
    with _shared_lock:
        if _shared is None or _shared._closed:
            _shared = GymPool(max_workers=int(os.environ.get("RLEC_GYM_WORKERS", 0)) or None,
                              timeout_s=float(os.environ.get("RLEC_GYM_TIMEOUT_S", DEFAULT_TIMEOUT_S)),
                              attempts=int(os.environ.get("RLEC_GYM_ATTEMPTS", DEFAULT_ATTEMPTS)))
        return _shared
