"""Knights and Knaves: knights always tell the truth, knaves always lie; who is which?

Each of n islanders makes one or more statements about the kinds of islanders (itself included).
A knight's statements are all true, a knave's all false. The generator draws the kinds, then for
each speaker a statement of a random form about random islanders, replaced by its negation form
when its truth value does not fit the speaker. Statements are added (one at a time, to a random
speaker) until exactly one assignment of kinds is consistent, checked by brute force over all
2^n assignments.

Forms (each with its negation): "X is a knight" / "X is a knave"; "X and Y are both knights" /
"at least one of X and Y is a knave"; "at least one of X and Y is a knight" / "X and Y are both
knaves"; "X and Y are of the same kind" / "X and Y are of different kinds".

Difficulty d: n = 2 + d islanders (at most 12 at d = 10). The answer gives every islander's kind,
by name (``Alice: knight, Bob: knave``) or in the order of the names (``knight, knave``); the
score is the share of islanders right (1 when all are).
"""

from __future__ import annotations

import itertools
import random
import re
from typing import Any, Sequence

from rlec.environments.base import MAX_ANSWER_CHARS, Environment, Problem
from rlec.grading.extract import strip_wrappers

NAMES = ("Alice", "Bob", "Carol", "Dave", "Erin", "Frank", "Grace", "Heidi", "Ivan", "Judy", "Mallory", "Oscar")
# form: (text, negation, arity); a statement is [form, i, j] (j unused for arity 1)
FORMS: dict[str, tuple[str, str, int]] = {
    "knight": ("{a} is a knight", "knave", 1),
    "knave": ("{a} is a knave", "knight", 1),
    "both_knights": ("{a} and {b} are both knights", "some_knave", 2),
    "some_knave": ("at least one of {a} and {b} is a knave", "both_knights", 2),
    "some_knight": ("at least one of {a} and {b} is a knight", "both_knaves", 2),
    "both_knaves": ("{a} and {b} are both knaves", "some_knight", 2),
    "same": ("{a} and {b} are of the same kind", "different", 2),
    "different": ("{a} and {b} are of different kinds", "same", 2),
}
_KIND = re.compile(r"\b(knights?|knaves?)\b", re.IGNORECASE)
MAX_STATEMENTS_PER_PERSON = 4


def holds(form: str, a: bool, b: bool) -> bool:
    """Truth of a statement given the kinds of its subjects (True = knight)."""
    return {
        "knight": a, "knave": not a, "both_knights": a and b, "some_knave": not (a and b),
        "some_knight": a or b, "both_knaves": not (a or b), "same": a == b, "different": a != b,
    }[form]


def consistent(kinds: Sequence[bool], statements: Sequence[Sequence[list]]) -> bool:
    """Every knight's statements are true and every knave's are false."""
    return all(holds(f, kinds[i], kinds[j]) == kinds[speaker]
               for speaker, said in enumerate(statements) for f, i, j in said)


def solutions(n: int, statements: Sequence[Sequence[list]], limit: int = 2) -> list[tuple[bool, ...]]:
    """Up to ``limit`` consistent assignments (brute force over 2^n)."""
    found = []
    for kinds in itertools.product((True, False), repeat=n):
        if consistent(kinds, statements):
            found.append(kinds)
            if len(found) >= limit:
                break
    return found


def render(form: str, a: str, b: str, speaker: str) -> str:
    """The statement's sentence, with "I"/"me" where the speaker talks about itself."""
    text, _, arity = FORMS[form]
    if arity == 1:
        sentence = f"I am a {form}" if a == speaker else text.format(a=a)
    elif speaker in (a, b):
        other = b if a == speaker else a
        sentence = text.replace("{a} and {b}", f"{other} and me" if form.startswith("some_") else f"{other} and I")
    else:
        sentence = text.format(a=a, b=b)
    return sentence[0].upper() + sentence[1:]


class KnightsKnaves(Environment):
    """Decide who is a knight and who is a knave among n = 2 + d islanders."""

    name = "knights_knaves"
    difficulty_scale = "n = 2 + d islanders (at most 12)"
    max_difficulty = 10

    def _draw(self, rng: random.Random, kinds: Sequence[bool], speaker: int) -> list:
        n = len(kinds)
        form = rng.choice(sorted(FORMS))
        if FORMS[form][2] == 1:
            i = j = rng.randrange(n)
        else:
            i, j = rng.sample(range(n), 2)
        if holds(form, kinds[i], kinds[j]) != kinds[speaker]:
            form = FORMS[form][1]
        return [form, i, j]

    def _generate(self, rng: random.Random, difficulty: int) -> tuple[str, str, dict[str, Any]]:
        n = 2 + difficulty
        names = list(NAMES[:n])
        kinds = [rng.random() < 0.5 for _ in range(n)]
        statements: list[list[list]] = [[self._draw(rng, kinds, s)] for s in range(n)]
        while len(solutions(n, statements)) > 1:
            open_speakers = [s for s in range(n) if len(statements[s]) < MAX_STATEMENTS_PER_PERSON]
            speaker = rng.choice(open_speakers or range(n))
            statements[speaker].append(self._draw(rng, kinds, speaker))
        lines = []
        for s, said in enumerate(statements):
            quoted = " ".join(f"\"{render(f, names[i], names[j], names[s])}.\"" for f, i, j in said)
            lines.append(f"{names[s]} says: {quoted}")
        prompt = (f"On an island, every inhabitant is either a knight, who always tells the truth, or a knave, "
                  f"who always lies. You meet {n} inhabitants: {', '.join(names)}.\n\n" + "\n".join(lines) + "\n\n"
                  "Who is a knight and who is a knave? Give each inhabitant's kind in the order "
                  f"{', '.join(names)}, for example \"{names[0]}: knight, {names[1]}: knave\".")
        answer = ", ".join(f"{name}: {'knight' if k else 'knave'}" for name, k in zip(names, kinds))
        return prompt, answer, {"names": names, "kinds": kinds, "statements": statements}

    def check(self, answer: str, problem: Problem) -> tuple[float, str]:
        names, kinds = problem.data["names"], problem.data["kinds"]
        text = strip_wrappers(answer)[:MAX_ANSWER_CHARS].replace("\\text", " ")
        positions = [(m.start(), name) for name in names for m in re.finditer(rf"\b{re.escape(name)}\b", text)]
        given: list[bool | None]
        if {name for _, name in positions} == set(names):
            # by name: the first kind word after each name's first mention
            first = {name: pos for pos, name in sorted(positions, reverse=True)}
            given = []
            for name in names:
                m = _KIND.search(text, first[name])
                given.append(None if m is None else m.group(1).lower().startswith("knight"))
        else:
            words = [m.group(1).lower().startswith("knight") for m in _KIND.finditer(text)]
            if len(words) != len(names):
                return 0.0, "unparsable" if not words else "wrong_length"
            given = list(words)
        right = sum(g is not None and g == k for g, k in zip(given, kinds))
        return right / len(names), "correct" if right == len(names) else "wrong"
