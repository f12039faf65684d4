"""Math answer checking: a cheap exact path first, math-verify in a warm, killable process pool.

math-verify (Hugging Face, ``math-verify==0.9.0``) decides mathematical equivalence with sympy.
Three of its properties shape this module (FACTS.md, "Graders"):

- its timeouts use ``signal.alarm``, which raises in a non-main thread and cancels any alarm the
  caller set, so it never runs in the caller's process here;
- pathological inputs (``9^{9^{9^9}}``, thousands of nested braces) can run for minutes;
- it costs milliseconds per item, while most answers match as plain strings or numbers.

So :func:`fast_verdict` settles plain string / number answers in the caller (microseconds), and
everything else goes to :class:`MathVerifyPool`: ``pebble.ProcessPool`` workers (spawned, warm,
math-verify imported once) with a hard per-item timeout measured from the moment the item starts
running. A worker that times out or dies is killed and replaced by pebble; the other items of
the batch are unaffected. We use pebble rather than ``concurrent.futures``: the standard pool
cannot kill one stuck task without breaking the whole pool.
"""

from __future__ import annotations

import atexit
import concurrent.futures
import logging
import multiprocessing
import os
import re
import threading
from dataclasses import dataclass
from fractions import Fraction
from typing import Iterable

from rlec.grading.extract import strip_wrappers

DEFAULT_TIMEOUT_S = 5.0
MAX_ANSWER_CHARS = 1000  # a longer "final answer" is not an answer; never sent to sympy

_NUMBER_RE = re.compile(r"^[+-]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?$|^[+-]?\.\d+$")
_FRACTION_RE = re.compile(r"^([+-]?)\\frac\{([+-]?\d+)\}\{([+-]?\d+)\}$|^([+-]?\d+)/(\d+)$")
_ASSIGNMENT_RE = re.compile(r"^[a-zA-Z]=(.+)$")
_SPACING_RE = re.compile(r"\\[,;:! ]|\\left|\\right|\\displaystyle|\s+")


def normalize_math(answer: str) -> str:
    """A light, safe string normalisation used only to detect identical answers.

    Removes ``$``/``\\text{}`` wrappers, LaTeX spacing commands, ``\\left``/``\\right``,
    whitespace, a trailing period, and maps ``\\dfrac``/``\\tfrac`` to ``\\frac``.
    """
    s = strip_wrappers(answer.strip().rstrip("."))
    s = s.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    s = _SPACING_RE.sub("", s)
    return s.rstrip(".")


def _as_number(s: str) -> Fraction | None:
    """A plain rational: 12, -3, 1,000, 0.25, \\frac{3}{4}, -\\frac{3}{4}, 3/4 (normalised input)."""
    if _NUMBER_RE.match(s):
        return Fraction(s.replace(",", ""))
    m = _FRACTION_RE.match(s)
    if m is None:
        return None
    sign, num, den = (m.group(1), m.group(2), m.group(3)) if m.group(2) is not None else ("", m.group(4), m.group(5))
    if int(den) == 0:
        return None
    value = Fraction(int(num), int(den))
    return -value if sign == "-" else value


def fast_verdict(gold: str, pred: str) -> bool | None:
    """Decide the easy cases without math-verify.

    Returns:
        True when the normalised strings are identical or both are plain rationals (integers,
        decimals, thousands separated by commas, ``\\frac{p}{q}``, ``p/q``; a ``\\%`` suffix
        or an ``x =`` prefix on the prediction allowed) of equal value; False when both are
        plain rationals of different value; None when math-verify must decide.
    """
    g, p = normalize_math(gold), normalize_math(pred)
    if g == p and g:
        return True
    m = _ASSIGNMENT_RE.match(p)
    if m and "=" not in g:
        p = m.group(1)  # "x=2" answers gold "2"
    g_num = _as_number(g)
    if g_num is None:
        return None
    percent = p.endswith("\\%") or p.endswith("%")
    p_num = _as_number(p.removesuffix("\\%").removesuffix("%"))
    if p_num is None:
        return None
    # "50\\%" matches gold 50 (the question asked for a percentage) and gold 0.5 (math-verify's reading)
    return g_num == p_num or (percent and g_num == p_num / 100)


def _worker_init() -> None:  # runs once in each pool process
    logging.getLogger("math_verify").setLevel(logging.CRITICAL)  # it logs whole inputs on errors
    import math_verify  # noqa: F401  (warm the sympy / antlr import once)


def math_verify_equal(gold: str, pred: str) -> bool:
    """math-verify's verdict, ``verify(parse(gold), parse(pred))``, both wrapped in ``\\boxed{}``.

    Runs without math-verify's own ``signal.alarm`` timeouts: call it only inside a
    :class:`MathVerifyPool` worker (or a process you may kill).
    """
    from math_verify import parse, verify

    gold_parsed = parse("\\boxed{" + gold + "}", parsing_timeout=None)
    pred_parsed = parse("\\boxed{" + pred + "}", parsing_timeout=None)
    if not gold_parsed or not pred_parsed:
        return False
    return bool(verify(gold_parsed, pred_parsed, timeout_seconds=None))


@dataclass(frozen=True)
class VerifyResult:
    """One math-verify check done in the pool.

    Attributes:
        equal: the verdict (False when timed out or failed).
        timed_out: the item ran past the pool's per-item timeout and its worker was killed.
        error: the exception text when the worker raised or died, else "".
    """

    equal: bool
    timed_out: bool = False
    error: str = ""


class MathVerifyPool:
    """A warm pool of math-verify worker processes with a hard per-item timeout.

    Args:
        max_workers: worker processes (default ``min(4, os.cpu_count())``).
        timeout_s: per-item limit in seconds, from the start of the item in its worker.

    Thread-safe: futures may be submitted from several threads or an event loop.
    """

    def __init__(self, max_workers: int | None = None, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        import pebble

        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be positive, got {timeout_s!r}")
        self.timeout_s = float(timeout_s)
        self.max_workers = max_workers or min(4, os.cpu_count() or 1)
        self._pool = pebble.ProcessPool(
            max_workers=self.max_workers,
            initializer=_worker_init,
            context=multiprocessing.get_context("spawn"),  # safe from threaded parents (Ray, torch)
        )
        self._health_check()

    def _health_check(self) -> None:
        """Warm every worker (sympy's first call is slow) and fail loudly if workers cannot run
        at all (else every math item would silently grade incorrect)."""
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
        """Schedule one check; the future's result is a :class:`VerifyResult` (never raises)."""
        inner = self._pool.schedule(math_verify_equal, args=(gold, pred), timeout=self.timeout_s)
        outer: concurrent.futures.Future = concurrent.futures.Future()

        def _done(f: concurrent.futures.Future) -> None:
            try:
                outer.set_result(VerifyResult(bool(f.result())))
            except concurrent.futures.TimeoutError:
                outer.set_result(VerifyResult(False, timed_out=True, error=f"timeout after {self.timeout_s:g}s"))
            except BaseException as exc:  # a worker crash (pebble.ProcessExpired) or a math-verify bug
                outer.set_result(VerifyResult(False, error=f"{type(exc).__name__}: {exc}"[:500]))

        inner.add_done_callback(_done)
        return outer

    def verify_many(self, pairs: Iterable[tuple[str, str]]) -> list[VerifyResult]:
        """Check many (gold, pred) pairs at once, in order; a stuck item costs only its timeout."""
        futures = [self.submit(g, p) for g, p in pairs]
        return [f.result() for f in futures]

    def close(self) -> None:
        """Stop the workers: let running items finish for up to one timeout, then kill."""
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

    A call with a different ``timeout_s`` replaces the pool.
    """
    global _shared
    with _shared_lock:
        if _shared is None or _shared.timeout_s != float(timeout_s):
            if _shared is not None:
                _shared.close()
            _shared = MathVerifyPool(timeout_s=timeout_s)
        return _shared


@atexit.register
def _close_shared() -> None:
    if _shared is not None:
        _shared.close()
