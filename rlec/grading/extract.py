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
   unbalanced box is no answer.
4. Fallback: the last line of the form ``Answer: ...`` (DAPO-Math's own format; ``Final Answer:``,
   ``**Answer:**`` and a full-width colon accepted).

Abstention: the extracted final answer, after stripping ``\\text{}``-style wrappers, ``$``,
surrounding punctuation and whitespace, lower-casing and mapping curly apostrophes to ``'``, is
one of :data:`ABSTAIN_FORMS` ("i don't know", "i dont know", "i do not know"). The canonical form
is ``I don't know``. An abstention is never graded as an answer.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MAX_TAIL_CHARS = 8192
ABSTAIN_FORMS = frozenset({"i don't know", "i dont know", "i do not know"})
CANONICAL_ABSTAIN = "I don't know"

_BOX_RE = re.compile(r"\\(?:boxed|fbox)\s*\{")
_ANSWER_LINE_RE = re.compile(
    r"^[ \t>*_#-]*(?:final[ \t]+)?answer[ \t*_]*[:：][ \t*_]*(.*?)[ \t*_]*$", re.IGNORECASE | re.MULTILINE
)
_WRAPPER_RE = re.compile(r"^\\(?:text|textbf|textit|mathrm|mathbf|mbox|emph)\s*\{(.*)\}$", re.DOTALL)
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


def last_boxed(text: str) -> str | None:
    """Content of the last top-level ``\\boxed{...}`` / ``\\fbox{...}`` with balanced braces.

    One left-to-right pass with a stack, O(len(text)) even for thousands of unbalanced
    ``\\boxed{`` openings. A box nested inside another box is not top-level; a top-level box
    whose entire content is itself one box is unwrapped.

    Returns:
        The stripped content, or None when there is no complete box.
    """
    starts = {m.end() - 1: m.end() for m in _BOX_RE.finditer(text)}  # '{' position -> content start
    if not starts:
        return None
    stack: list[int] = []  # positions of open '{'
    spans: list[tuple[int, int]] = []  # (content start, content end) of closed boxes, in close order
    i, n = 0, len(text)
    while i < n:
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


def _whole_box(content: str) -> str | None:
    m = _BOX_RE.match(content)
    if not m or not content.endswith("}"):
        return None
    inner = content[m.end() : -1]
    depth = 0
    for ch in inner:  # the inner part must itself be balanced for the outer box to be one box
        depth += (ch == "{") - (ch == "}")
        if depth < 0:
            return None
    return inner.strip() if depth == 0 else None


def answer_line(text: str) -> str | None:
    """The content of the last ``Answer: ...`` line, or None."""
    matches = _ANSWER_LINE_RE.findall(text)
    for value in reversed(matches):
        value = value.strip()
        if value:
            return value
    return None


def strip_wrappers(answer: str) -> str:
    """Remove surrounding ``$``/``\\(\\)`` delimiters and ``\\text{}``-style wrappers."""
    s = answer.strip()
    while True:
        before = s
        if len(s) >= 2 and s[0] == "$" and s[-1] == "$":
            s = s.strip("$").strip()
        if s.startswith("\\(") and s.endswith("\\)"):
            s = s[2:-2].strip()
        m = _WRAPPER_RE.match(s)
        if m:
            s = m.group(1).strip()
        if s == before:
            return s


def is_abstention(answer: str | None) -> bool:
    """True when ``answer`` is ``I don't know`` or an accepted variant (see module docstring)."""
    if answer is None:
        return False
    s = strip_wrappers(answer).translate(_APOSTROPHES).lower()
    s = s.replace("\\", "").replace("~", " ")
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
    return Extraction(answer, source, is_abstention(answer))
