"""How rlec reads the form of a math answer: normalisation, its conventions, and the fast verdict.

Pure string work in the caller's process (microseconds); :func:`fast_verdict` settles the plain
string / number answers and says None when math-verify must decide. The conventions below hold
on both paths (the fast path here and math-verify in :mod:`rlec.grading.math`), each tested both ways
in ``tests/grading/test_math.py``:

- **Thousands vs lists.** A comma is a thousands separator only inside one grouped number written
  without spacing (``12,345``, ``1{,}000``, ``1,\\!000``): ``1,100`` is 1100. A comma followed by a
  space (or a LaTeX space) separates list items: ``1, 100`` is the two numbers 1 and 100, never
  1100. A list of two or more numbers never equals one number. (math-verify reads both forms the
  same way: ``1,100`` -> 1100, ``1, 100`` -> {1, 100}.)
- **Percent: the sign is a unit.** A trailing ``\\%`` (or ``%``, ``\\text{\\%}``, ``\\text{percent}``)
  names the unit and is dropped before comparing: ``35\\%`` equals ``35``, ``0.5\\%`` equals
  ``0.5`` and not ``0.005``, ``50\\%`` does not equal ``0.5``. When the *gold* carries the sign, the
  prediction may also give the fraction: gold ``35\\%`` accepts ``35``, ``35\\%`` and ``0.35`` (not
  ``0.35\\%``). Reason: DAPO-Math-17k rewrote every gold answer as an integer, so a percent
  question's gold is the number of percent (gold ``35``), and a prediction's ``\\%`` names the unit
  the question asked for; reading ``x\\%`` as ``x/100`` would mark ``35\\%`` wrong for gold ``35``.
- **Equations for a non-equation gold.** An assignment (left side a variable, ``x_1``, ``\\theta``,
  ``f(x)`` or a tuple of variables: ``x = 7``) is compared by its right-hand side; any other
  equation must have every side equal to the gold: ``2 + 5 = 7`` answers 7, ``42 = 7`` does not.
- **Scientific notation.** A decimal number directly followed by ``e`` or ``E`` and an integer is
  scientific notation: ``1.2e3`` = ``1.2E3`` = ``1.2 \\times 10^{3}`` = 1200, ``5e-3`` = 0.005, on
  both paths (math-verify alone reads ``1.2e3`` as 1.2 x Euler's e x 3 and ``1.2E3`` as 1200).
  Euler's number is ``e`` anywhere else: ``2e``, ``e^{2}``, ``3e^{x}``, ``\\mathrm{e}``.
- **Exact values compare exactly.** When the gold and the prediction are both exact rationals
  (integers, fractions, integer powers: no decimal point, no variable), they are equal only when
  equal as rationals: ``\\frac{1}{3^{60}}`` != ``\\frac{1}{3^{59}}`` (math-verify's numeric tolerance
  would call them equal). A decimal on either side is compared by math-verify, with its tolerance.
- **A malformed command does not leave a number behind.** math-verify parses the longest valid
  prefix of a malformed answer: ``5\\sqrt(3)``, ``7\\foo{3}`` and ``3\\log(2`` would read as 5, 7
  and 3. A prediction that is a number followed by a command, and that parses to exactly that
  number, is incorrect (unit and spacing commands such as ``\\text{cm}`` and ``\\quad`` excepted).
- **The imaginary unit.** ``i`` is read as math-verify reads it, as a variable: ``i^2`` is not -1
  and ``\\sqrt{-1}`` is not ``i``; ``1+2i`` equals ``2i+1`` by form. An answer states its value.
- **Invisible characters** (Unicode category Cf: zero-width spaces, direction marks) are removed
  from both answers before grading (:func:`rlec.grading.extract.strip_format_chars`); full-width
  and Arabic-Indic digits are digits (``１２００`` = ``١٢٠٠`` = 1200).
- **Intervals and inequalities** in one variable are the same answer when they describe the same set
  (``x < 3`` and ``(-\\infty, 3)``, ``x \\ge 2`` and ``[2, \\infty)``), in either role; this is
  decided by math-verify with ``allow_set_relation_comp=True``.
"""

from __future__ import annotations

import re
from fractions import Fraction

from rlec.grading.extract import strip_wrappers

MAX_NUMBER_CHARS = 400  # a longer "number" is left to the hostile-input screen / math-verify

_SPACING_RE = re.compile(r"\\[,;:! ]|\\(?:left|right|displaystyle|quad|qquad)(?![A-Za-z])|~|\s+")
_LATEX_THOUSANDS_RE = re.compile(r"(?<=\d)(?:\{,\}|,\\!)(?=\d{3}(?!\d))")
# one grouped number, optionally with an assignment prefix and a percent suffix: "1,100", "x = 12,345\%"
_GROUPED_NUMBER_RE = re.compile(r"(?:[A-Za-z]\s*=\s*)?[+-]?\d{1,3}(?:,\d{3})+(?:\.\d+)?\s*(?:\\?%)?")
_PERCENT_RE = re.compile(r"(?:\\%|%|\\text\s*\{\s*(?:\\?%|percent)\s*\})$")
_TRAILING_SPACE_RE = re.compile(r"(?:\\[,;: ]|~)+$")
_SPACED_COMMA_RE = re.compile(r",(?:\s|\\[ ,;:]|~)")
_EXPONENT = r"(?:[eE][+-]?\d{1,4})?"  # scientific notation: 1.2e3 = 1200 (module docstring)
_NUMBER_RE = re.compile(rf"^[+-]?(?:\d{{1,3}}(?:\{{,\}}\d{{3}})+|\d+)(?:\.\d+)?{_EXPONENT}$|^[+-]?\.\d+{_EXPONENT}$")
# a number in E-notation standing alone (not part of a name or a longer number): rewritten for math-verify
_E_NOTATION_RE = re.compile(r"(?<![A-Za-z\\\d.])(\d+(?:\.\d+)?|\.\d+)[eE]([+-]?\d{1,4})(?![\d.A-Za-z])")
_FRACTION_RE = re.compile(r"^([+-]?)\\frac\{([+-]?\d+)\}\{([+-]?\d+)\}$|^([+-]?\d+)/(\d+)$")
_RADICAL_RE = re.compile(r"^([+-]?)(\d+)?(?:\\cdot|\\times|\*)?\\sqrt\{(\d+)\}$|^([+-]?)\\frac\{(\d+)?\\sqrt\{(\d+)\}\}\{(\d+)\}$")
MAX_RADICAND = 10**6  # square factors are found by trial division: at most 1,000 steps
_VAR = r"(?:[A-Za-z]|\\[A-Za-z]+)(?:_(?:\w|\{\w+\}))?"
_ASSIGNMENT_LHS_RE = re.compile(rf"^(?:{_VAR}(?:\({_VAR}(?:,{_VAR})*\))?|\({_VAR}(?:,{_VAR})+\))$")

__all__ = ["e_notation_as_power", "fast_verdict", "math_verify_inputs", "normalize_math", "split_percent"]


def normalize_math(answer: str) -> str:
    """A light, safe string normalisation used only to detect identical answers and plain numbers.

    Removes ``$``/``\\text{}`` wrappers, LaTeX spacing commands, ``\\left``/``\\right``, whitespace
    and a trailing period, maps ``\\dfrac``/``\\tfrac`` to ``\\frac``, and writes a thousands
    separator as ``{,}`` so that it stays distinct from a list comma (``1,100`` -> ``1{,}100``,
    ``1, 100`` -> ``1,100``).
    """
    s = strip_wrappers(answer.strip().rstrip("."))
    s = s.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    s = _LATEX_THOUSANDS_RE.sub("{,}", s)
    if _GROUPED_NUMBER_RE.fullmatch(s):
        s = s.replace(",", "{,}")
    s = _SPACING_RE.sub("", s)
    return s.rstrip(".")


def split_percent(answer: str) -> tuple[str, bool]:
    """``(answer without a trailing percent sign, whether it had one)``: ``35\\%`` -> ``("35", True)``."""
    s = answer.rstrip()
    m = _PERCENT_RE.search(s)
    if m is None:
        return answer, False
    body = s[: m.start()].rstrip()
    body = _TRAILING_SPACE_RE.sub("", body).rstrip() if body.endswith(("\\,", "\\;", "\\:", "\\ ", "~")) else body
    return (body, True) if body else (answer, False)


def _as_number(s: str) -> Fraction | None:
    """A plain rational: 12, -3, 1{,}000, 0.25, \\frac{3}{4}, -\\frac{3}{4}, 3/4 (normalised input)."""
    if len(s) > MAX_NUMBER_CHARS:
        return None
    if _NUMBER_RE.match(s):
        return Fraction(s.replace("{,}", ""))
    m = _FRACTION_RE.match(s)
    if m is None:
        return None
    sign, num, den = (m.group(1), m.group(2), m.group(3)) if m.group(2) is not None else ("", m.group(4), m.group(5))
    if int(den) == 0:
        return None
    value = Fraction(int(num), int(den))
    return -value if sign == "-" else value


def _squarefree(m: int) -> tuple[int, int]:
    """``(k, r)`` with ``m = k**2 * r`` and r squarefree (m >= 0)."""
    k, d = 1, 2
    while d * d <= m:
        while m % (d * d) == 0:
            m //= d * d
            k *= d
        d += 1
    return k, m


def _as_exact(s: str) -> tuple[Fraction, int] | None:
    """A plain rational or ``c\\sqrt{m}`` / ``\\frac{c\\sqrt{m}}{d}`` (integer c, m, d) in the canonical form
    ``(coefficient, squarefree radicand)``: ``2\\sqrt{3}`` and ``\\sqrt{12}`` both give (2, 3); ``4`` gives
    (4, 1). Equal values have equal forms. None for anything else (normalised input)."""
    number = _as_number(s)
    if number is not None:
        return number, 1
    m = _RADICAL_RE.match(s)
    if m is None:
        return None
    if m.group(3) is not None:
        sign, coefficient, radicand, denominator = m.group(1), m.group(2), m.group(3), "1"
    else:
        sign, coefficient, radicand, denominator = m.group(4), m.group(5), m.group(6), m.group(7)
    if int(radicand) > MAX_RADICAND or int(denominator) == 0:
        return None
    k, r = _squarefree(int(radicand))
    value = Fraction(int(coefficient or 1) * k, int(denominator)) * (-1 if sign == "-" else 1)
    return (Fraction(0), 1) if value == 0 or r == 0 else (value, r)


def _as_tuple(s: str) -> tuple[str, tuple[tuple[Fraction, int], ...]] | None:
    """``("()", elements)`` for a bracketed list of plain rationals / radicals such as ``(1,-2)`` or
    ``[\\sqrt{2},3)``; None when an element is anything else, or a 3-digit element after a number
    makes ``(1,000)`` ambiguous with a thousands separator (normalised input)."""
    if len(s) < 3 or s[0] not in "([" or s[-1] not in ")]" or any(ch in s[1:-1] for ch in "()[]"):
        return None
    parts = s[1:-1].split(",")
    if any(re.fullmatch(r"\d{3}", part) for part in parts[1:]):
        return None
    elements = [_as_exact(part) for part in parts]
    if any(e is None for e in elements):
        return None
    return s[0] + s[-1], tuple(elements)  # type: ignore[arg-type]


def _is_number_list(s: str) -> bool:
    """Two or more plain numbers separated by commas (normalised input, no brackets)."""
    items = s.split(",")
    return len(items) >= 2 and all(_as_number(item) is not None for item in items)


def _value_verdict(g: str, p: str, g_spaced: bool = False, p_spaced: bool = False) -> bool | None:
    """Verdict on two normalised values without ``=``, under the percent convention.

    ``g_spaced`` / ``p_spaced``: the raw answer has a comma followed by a space, so its commas
    are list separators for sure (an unspaced ``0,5`` may be a decimal comma: math-verify decides).
    """
    g_body, g_pct = split_percent(g)
    p_body, p_pct = split_percent(p)
    if g_body == p_body and g_body:
        return True
    g_num, p_num = _as_number(g_body), _as_number(p_body)
    if g_num is not None and p_num is not None:
        return p_num == g_num or (g_pct and not p_pct and p_num == g_num / 100)
    if (g_num is not None and p_spaced and _is_number_list(p_body)) or (
        p_num is not None and g_spaced and _is_number_list(g_body)
    ):
        return False  # a list of two or more numbers is not one number
    g_exact, p_exact = _as_exact(g_body), _as_exact(p_body)
    if g_exact is not None and p_exact is not None:  # radicals: c\sqrt{m} in canonical form
        fraction = (g_exact[0] / 100, g_exact[1])
        return p_exact == g_exact or (g_pct and not p_pct and p_exact == fraction)
    g_tuple, p_tuple = _as_tuple(g_body), _as_tuple(p_body)
    if g_tuple is not None and p_tuple is not None and g_tuple[0] == p_tuple[0]:
        return g_tuple == p_tuple  # same brackets: equal element by element, in order
    return None


def _sides(s: str) -> list[str] | None:
    """The sides of an equation ``a=b(=c...)``, or None when ``=`` is part of another relation."""
    if any(op in s for op in ("<=", ">=", "!=", ":=", "==", "\\le", "\\ge", "\\ne")):
        return None
    sides = s.split("=")
    return sides if all(sides) else None


def fast_verdict(gold: str, pred: str) -> bool | None:
    """Decide the easy cases without math-verify, under the conventions of the module docstring.

    Args:
        gold: the gold answer (str, non-empty).
        pred: the extracted final answer (str).

    Returns:
        True when the normalised strings are identical, or both are plain rationals (integers,
        decimals, grouped thousands, ``\\frac{p}{q}``, ``p/q``) or radicals (``c\\sqrt{m}``,
        ``\\frac{c\\sqrt{m}}{d}``) of equal value, or tuples / intervals of those with the same
        brackets and equal elements in order; False when such values differ, or for one number
        against a list of numbers; None when math-verify must decide. Never raises on any str input.
    """
    g, p = normalize_math(gold), normalize_math(pred)
    spaced = (_SPACED_COMMA_RE.search(gold) is not None, _SPACED_COMMA_RE.search(pred) is not None)
    if not p:
        return False  # an empty box answers nothing
    if g == p and g:
        return True
    if "=" in p and "=" not in g:
        sides = _sides(p)
        if sides is None:
            return None
        values = sides[1:] if _ASSIGNMENT_LHS_RE.match(sides[0]) else sides
        verdicts = [_value_verdict(g, v, *spaced) for v in values]
        if False in verdicts:
            return False
        return True if all(verdicts) else None
    if "=" in g and "=" not in p:
        sides = _sides(g)
        if sides is None or len(sides) != 2 or not _ASSIGNMENT_LHS_RE.match(sides[0]):
            return None
        return _value_verdict(sides[1], p, *spaced)  # gold "x = 2": "2" answers it
    return _value_verdict(g, p, *spaced)


def math_verify_inputs(gold: str, pred: str) -> tuple[tuple[str, ...], str]:
    """What math-verify compares, with the percent convention applied: ``(gold alternatives, pred)``.

    Both sides lose their wrappers and a trailing percent sign; a gold that had one also offers its
    fraction (``35\\%`` -> ``("35", "\\frac{35}{100}")``) unless the prediction has the sign too.
    """
    g_body, g_pct = split_percent(strip_wrappers(gold))
    p_body, p_pct = split_percent(strip_wrappers(pred))
    g_body, p_body = e_notation_as_power(g_body), e_notation_as_power(p_body)
    golds = (g_body, f"\\frac{{{g_body}}}{{100}}") if g_pct and not p_pct else (g_body,)
    return golds, p_body


def e_notation_as_power(answer: str) -> str:
    """Scientific E-notation written as a power of ten, for math-verify: ``1.2e3`` -> ``1.2\\times 10^{3}``.

    Only a decimal number directly followed by ``e``/``E`` and an integer of at most 4 digits, not
    part of a name or a longer number, is rewritten (module docstring); ``2e`` and ``e^{2}`` stay.
    """
    return _E_NOTATION_RE.sub(lambda m: f"{m.group(1)}\\times 10^{{{m.group(2)}}}", answer)
