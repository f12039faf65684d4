"""math-verify in a warm, killable process pool: the slow path of math grading.

math-verify (Hugging Face, ``math-verify==0.9.0``) decides mathematical equivalence with sympy.
Four of its properties shape this module (measured here; math-verify 0.9.0's ``parse`` / ``verify`` source):

- its timeouts use ``signal.alarm``, which raises in a non-main thread and cancels any alarm the
  caller set, so it never runs in the caller's process here;
- pathological inputs (``9^{9^{9^9}}``, hundreds of nested parentheses) can run for minutes: the
  caller screens them first (:mod:`rlec.grading.screen`), and the pool's hard timeout is the
  last line of defence;
- its first call on each form costs far more than later ones (sympy and antlr warm up lazily:
  measured 2.8 s for the first equation, 1.3 s for the first interval, 0.3-0.5 s for sets,
  matrices and powers, against milliseconds warm);
- it costs milliseconds per item, while most answers match as plain strings or numbers
  (:func:`rlec.grading.math_forms.fast_verdict` settles those in the caller).

So :class:`MathVerifyPool` runs ``pebble.ProcessPool`` workers (spawned) with a hard per-item
timeout measured from the moment the item starts in its worker. Every worker, the first ones and
each one pebble starts to replace a killed worker, runs :func:`_worker_init` before it takes an
item: it imports math-verify and checks one pair of each slow-to-start form
(:data:`WARMUP_PAIRS`), outside any item's time limit, so no item pays a cold start. A worker past
the limit is killed at once (SIGTERM with the default action: pebble's own handler runs Python
clean-up, which waits for a C-level big-number computation to return, up to pebble's 3 s
``term_timeout`` of CPU before its SIGKILL) and replaced; the other items of the batch are
unaffected. We use pebble rather than ``concurrent.futures``: the standard pool cannot kill one
stuck task without breaking the whole pool.

The worker's check, :func:`math_verify_equal`, applies the conventions of
:mod:`rlec.grading.math_forms` (percent as a unit, equations for a non-equation gold, intervals
equal to inequalities) and parses each answer in ``\\boxed{}`` or, when math-verify cannot parse it
there (``\\boxed{35\\%}`` does not parse, ``$35\\%$`` does), in ``$...$``.
"""

from __future__ import annotations

import atexit
import concurrent.futures
import functools
import logging
import multiprocessing
import os
import signal
import threading
import time
from dataclasses import dataclass
from typing import Any, Iterable

from rlec.grading.math_forms import math_verify_inputs

DEFAULT_TIMEOUT_S = 5.0
_WRAPPERS = ("\\boxed{%s}", "$%s$")
# One (gold, pred, verdict under rlec's conventions) per form math-verify is slow to start on
# (tests/grading/test_math.py checks the verdicts, so a math-verify upgrade that changes one shows).
WARMUP_PAIRS: tuple[tuple[str, str, bool], ...] = (
    ("2\\sqrt{3}", "\\sqrt{12}", True),
    ("1024", "2^{10}", True),
    ("\\frac{x^2}{9}+\\frac{y^2}{5}=1", "5x^2+9y^2=45", True),  # equation
    ("(-\\infty, 3)", "x<3", True),  # interval vs inequality
    ("[2,\\infty)", "x \\ge 2", True),
    ("\\{1,2\\}", "\\{2,1\\}", True),  # set
    ("(1,2)", "(2,1)", False),  # tuple
    ("\\begin{pmatrix}1&2\\\\3&4\\end{pmatrix}", "\\begin{pmatrix}1&2\\\\3&4\\end{pmatrix}", True),  # matrix
    ("35\\%", "0.35", True),  # percent
    ("\\frac{\\pi}{3}", "60^\\circ", False),
    ("\\log_2 8", "3", True),
    ("1+2i", "2i+1", True),
    ("(x+1)^2", "x^2+2x+1", True),
    ("\\text{Monday}", "\\text{monday}", True),
)


def _worker_init() -> None:
    """Runs once in each pool process, before it takes any item (outside every item's limit)."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # die at once when pebble kills this worker (module docstring)
    logging.getLogger("math_verify").setLevel(logging.CRITICAL)  # it logs whole inputs on errors
    for gold, pred, _ in WARMUP_PAIRS:
        try:
            math_verify_equal(gold, pred)
        except Exception:  # best effort: a failing form must not stop the worker (the health check probes it)
            pass


@functools.lru_cache(maxsize=1024)
def _parse(answer: str) -> tuple[Any, ...]:
    """math-verify's parse of one answer: in ``\\boxed{}``, else in ``$...$``; () when neither parses."""
    from math_verify import parse

    fallback: list[Any] = []
    for wrapper in _WRAPPERS:
        parsed = parse(wrapper % answer, parsing_timeout=None)
        if any(not isinstance(x, str) for x in parsed):
            return tuple(parsed)
        fallback = fallback or parsed
    return tuple(fallback)


def _equation_sides(expr: Any) -> list[Any]:
    """The sides of an equation or a chain of equations (``a = b = c`` -> [a, b, c])."""
    from sympy import And

    relations = list(expr._unsorted_args) if isinstance(expr, And) else [expr]
    return [relations[0].lhs] + [r.rhs for r in relations]


def math_verify_equal(gold: str, pred: str) -> bool:
    """math-verify's verdict on (gold, pred) under rlec's conventions (module docstring).

    Runs without math-verify's own ``signal.alarm`` timeouts: call it only inside a
    :class:`MathVerifyPool` worker (or a process you may kill).
    """
    from math_verify import verify
    from math_verify.grader import is_assignment_relation, is_equation, is_relation

    golds, pred = math_verify_inputs(gold, pred)
    gold_parsed = [x for g in golds for x in _parse(g)]
    pred_parsed = list(_parse(pred))
    if not gold_parsed or not pred_parsed:
        return False
    value = next((x for x in pred_parsed if not isinstance(x, str)), None)
    gold_values = [x for x in gold_parsed if not isinstance(x, str)]
    if value is not None and is_equation(value) and not is_assignment_relation(value) and not any(map(is_relation, gold_values)):
        # "42 = 7" for gold 7: math-verify compares the right-hand side only; every side must match
        return all(verify(gold_parsed, [side], timeout_seconds=None) for side in _equation_sides(value))
    return bool(verify(gold_parsed, pred_parsed, timeout_seconds=None, allow_set_relation_comp=True))


def _timed_check(gold: str, pred: str) -> tuple[bool, float]:
    """:func:`math_verify_equal` and the CPU seconds it took in this worker."""
    start = time.process_time()
    equal = math_verify_equal(gold, pred)
    return equal, time.process_time() - start


@dataclass(frozen=True)
class VerifyResult:
    """One math-verify check done in the pool.

    Attributes:
        equal: the verdict (False when timed out or failed).
        timed_out: the item ran past the pool's per-item timeout and its worker was killed.
        error: the exception text when the worker raised or died, else "".
        cpu_s: CPU seconds the check took in its worker (0.0 when it did not finish).
    """

    equal: bool
    timed_out: bool = False
    error: str = ""
    cpu_s: float = 0.0


class MathVerifyPool:
    """A warm pool of math-verify worker processes with a hard per-item timeout.

    Every worker (the first ones and each replacement of a killed one) is warmed by
    :func:`_worker_init` before it takes an item; the constructor returns once the first workers
    are warm (a few seconds: 4.5 s of warm-up on a loaded 2-core box).

    Args:
        max_workers: worker processes (default ``min(4, os.cpu_count())``).
        timeout_s: per-item limit in seconds, from the start of the item in its worker.

    Raises:
        ValueError: ``timeout_s`` is not positive.
        RuntimeError: the workers cannot run (the message says the usual cause).

    Thread-safe: futures may be submitted from several threads or an event loop.
    """

    def __init__(self, max_workers: int | None = None, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:

        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be positive, got {timeout_s!r}")
        self.timeout_s = float(timeout_s)
        self.max_workers = max_workers or min(4, os.cpu_count() or 1)
        self._closed = False
        self._lock = threading.Lock()
        self._pool = self._new_pebble_pool()
        self._health_check()

    def _new_pebble_pool(self) -> Any:
        import pebble

        return pebble.ProcessPool(
            max_workers=self.max_workers,
            initializer=_worker_init,
            context=multiprocessing.get_context("spawn"),  # safe from threaded parents (Ray, torch)
        )

    def _live_pool(self) -> Any:
        """The pebble pool, rebuilt once if it broke while not closed.

        pebble's pool stops for good ("Unexpected error within the Pool") when an idle worker is
        killed from outside (OOM killer, kill -9; measured with pebble 5.2.3): without a rebuild,
        every later math item of a training run would grade as a grader error.
        """
        with self._lock:
            if not self._pool.active and not self._closed:
                logging.getLogger(__name__).warning("math-verify pool stopped (a worker died outside an item): starting a new one")
                self._pool = self._new_pebble_pool()
            return self._pool

    @property
    def running(self) -> bool:
        """True until :meth:`close` (a pool that broke is rebuilt at the next item)."""
        return not self._closed

    def _health_check(self) -> None:
        """Wait for every worker's warm-up and fail loudly if workers cannot run at all (else every
        math item would grade incorrect)."""
        probes = [self.submit("\\sqrt{12}", "2\\sqrt{3}") for _ in range(self.max_workers)]
        probe = next((r for r in (f.result() for f in probes) if not r.equal), probes[0].result())
        if not probe.equal:
            self.close()
            raise RuntimeError(
                "math-verify pool is not working (a known-equal probe failed: "
                f"{probe.error or 'verdict False'}). Workers are spawned, so they re-import your __main__ "
                "module: put a script's entry point under `if __name__ == '__main__':` and do not "
                "run grading code from stdin"
            )

    def submit(self, gold: str, pred: str) -> concurrent.futures.Future:
        """Schedule one check; the future's result is a :class:`VerifyResult` (neither raises).

        An item that was waiting in a pool that broke under it (``BrokenProcessPool: All workers
        expired``, measured with pebble 5.2.3 when a worker is killed from outside) is scheduled
        once more in the rebuilt pool instead of costing its verdict.
        """
        outer: concurrent.futures.Future = concurrent.futures.Future()
        self._schedule(gold, pred, outer, retry=False)
        return outer

    def _schedule(self, gold: str, pred: str, outer: concurrent.futures.Future, *, retry: bool) -> None:
        """Run one check in the live pool and set ``outer``'s result from it (see :meth:`submit`)."""
        try:
            inner = self._live_pool().schedule(_timed_check, args=(gold, pred), timeout=self.timeout_s)
        except Exception as exc:  # the pool is closed or broken
            outer.set_result(VerifyResult(False, error=f"math-verify pool unavailable: {type(exc).__name__}: {exc}"[:500]))
            return

        def _done(f: concurrent.futures.Future) -> None:
            try:
                equal, cpu_s = f.result()
                outer.set_result(VerifyResult(bool(equal), cpu_s=cpu_s))
            except concurrent.futures.TimeoutError:
                outer.set_result(VerifyResult(False, timed_out=True, error=f"timeout after {self.timeout_s:g}s"))
            except concurrent.futures.BrokenExecutor as exc:  # the whole pool broke, not this item
                if retry or self._closed:
                    outer.set_result(VerifyResult(False, error=f"{type(exc).__name__}: {exc}"[:500]))
                else:
                    self._schedule(gold, pred, outer, retry=True)
            except BaseException as exc:  # a worker crash (pebble.ProcessExpired) or a math-verify bug
                outer.set_result(VerifyResult(False, error=f"{type(exc).__name__}: {exc}"[:500]))

        inner.add_done_callback(_done)

    def verify_many(self, pairs: Iterable[tuple[str, str]]) -> list[VerifyResult]:
        """Check many (gold, pred) pairs at once, in order; a stuck item costs only its timeout."""
        futures = [self.submit(g, p) for g, p in pairs]
        return [f.result() for f in futures]

    def close(self) -> None:
        """Stop the workers: let running items finish for up to one timeout, then kill."""
        self._closed = True
        self._pool.close()
        try:
            self._pool.join(timeout=self.timeout_s + 1.0)
        except TimeoutError:
            self._pool.stop()
            self._pool.join(timeout=5)


_shared: MathVerifyPool | None = None
_shared_lock = threading.Lock()


def shared_pool(timeout_s: float = DEFAULT_TIMEOUT_S) -> MathVerifyPool:
    """The process-wide pool, created on first use and closed at exit.

    A call with a different ``timeout_s``, or after the pool stopped running, replaces the pool.

    Raises:
        RuntimeError: the workers cannot run (see :class:`MathVerifyPool`).
    """
    global _shared
    with _shared_lock:
        if _shared is None or _shared.timeout_s != float(timeout_s) or not _shared.running:
            if _shared is not None:
                _shared.close()
            _shared = MathVerifyPool(timeout_s=timeout_s)
        return _shared


@atexit.register
def _close_shared() -> None:
    if _shared is not None:
        _shared.close()
