"""Final-answer extraction and abstention detection (pure string work, linear time).

The response format the prompts ask for (``rlec.prompts``):

- reasoning first, then the final answer in ``\\boxed{...}`` as the last boxed expression;
- to abstain, the final answer is ``\\boxed{I don't know}``.

What is read, in order:

1. If the response contains ``</think>``, only the text after the last ``</think>`` counts (a
   Qwen3 thinking block is scratch work; an unclosed ``<think>`` means no final answer).
2. Only the last :data:`MAX_TAIL_CHARS` characters are scanned (the answer is at the end; this
   bounds the work on a runaway response).
3. The content of the last top-level ``\\boxed{...}`` (or ``\\fbox{...}``), braces balanced; a box
   whose whole content is another box is unwrapped (``\\boxed{\\boxed{2}}`` -> ``2``). An
   unbalanced box is no answer. As in TeX, a box without braces takes one token as its argument:
   ``\\boxed 7`` -> ``7``, ``\\boxed\\pi`` -> ``\\pi`` (and ``\\boxed 42`` -> ``4``: what the reader of the
   rendered TeX sees in the box).
4. Fallback: the last line of the form ``Answer: ...`` (DAPO-Math's own format; ``Final Answer:``,
   ``**Answer:**`` and a full-width colon accepted).

Invisible format characters (Unicode category Cf: zero-width space and joiners, the
left-to-right / right-to-left marks and embeddings, the soft hyphen, the byte-order mark) are
removed from the extracted answer (:func:`strip_format_chars`; the gold gets the same), so
``1\u200b200`` and ``\u200f1200\u200e`` read as ``1200``. Visible characters are kept: full-width
and Arabic-Indic digits are digits already.

Abstention: the extracted final answer, read as text (:func:`latex_to_text`: every text-style
command of :data:`TEXT_COMMANDS` unwrapped wherever it stands, braces and ``$`` dropped, LaTeX spaces
such as ``\\ `` and ``~`` read as spaces), without surrounding punctuation and whitespace,
lower-cased and with curly apostrophes mapped to ``'``, is one of :data:`ABSTAIN_FORMS` ("i don't
know", "i dont know", "i do not know"). So ``\\textrm{I don't know}`` and
``\\text{I}\\ \\text{don't}\\ \\text{know}`` abstain. The canonical form is ``I don't know``. An
abstention is never graded as an answer.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

MAX_TAIL_CHARS = 8192
MAX_ABSTAIN_CHARS = 200  # an answer longer than this (LaTeX included) is never read as an abstention
ABSTAIN_FORMS = frozenset({"i don't know", "i dont know", "i do not know"})
CANONICAL_ABSTAIN = "I don't know"
# Commands that only set the font or mark text: their argument is read as plain text.
TEXT_COMMANDS = (
    "text", "textrm", "textsf", "texttt", "textbf", "textit", "textsl", "textsc", "textup", "textmd",
    "textnormal", "mathrm", "mathit", "mathsf", "mathtt", "mathbf", "mathnormal", "operatorname",
    "mbox", "hbox", "emph", "boldsymbol", "bm",
)

_BOX_RE = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])\s*")
_TOKEN_RE = re.compile(r"\\[A-Za-z]+|\\[^A-Za-z\s]|[^\s{}$%\\]")  # one TeX token (a brace-less box's argument)
_ANSWER_LINE_RE = re.compile(
    r"^[ \t>*_#-]*(?:final[ \t]+)?answer[ \t*_]*[:：][ \t*_]*(.*?)[ \t*_]*$", re.IGNORECASE | re.MULTILINE
)
_TEXT_CMD = r"\\(?:" + "|".join(sorted(TEXT_COMMANDS, key=len, reverse=True)) + r")(?![A-Za-z])\*?\s*"
_WRAPPER_RE = re.compile(_TEXT_CMD + r"\{")
_TEXT_CMD_BEFORE_BRACE_RE = re.compile(_TEXT_CMD + r"(?=\{)")
_LATEX_SPACE_RE = re.compile(r"\\(?:[ ,;:!]|quad(?![A-Za-z])|qquad(?![A-Za-z]))|~")
_ESCAPED_RE = re.compile(r"\\([&%$#_])")
_APOSTROPHES = str.maketrans({"\u2019": "'", "\u2018": "'", "\u02bc": "'", "\u00b4": "'", "`": "'"})


@dataclass(frozen=True)
class Extraction:
    """What was read from one response.

    Attributes:
        answer: the final answer string (stripped), or None when none was found.
        source: where it came from: "boxed", "answer_line" or "none".
        abstained: the final answer is an abstention (``I don't know`` or an accepted variant).
    """

    answer: str | None
    source: str
    abstained: bool

    @property
    def format_ok(self) -> bool:
        """True when the answer was given in the requested ``\\boxed{}`` form."""
        return self.source == "boxed"


def final_segment(response: str) -> str:
    """The part of a response that may hold the final answer (after ``</think>``, bounded tail)."""
    if "</think>" in response:
        response = response.rsplit("</think>", 1)[1]
    elif "<think>" in response:
        return ""  # thinking never closed: the response was cut before its answer
    return response[-MAX_TAIL_CHARS:]


def _box_argument(text: str, pos: int) -> tuple[int, int] | None:
    """The (start, end) of a brace-less box's one-token argument at ``pos``, or None."""
    m = _TOKEN_RE.match(text, pos)
    return (m.start(), m.end()) if m else None


def last_boxed(text: str) -> str | None:
    """Content of the last top-level ``\\boxed{...}`` / ``\\fbox{...}`` with balanced braces.

    One left-to-right pass with a stack, O(len(text)) even for thousands of unbalanced
    ``\\boxed{`` openings. A box nested inside another box is not top-level; a top-level box
    whose entire content is itself one box is unwrapped. A box without braces takes one TeX token
    (``\\boxed 7`` -> ``7``).

    Returns:
        The stripped content, or None when there is no complete box.
    """
    starts: dict[int, int] = {}  # '{' position -> content start, for braced boxes
    spans: list[tuple[int, int]] = []  # (content start, content end) of complete boxes
    for m in _BOX_RE.finditer(text):
        if m.end() < len(text) and text[m.end()] == "{":
            starts[m.end()] = m.end() + 1
        else:
            arg = _box_argument(text, m.end())
            if arg is not None:
                spans.append(arg)
    if not starts and not spans:
        return None
    stack: list[int] = []  # positions of open '{'
    i, n = 0, len(text)
    while starts and i < n:
        ch = text[i]
        if ch == "\\":
            i += 2  # a backslash and the next character are one unit: \{ \} are literal braces, \\ a line break
            continue
        if ch == "{":
            stack.append(i)
        elif ch == "}" and stack:
            open_pos = stack.pop()
            if open_pos in starts:
                spans.append((starts[open_pos], i))
        i += 1
    if not spans:
        return None
    # The last top-level box is the one with the greatest end among boxes not inside another.
    top_start, top_end = max(spans, key=lambda s: (s[1], -s[0]))
    content = text[top_start:top_end].strip()
    while True:
        inner = _whole_box(content)
        if inner is None:
            return content
        content = inner


def _balanced_group_end(text: str, open_pos: int) -> int | None:
    """Index of the ``}`` closing the ``{`` at ``open_pos`` (escaped braces skipped), or None."""
    depth, i = 0, open_pos
    while i < len(text):
        ch = text[i]
        if ch == "\\":
            i += 2
            continue
        depth += (ch == "{") - (ch == "}")
        if depth == 0:
            return i
        i += 1
    return None


def _whole_box(content: str) -> str | None:
    m = _BOX_RE.match(content)
    if not m:
        return None
    if m.end() < len(content) and content[m.end()] == "{":
        close = _balanced_group_end(content, m.end())
        return content[m.end() + 1 : close].strip() if close == len(content) - 1 else None
    arg = _box_argument(content, m.end())
    return content[arg[0] :].strip() if arg is not None and arg[1] == len(content) else None


def answer_line(text: str) -> str | None:
    """The content of the last ``Answer: ...`` line, or None."""
    matches = _ANSWER_LINE_RE.findall(text)
    for value in reversed(matches):
        value = value.strip()
        if value:
            return value
    return None


def strip_format_chars(text: str) -> str:
    """``text`` without its invisible format characters (Unicode category Cf), in linear time.

    Zero-width space / (non-)joiner, word joiner, LTR / RTL marks, embeddings, overrides and
    isolates, the soft hyphen and the byte-order mark render as nothing, so a right answer with
    one inside a number (``1\u200b200``) or around it is still that number. Other characters,
    including full-width and Arabic-Indic digits, are kept.
    """
    if text.isascii():
        return text
    return "".join(ch for ch in text if unicodedata.category(ch) != "Cf")


def strip_wrappers(answer: str) -> str:
    """Remove surrounding ``$``/``\\(\\)`` delimiters and a text-style command wrapping the whole answer.

    ``$\\textrm{Paris}$`` -> ``Paris``; ``\\text{a} + \\text{b}`` is left as it is (the first
    command does not wrap the whole answer).
    """
    s = answer.strip()
    while True:
        before = s
        if len(s) >= 2 and s[0] == "$" and s[-1] == "$":
            s = s.strip("$").strip()
        if s.startswith("\\(") and s.endswith("\\)"):
            s = s[2:-2].strip()
        m = _WRAPPER_RE.match(s)
        if m and _balanced_group_end(s, m.end() - 1) == len(s) - 1:
            s = s[m.end() : -1].strip()
        if s == before:
            return s


def latex_to_text(answer: str) -> str:
    """Read a LaTeX answer as plain text (linear time).

    Drops surrounding ``$`` / ``\\(\\)``, every text-style command of :data:`TEXT_COMMANDS` in
    front of a brace group (the group's content stays; the braces stay too, as punctuation), reads
    LaTeX spaces (``\\ ``, ``\\,``, ``~``, ``\\quad``) as one space and escaped characters (``\\&``,
    ``\\%``, ``\\$``, ``\\#``, ``\\_``) as themselves. ``\\textrm{Paris}`` -> ``{Paris}``;
    ``\\text{I}\\ \\text{don't}`` -> ``{I} {don't}``.
    """
    s = strip_wrappers(answer)
    s = _TEXT_CMD_BEFORE_BRACE_RE.sub("", s)
    s = _LATEX_SPACE_RE.sub(" ", s)
    return _ESCAPED_RE.sub(r"\1", s)


def is_abstention(answer: str | None) -> bool:
    """True when ``answer`` is ``I don't know`` or an accepted variant (see module docstring)."""
    if answer is None or len(answer) > MAX_ABSTAIN_CHARS:
        return False
    s = latex_to_text(answer).translate(_APOSTROPHES).lower()
    s = re.sub(r"[{}$\\]", "", s)
    s = re.sub(r"\s+", " ", s).strip(" .!,;:\"'")
    return s in ABSTAIN_FORMS


def extract(response: object) -> Extraction:
    """Read the final answer of one model response.

    Args:
        response: the response text. Anything that is not a ``str`` (None, numbers, bytes) is
            treated as a response without an answer; nothing is ever evaluated.

    Returns:
        An :class:`Extraction`.
    """
    if not isinstance(response, str) or not response:
        return Extraction(None, "none", False)
    segment = final_segment(response)
    answer = last_boxed(segment)
    source = "boxed"
    if answer is None:
        answer, source = answer_line(segment), "answer_line"
    if answer is None:
        return Extraction(None, "none", False)
    answer = strip_format_chars(answer).strip()
    return Extraction(answer, source, is_abstention(answer))
