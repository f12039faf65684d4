"""The hostile-input screen: answers that would make math-verify run for seconds, decided in microseconds.

math-verify parses LaTeX with an ANTLR grammar and evaluates with sympy. Both have inputs whose
cost explodes (measured on the shared 2-core box with a warm worker, 2026-11-30; CPU seconds for the
nesting rows, wall seconds under load for the others):

==========================================  ==============================================
input                                       math-verify cost
==========================================  ==============================================
nesting: ``((((((((((1))))))))))``          0.06 s at depth 1, 0.6 s at 8, 1.1 s at 10, timeout
                                            (5 s) at 20; braces / brackets the same; 16 nested
                                            ``\\frac``: 4.5 s
``9^{9^{9^9}}``, ``3^{3^{3^3}}``            never returns (sympy computes the integer exactly)
``10^{10^{7}}``, ``1000000!``               timeout; ``10^{10^6}`` 1.1 s, ``50000!`` 0.3 s
``\\binom{100000}{50000}``                   2.7 s
``x^{10^{100}}``, ``\\int_0^1 x^{1000000}dx`` 2.8 s / timeout (expansion of huge powers)
``\\prod_{k=1}^{1000000} k``                 timeout (the product is computed term by term)
200 ``x^{k}`` terms (1,489 characters)      timeout; 100 terms (600 tokens) 5.2 s, 50 terms 0.7 s
==========================================  ==============================================

while every answer of the reward benchmark's normal items and of the shipped DAPO sample is far
from each limit below. :func:`screen` rejects, before math-verify, an answer with

- more than :data:`MAX_ANSWER_CHARS` characters or :data:`MAX_TOKENS` LaTeX tokens (a final answer
  is short; the rest of a response is reasoning);
- brackets (``{ ( [``, together) nested more than :data:`MAX_NESTING` deep;
- powers nested more than :data:`MAX_POWER_NESTING` deep (``e^{e^{e^{e^{e}}}}``);
- an exponent above :data:`MAX_EXPONENT` in size on a base other than 0 / 1 / -1 (``x^{10^{6}}``);
- a number (as sympy would compute it exactly) of more than :data:`MAX_DIGITS` digits
  (``99999^{30000}``, ``30000!``, ``\\binom{100000}{50000}``; ``3^{3^{3}}`` = 3^27 is fine);
- a ``\\sum`` / ``\\prod`` whose upper bound is above :data:`MAX_BIG_OPERATOR_BOUND`.

Sizes are bounded from above in log10 space by a small recursive-descent reader of the LaTeX
(numbers, ``+ - \\cdot \\times /``, juxtaposition, ``^``, ``!``, ``\\frac``, ``\\binom``,
``\\sqrt``, groups; anything else is symbolic), linear in the answer's length. A screened answer
is graded incorrect: the model is asked for a final answer, and a number with more than 100,000
digits, or an expression nested more than eight deep, is not one.
"""

from __future__ import annotations

import math
import re

MAX_ANSWER_CHARS = 1000
MAX_TOKENS = 200  # numbers, commands, symbols; spaces and spacing commands not counted
MAX_NESTING = 8
MAX_POWER_NESTING = 3
MAX_EXPONENT = 1e5
MAX_DIGITS = 1e5
MAX_BIG_OPERATOR_BOUND = 1e4

_TOKEN_RE = re.compile(r"\\[A-Za-z]+|\\.|\d+(?:\.\d+)?|\.\d+|\s+|.", re.DOTALL)
_SKIP = frozenset({"\\left", "\\right", "\\displaystyle", "\\,", "\\;", "\\:", "\\!", "\\ ", "\\quad", "\\qquad", "~"})
_OPEN = {"{": "}", "(": ")", "[": "]", "\\{": "\\}", "\\lbrace": "\\rbrace", "\\langle": "\\rangle"}
_CLOSE = frozenset({"}", ")", "]", "\\}", "\\rbrace", "\\rangle"})
_ADD = frozenset({"+", "-", "\\pm", "\\mp"})
_MUL = frozenset({"*", "\\cdot", "\\times", "/", "\\div"})
_FRACS = frozenset({"\\frac", "\\dfrac", "\\tfrac", "\\cfrac"})
_BINOMS = frozenset({"\\binom", "\\dbinom", "\\tbinom", "\\choose"})
_BIG_OPERATORS = frozenset({"\\sum", "\\prod"})
_LOG10_2 = math.log10(2)

__all__ = ["MAX_ANSWER_CHARS", "MAX_NESTING", "MAX_TOKENS", "nesting_depth", "screen"]


class _Hostile(Exception):
    """Raised inside the reader with the rule an answer breaks."""


def nesting_depth(answer: str) -> int:
    """Greatest depth of ``{ ( [`` nesting, all kinds together (an interval's ``[a, b)`` counts once)."""
    depth = deepest = 0
    i = 0
    while i < len(answer):
        ch = answer[i]
        if ch == "\\":
            i += 2  # an escaped brace \{ is a set's brace: it nests like the others, counted below
            if answer[i - 1 : i] in ("{", "}"):
                depth = depth + 1 if answer[i - 1] == "{" else max(0, depth - 1)
                deepest = max(deepest, depth)
            continue
        if ch in "{([":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "})]":
            depth = max(0, depth - 1)
        i += 1
    return deepest


class _Reader:
    """Upper bounds of log10 of the size of every numeric subexpression (None = symbolic)."""

    def __init__(self, answer: str) -> None:
        self.tokens = [t for t in _TOKEN_RE.findall(answer) if not t.isspace() and t not in _SKIP]
        self.i = 0
        self.power_depth = 0

    def peek(self) -> str | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def take(self) -> str | None:
        tok = self.peek()
        self.i += tok is not None
        return tok

    def expression(self, close: str | None = None) -> float | None:
        """Terms up to ``close`` (or the end); separators (``, = < &`` ...) make it symbolic."""
        value: float | None = None
        first, symbolic = True, False
        while (tok := self.peek()) is not None and tok != close:
            if tok in _CLOSE:  # a mismatched closer (an interval's ")"): it ends this group too
                break
            if tok in _ADD:
                self.take()
                continue
            term = self.term(close)
            if self.i < len(self.tokens) and self.peek() not in _ADD and self.peek() != close and self.peek() not in _CLOSE:
                self.take()  # a separator: ',', '=', '<', '&', '\\', ...
                symbolic = True
            if term is None:
                symbolic = True
            elif not first and value is not None:
                value = max(value, term) + _LOG10_2
            else:
                value = term
            first = False
        return None if symbolic else value

    def term(self, close: str | None) -> float | None:
        value = self.postfix()
        while (tok := self.peek()) is not None and tok != close and tok not in _CLOSE and tok not in _ADD:
            if tok in _MUL:
                self.take()
            elif not self._starts_atom(tok):
                break
            right = self.postfix()
            value = None if value is None or right is None else value + right
        return value

    @staticmethod
    def _starts_atom(tok: str) -> bool:
        return tok in _OPEN or tok[0].isdigit() or tok[0] == "." or tok[0].isalpha() or (tok[0] == "\\" and tok[1:2].isalpha())

    def postfix(self) -> float | None:
        big_operator = self.peek() in _BIG_OPERATORS
        value = self.atom()
        while (tok := self.peek()) in ("^", "_", "!", "'"):
            self.take()
            if tok == "_":
                self.argument()
            elif tok == "'":
                value = None
            elif tok == "!":
                value = self._factorial(value)
            else:
                exponent = self.exponent_chain()
                if big_operator:
                    if exponent is not None and exponent > math.log10(MAX_BIG_OPERATOR_BOUND):
                        raise _Hostile("big_sum")
                    value = None
                else:
                    value = self._power(value, exponent)
        return value

    def exponent_chain(self) -> float | None:
        """The exponent after a ``^``; ``a^b^c`` is bounded as the tower ``a^(b^c)``."""
        exponents = []
        while True:
            self.power_depth += 1
            if self.power_depth > MAX_POWER_NESTING:
                raise _Hostile("power_tower")
            exponents.append(self.argument())
            if self.peek() != "^":
                break
            self.take()
        self.power_depth -= len(exponents)
        value = exponents[-1]
        for base in reversed(exponents[:-1]):
            value = self._power(base, value)
        return value

    @staticmethod
    def _power(base: float | None, exponent: float | None) -> float | None:
        if exponent is None:
            return None
        if base == 0.0:  # 0, 1 or -1: any power is cheap
            return 0.0
        if exponent > math.log10(MAX_EXPONENT) + 1e-9:
            raise _Hostile("big_exponent")
        if base is None:
            return None
        digits = 10**exponent * max(base, _LOG10_2)
        if digits > MAX_DIGITS * (1 + 1e-9):
            raise _Hostile("big_number")
        return digits

    @staticmethod
    def _factorial(n: float | None) -> float | None:
        if n is None:
            return None
        if n > 7:
            raise _Hostile("big_number")
        digits = 10**n * max(n, _LOG10_2)
        if digits > MAX_DIGITS:
            raise _Hostile("big_number")
        return digits

    def argument(self) -> float | None:
        """A command's argument: one group or one token (a number's digits all count)."""
        return self.atom()

    def atom(self) -> float | None:
        tok = self.take()
        if tok is None:
            return None
        if tok in _OPEN:
            return self.expression_then(_OPEN[tok])
        if tok[0].isdigit() or tok[0] == ".":
            digits = tok.replace(".", "").lstrip("0")
            if "." in tok:
                return float(len(digits))  # a decimal is a rational: count all its digits
            return math.log10(int(digits)) if digits and len(digits) < 300 else float(len(digits))
        if tok in _FRACS:
            num, den = self.argument(), self.argument()
            return None if num is None or den is None else num + den
        if tok in _BINOMS:
            n, k = self.argument(), self.argument()
            if n is None or k is None:
                return None
            digits = 10 ** min(n, k, 7) * max(n, _LOG10_2)
            if digits > MAX_DIGITS:
                raise _Hostile("big_number")
            return digits
        if tok == "\\sqrt":
            if self.peek() == "[":
                self.take()
                self.expression_then("]")
            return self.argument()
        if tok[0] == "\\" and tok[1:2].isalpha():
            while self.peek() == "{":  # a command's brace arguments: read (for what they hide), symbolic
                self.take()
                self.expression_then("}")
            return None
        return None  # a letter, or a stray symbol

    def expression_then(self, close: str) -> float | None:
        value = self.expression(close)
        if self.peek() == close or self.peek() in _CLOSE:
            self.take()
        return value


def screen(answer: str) -> str | None:
    """The rule a (gold or predicted) math answer breaks, or None when math-verify may see it.

    Args:
        answer: the extracted final answer (any str; linear time, never raises).

    Returns:
        None, or one of "length", "nesting", "power_tower", "big_exponent", "big_number",
        "big_sum" (see the module docstring for the limits and their measurements). When the reader
        cannot bound an answer (never seen), None: math-verify's hard timeout still applies.
    """
    if len(answer) > MAX_ANSWER_CHARS:
        return "length"
    if nesting_depth(answer) > MAX_NESTING:
        return "nesting"
    reader = _Reader(answer)
    if len(reader.tokens) > MAX_TOKENS:
        return "length"
    try:
        while reader.peek() is not None:  # a stray closer ends an expression early: read on after it
            reader.expression()
            reader.take()
    except _Hostile as exc:
        return str(exc)
    except (RecursionError, ValueError, OverflowError):  # not seen on any input; math-verify's timeout still holds
        return None
    return None
