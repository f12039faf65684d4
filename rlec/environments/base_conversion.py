"""Base conversion: rewrite a number given in one base (2-16) in another.

Difficulty d: the number has 5 + 2d bits (d = 0: 16..31; d = 10: about 7 decimal digits). The two
bases are distinct, drawn from 2..16; digits above 9 are the letters A-F. The answer is the
number in the target base (case, spaces, a leading ``0x``/``0b`` and a ``_{base}`` subscript are
ignored); the score is 1 for the exact digit string (leading zeros allowed), else 0.
"""

from __future__ import annotations

import random
import re
from typing import Any

from rlec.environments.base import Environment, Problem
from rlec.grading.extract import strip_wrappers

DIGITS = "0123456789ABCDEF"
_SUBSCRIPT = re.compile(r"_\{?\d+\}?$|\(\d+\)$")


def to_base(value: int, base: int) -> str:
    """``value`` (>= 0) written in ``base`` (2..16) with digits 0-9A-F."""
    if value == 0:
        return "0"
    out = []
    while value:
        value, digit = divmod(value, base)
        out.append(DIGITS[digit])
    return "".join(reversed(out))


def digit_names(base: int) -> str:
    """How the prompt names the digits of ``base``: ``0-9 and A-C`` or ``0-7``."""
    if base <= 10:
        return f"0-{base - 1}"
    return f"0-9 and {DIGITS[10]}-{DIGITS[base - 1]}" if base > 11 else "0-9 and A"


class BaseConversion(Environment):
    """Convert a (5 + 2d)-bit number between two bases in 2..16."""

    name = "base_conversion"
    difficulty_scale = "the number has 5 + 2d bits"
    max_difficulty = 40

    def _generate(self, rng: random.Random, difficulty: int) -> tuple[str, str, dict[str, Any]]:
        bits = 5 + 2 * difficulty
        value = rng.randrange(2 ** (bits - 1), 2**bits)
        source, target = rng.sample(range(2, 17), 2)
        written = to_base(value, source)
        prompt = (f"Convert the base-{source} number {written} to base {target}. In base {target} use the digits "
                  f"{digit_names(target)}. Give only the digits of the result.")
        answer = to_base(value, target)
        return prompt, answer, {"value": value, "source_base": source, "target_base": target, "written": written}

    def check(self, answer: str, problem: Problem) -> tuple[float, str]:
        text = strip_wrappers(answer).replace("\\text", "").replace("\\mathrm", "")
        text = re.sub(r"[\s{}]", "", _SUBSCRIPT.sub("", text)).upper()
        target = int(problem.data["target_base"])
        if len(text) > 2 and text[:2] == {16: "0X", 8: "0O", 2: "0B"}.get(target):
            text = text[2:]
        if not text or any(ch not in DIGITS[:target] for ch in text):
            return 0.0, "unparsable"
        return (1.0, "correct") if int(text, target) == int(problem.data["value"]) else (0.0, "wrong")
