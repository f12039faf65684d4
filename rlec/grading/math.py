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
import re
import signal
import threading
import time
from dataclasses import dataclass
from typing import Any, Iterable

from rlec.grading.extract import TEXT_COMMANDS
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
    if value is not None and _dropped_a_command(pred, value):
        return False  # "5\sqrt(3)" parsed as 5: the malformed rest was dropped, the answer is not 5
    if value is not None and is_equation(value) and not is_assignment_relation(value) and not any(map(is_relation, gold_values)):
        # "42 = 7" for gold 7: math-verify compares the right-hand side only; every side must match
        return all(_equal(gold_values, side, lambda s=side: verify(gold_parsed, [s], timeout_seconds=None))
                   for side in _equation_sides(value))
    return _equal(gold_values, value,
                  lambda: verify(gold_parsed, pred_parsed, timeout_seconds=None, allow_set_relation_comp=True))


# a number followed by a command: what a malformed command that math-verify drops leaves behind
_NUMBER_THEN_COMMAND_RE = re.compile(r"^\s*([+-]?(?:\d+(?:\.\d*)?|\.\d+))\s*\\([A-Za-z]+)")
# commands that may follow a number and parse to nothing on their own: units, spacing, degrees
_NEUTRAL_COMMANDS = frozenset(TEXT_COMMANDS) | {"quad", "qquad", "circ", "degree", "textdegree", "rm", "displaystyle", "hspace"}


def _dropped_a_command(pred: str, value: Any) -> bool:
    """Whether math-verify read a number-then-command answer as the bare number (the command was dropped).

    math-verify parses the longest valid prefix: ``5\\sqrt(3)``, ``7\\foo{3}`` and ``3\\log(2``
    parse to 5, 7 and 3. Compared structurally (sympy ``==``, unevaluated forms kept): a real
    product such as ``5\\times 1`` parses to ``5*1``, not to ``5``.
    """
    m = _NUMBER_THEN_COMMAND_RE.match(pred)
    if m is None or m.group(2) in _NEUTRAL_COMMANDS:
        return False
    prefix = next((x for x in _parse(m.group(1)) if not isinstance(x, str)), None)
    return prefix is not None and value == prefix


def _exact_rational(x: Any) -> Any:
    """``x`` as a sympy Rational when it is an exact rational number (no Float, no symbol), else None."""
    from sympy import Basic, Float, Rational

    if not isinstance(x, Basic) or x.free_symbols or x.has(Float):
        return None
    try:
        value = x.doit()
    except Exception:  # noqa: BLE001 - not a plain number (a set, a relation): math-verify decides
        return None
    return value if isinstance(value, Rational) else None


def _equal(gold_values: list[Any], value: Any, verify_call: Any) -> bool:
    """Exact comparison when the prediction and every gold value are exact rationals, else math-verify.

    math-verify compares numbers with a tolerance, so ``1/3^60`` and ``1/3^59`` (both ~1e-29) would
    be equal; exact values are compared as rationals (:mod:`rlec.grading.math_forms`, conventions).
    """
    exact = _exact_rational(value) if value is not None else None
    golds = [_exact_rational(g) for g in gold_values]
    if exact is not None and golds and all(g is not None for g in golds):
        return exact in golds
    return bool(verify_call())


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


_REBUILD_LIMIT = (3, 60.0)  # at most 3 rebuilds of the pebble pool within 60 s, then items fail fast
_POLL_S = 1.0  # how often verify_many looks for items stranded in a pool that broke


class MathVerifyPool:
    """A warm pool of math-verify worker processes with a hard per-item timeout.

    Every worker (the first ones and each replacement of a killed one) is warmed by
    :func:`_worker_init` before it takes an item; the constructor returns once the first workers
    are warm (a few seconds: 4.5 s of warm-up on a loaded 2-core box).

    A worker killed from outside while idle (OOM killer, ``kill -9``) stops pebble's pool for good
    (measured with pebble 5.2.3: ``BrokenProcessPool: All workers expired``, or items that never
    complete). The pool is then rebuilt, at most ``3`` times in ``60`` s, and every item that was
    not decided in the broken pool is scheduled again in the new one (each item at most once
    more), so a killed worker costs no verdict. The broken pool's surviving workers are stopped.
    A worker killed while it runs an item (pebble: ``ProcessExpired``; the pool keeps running)
    is retried the same way: the item runs once more in a fresh worker, and only a second death
    under it makes it a grader error. A worker killed for the item's timeout is not retried.

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
        self._rebuilds: list[float] = []
        # undecided items of the current pool: outer future -> (gold, pred, retried)
        self._pending: dict[concurrent.futures.Future, tuple[str, str, bool]] = {}
        self._pool = self._new_pebble_pool()
        # closed at exit before multiprocessing's own exit handler, which pebble's import registers (so after any
        # handler registered at import time: it ran first). That handler unlinks the pool's semaphores and then
        # waits for the workers; a replacement worker still starting after a timed-out item could no longer
        # unpickle its channel and printed a FileNotFoundError traceback (multiprocessing/synchronize.py) at exit.
        atexit.register(self.close)
        self._health_check()

    def _new_pebble_pool(self) -> Any:
        import pebble

        return pebble.ProcessPool(
            max_workers=self.max_workers,
            initializer=_worker_init,
            context=multiprocessing.get_context("spawn"),  # safe from threaded parents (Ray, torch)
        )

    def _live_pool(self) -> Any:
        """The pebble pool; a pool that broke while not closed is replaced (see the class docstring).

        Raises:
            RuntimeError: the pool is closed, or broke more than the rebuild limit allows.
        """
        stranded: list[tuple[concurrent.futures.Future, tuple[str, str, bool]]] = []
        with self._lock:
            if self._closed:
                raise RuntimeError("the pool is closed")
            if not self._pool.active:
                now = time.monotonic()
                self._rebuilds = [t for t in self._rebuilds if now - t < _REBUILD_LIMIT[1]]
                if len(self._rebuilds) >= _REBUILD_LIMIT[0]:
                    raise RuntimeError(f"math-verify pool broke {len(self._rebuilds) + 1} times within {_REBUILD_LIMIT[1]:g} s")
                self._rebuilds.append(now)
                logging.getLogger(__name__).warning("math-verify pool stopped (a worker died outside an item): starting a new one")
                broken, self._pool = self._pool, self._new_pebble_pool()
                stranded, self._pending = list(self._pending.items()), {}
                # its surviving workers would otherwise live (and compute abandoned items) until exit;
                # stopped from another thread: this may run inside one of pebble's own threads
                threading.Thread(target=_stop_pool, args=(broken,), daemon=True).start()
            pool = self._pool
        for outer, (gold, pred, retried) in stranded:
            if outer.done():
                continue
            if retried:
                _set(outer, VerifyResult(False, error="math-verify pool broke twice under this item"))
            else:
                self._schedule(gold, pred, outer, retry=True)
        return pool

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
        """Schedule one check; the future's result is a :class:`VerifyResult` (neither raises)."""
        outer: concurrent.futures.Future = concurrent.futures.Future()
        self._schedule(gold, pred, outer, retry=False)
        return outer

    def _schedule(self, gold: str, pred: str, outer: concurrent.futures.Future, *, retry: bool) -> None:
        """Run one check in the live pool and set ``outer``'s result from it (see the class docstring)."""
        try:
            pool = self._live_pool()
            with self._lock:
                if pool is not self._pool:  # rebuilt in between: take the new one
                    pool = self._pool
                inner = pool.schedule(_timed_check, args=(gold, pred), timeout=self.timeout_s)
                self._pending[outer] = (gold, pred, retry)
        except Exception as exc:  # the pool is closed, or keeps breaking
            _set(outer, VerifyResult(False, error=f"math-verify pool unavailable: {type(exc).__name__}: {exc}"[:500]))
            return

        def _done(f: concurrent.futures.Future) -> None:
            try:
                equal, cpu_s = f.result()
                result = VerifyResult(bool(equal), cpu_s=cpu_s)
            except concurrent.futures.TimeoutError:
                result = VerifyResult(False, timed_out=True, error=f"timeout after {self.timeout_s:g}s")
            except concurrent.futures.BrokenExecutor as exc:  # the whole pool broke, not this item
                if not retry and not self._closed:
                    self._live_pool_quietly()  # rebuilds and schedules this item (still pending) again
                    if outer in self._pending or outer.done():
                        return
                result = VerifyResult(False, error=f"{type(exc).__name__}: {exc}"[:500])
            except BaseException as exc:  # a worker crash (pebble.ProcessExpired) or a math-verify bug
                if _worker_died(exc) and not retry and not self._closed:
                    # the worker running this item died (OOM killer, kill -9): the item is not at fault
                    # until it happens twice, so it runs once more in a fresh worker, like a broken pool's items
                    with self._lock:
                        if pool is self._pool:
                            self._pending.pop(outer, None)
                    self._schedule(gold, pred, outer, retry=True)
                    return
                suffix = " (its worker died twice under this item)" if _worker_died(exc) else ""
                result = VerifyResult(False, error=f"{type(exc).__name__}: {exc}{suffix}"[:500])
            with self._lock:
                if pool is self._pool:  # after a rebuild the entry (if any) belongs to the new pool
                    self._pending.pop(outer, None)
            _set(outer, result)

        inner.add_done_callback(_done)

    def _live_pool_quietly(self) -> None:
        try:
            self._live_pool()
        except RuntimeError:
            pass

    def verify_many(self, pairs: Iterable[tuple[str, str]]) -> list[VerifyResult]:
        """Check many (gold, pred) pairs at once, in order; a stuck item costs only its timeout.

        While waiting it checks every :data:`_POLL_S` seconds that the pool still runs, so items
        left in a pool that broke are scheduled again instead of waiting forever.
        """
        futures = [self.submit(g, p) for g, p in pairs]
        while True:
            _, not_done = concurrent.futures.wait(futures, timeout=_POLL_S)
            if not not_done:
                return [f.result() for f in futures]
            if not self._pool.active:
                self._live_pool_quietly()

    def close(self) -> None:
        """Stop the workers: let running items finish for up to one timeout, then kill. Called at exit too; a
        second call does nothing."""
        atexit.unregister(self.close)
        with self._lock:
            if self._closed:
                return
            self._closed = True
            pool = self._pool
        pool.close()
        try:
            pool.join(timeout=self.timeout_s + 1.0)
        except TimeoutError:
            _stop_pool(pool, wait_s=60.0)  # the pool's manager thread ends before the reap: it may start a replacement
        _reap_workers()


def _worker_died(exc: BaseException) -> bool:
    """Whether ``exc`` is pebble's report that the worker running an item died (``ProcessExpired``)."""
    import pebble

    return isinstance(exc, pebble.ProcessExpired)


def _set(outer: concurrent.futures.Future, result: VerifyResult) -> None:
    """Set a result unless the future is already done (a cancelled asyncio wrapper, or a retry won)."""
    try:
        outer.set_result(result)
    except concurrent.futures.InvalidStateError:
        pass


def _stop_pool(pool: Any, wait_s: float = 5.0) -> None:
    """Kill a pebble pool's workers and wait up to ``wait_s`` seconds for its manager thread and workers."""
    try:
        pool.stop()
        pool.join(timeout=wait_s)
    except Exception:  # noqa: BLE001 - already stopped or half torn down: nothing left to do
        pass


def _reap_workers(wait_s: float = 30.0) -> None:
    """Terminate and wait for every pebble worker process still alive in this process (after the pool stopped).

    Measured (2026-12-07, two test suites side by side, load 20-40): the pool's join timed out while the replacement of
    a worker killed for a timeout was still being spawned; the process then exited, multiprocessing's exit handler
    unlinked the pool's semaphores, and the late worker printed a ``FileNotFoundError`` traceback from
    multiprocessing/synchronize.py. A worker terminated here dies with SIGTERM's default action (before or after
    its start-up) and prints nothing.
    """
    from pebble.pool.process import WORKERS_NAME

    workers = [p for p in multiprocessing.active_children() if p.name == WORKERS_NAME]
    for proc in workers:
        proc.terminate()
    deadline = time.monotonic() + wait_s
    for proc in workers:
        proc.join(max(0.0, deadline - time.monotonic()))


_shared: MathVerifyPool | None = None
_shared_lock = threading.Lock()


def shared_pool(timeout_s: float = DEFAULT_TIMEOUT_S) -> MathVerifyPool:
    """The process-wide pool, created on first use and closed at exit (like every :class:`MathVerifyPool`).

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
