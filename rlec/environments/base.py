"""The interface of a verifiable environment: ``generate(seed, difficulty) -> Problem`` and
``verify(response, problem) -> Verdict``.

An environment (RLVE, arXiv 2511.07317, Sec. 2) produces problems procedurally and checks answers
algorithmically, so the supply of training problems is unbounded and every verdict is exact:

- ``generate(seed, difficulty)`` is a pure function of its arguments. ``difficulty`` is an
  integer from 0 (the easiest problems); each step up grows the problem's size or depth (more
  digits, a longer list, a larger maze, more variables, ...). Each environment documents its
  scale in :attr:`Environment.difficulty_scale` and may cap it with
  :attr:`Environment.max_difficulty` (the prompt must stay a few hundred tokens). All randomness
  comes from one ``random.Random`` instance seeded by (environment, seed, difficulty)
  (:func:`problem_rng`); the global ``random`` / ``numpy`` state is never touched.
- The :class:`Problem` carries the task text (what the prompt states; rlec.prompts adds the
  answer format and the confidence target), a reference answer the verifier accepts, and the
  JSON-serialisable data the verifier needs. ``Problem.to_json()`` is the ``ground_truth`` of
  the problem's verl row, so a grader in any process can verify it.
- ``verify(response, problem)`` reads the final answer the way the rest of rlec does (the last
  ``\\boxed{}``, else an ``Answer:`` line; :mod:`rlec.grading.extract`), treats
  ``I don't know`` as an abstention, and returns a :class:`Verdict`: a score in [0, 1] (partial
  credit where the environment defines it) and ``correct`` (the score is 1). It never raises on
  model output.
"""

from __future__ import annotations

import concurrent.futures
import json
import random
import re
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar, Sequence

from rlec.grading.extract import extract, strip_wrappers

__all__ = [
    "Environment",
    "Problem",
    "Verdict",
    "parse_int",
    "parse_int_list",
    "problem_rng",
]

MAX_ANSWER_CHARS = 20_000  # longer final answers are not parsed (no environment needs more)


@dataclass(frozen=True)
class Problem:
    """One generated problem.

    Attributes:
        environment: the generating environment's name.
        seed: the seed it was generated from (int >= 0).
        difficulty: its difficulty (int >= 0).
        prompt: the task text (no answer-format instruction; ``rlec.prompts.build_messages`` adds it).
        answer: a reference answer as it would appear inside ``\\boxed{}``; the verifier accepts it.
        data: everything the verifier needs, JSON-serialisable (str/int/float/bool/list/dict).
    """

    environment: str
    seed: int
    difficulty: int
    prompt: str
    answer: str
    data: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        """The problem as compact JSON with sorted keys (the verl row's ``ground_truth``)."""
        return json.dumps(
            {"environment": self.environment, "seed": self.seed, "difficulty": self.difficulty,
             "prompt": self.prompt, "answer": self.answer, "data": self.data},
            sort_keys=True, separators=(",", ":"), ensure_ascii=False,
        )

    @classmethod
    def from_json(cls, text: str) -> "Problem":
        """Parse :meth:`to_json`'s output.

        Raises:
            ValueError: not JSON, not an object, or a missing / mistyped key (the message names it).
        """
        try:
            obj = json.loads(text)
        except (TypeError, json.JSONDecodeError) as exc:
            raise ValueError(f"environment ground truth is not valid JSON ({exc}): {str(text)[:80]!r}") from None
        if not isinstance(obj, dict):
            raise ValueError(f"environment ground truth must be a JSON object, got {type(obj).__name__}")
        types = {"environment": str, "seed": int, "difficulty": int, "prompt": str, "answer": str, "data": dict}
        for key, typ in types.items():
            if not isinstance(obj.get(key), typ) or isinstance(obj.get(key), bool):
                raise ValueError(f"environment ground truth: key {key!r} must be {typ.__name__}, got {obj.get(key)!r:.60}")
        return cls(**{key: obj[key] for key in types})


@dataclass(frozen=True)
class Verdict:
    """The verifier's judgement of one response.

    Attributes:
        score: in [0, 1]; 1 exactly when ``correct``. Partial credit where an environment defines
            it (e.g. the share of list positions right); 0 for abstentions and unreadable answers.
        correct: the answer solves the problem.
        reason: short tag of how the verdict was reached ("correct", "wrong", "abstain",
            "no_answer", "unparsable", "answer_too_long", or an environment's own, e.g. "wall").
        answer: the final answer read from the response (None when none was found).
        source: where it was read: "boxed", "answer_tag", "answer_line" or "none".
        shaped: the environment's own shaped score where it has one (RLVE-Gym: in [-1, 1]), logged
            beside the outcome and never used as the reward; None for the built-in environments.
    """

    score: float
    correct: bool
    reason: str
    answer: str | None = None
    source: str = "none"
    shaped: float | None = None

    @property
    def abstained(self) -> bool:
        """The response abstained (``I don't know``)."""
        return self.reason == "abstain"


def problem_rng(environment: str, seed: int, difficulty: int) -> random.Random:
    """The one random generator of a problem: a ``random.Random`` seeded by its identity.

    A string seed is hashed with SHA-512 by ``random.Random`` (not Python's per-process ``hash``),
    so the same (environment, seed, difficulty) gives the same problem on every machine and run.
    """
    return random.Random(f"rlec.environments/{environment}/{seed}/{difficulty}")


_THOUSANDS = re.compile(r"^[+-]?\d{1,3}(,\d{3})+$")
_INT = re.compile(r"^[+-]?\d+$")


def parse_int(text: str) -> int | None:
    """An integer written in a final answer, or None.

    Accepts surrounding ``$``/``\\text{}``, a leading ``+``/``-`` (also the Unicode minus),
    thousands separators (``1,234``, ``1{,}234``, ``1\\,234``, spaces) and a trailing period.
    Never raises; at most :data:`MAX_ANSWER_CHARS` characters are read.
    """
    if not isinstance(text, str) or len(text) > MAX_ANSWER_CHARS:
        return None
    s = strip_wrappers(text).replace("\u2212", "-").replace("{,}", ",").replace("\\,", "").replace("\\!", "")
    s = re.sub(r"\s+", "", s).rstrip(".")
    if _THOUSANDS.match(s):
        s = s.replace(",", "")
    if not _INT.match(s) or len(s) > 4000:  # int() refuses more than 4300 digits
        return None
    return int(s)


def parse_int_list(text: str) -> list[int] | None:
    """A list of integers written in a final answer (``3, 1, 2``, ``[3, 1, 2]``, ``3 1 2``), or None.

    Items are separated by commas, semicolons or whitespace; one pair of surrounding brackets
    (``[]``, ``()``, ``\\{\\}``, ``\\left[ \\right]``) is removed. Never raises.
    """
    if not isinstance(text, str) or len(text) > MAX_ANSWER_CHARS:
        return None
    s = strip_wrappers(text).replace("\u2212", "-").replace("\\left", "").replace("\\right", "")
    s = s.replace("\\{", "{").replace("\\}", "}").strip().rstrip(".")
    if len(s) >= 2 and s[0] + s[-1] in ("[]", "()", "{}"):
        s = s[1:-1]
    items = [t for t in re.split(r"[,;\s]+", s) if t]
    values = [parse_int(t) for t in items]
    if not values or any(v is None for v in values):
        return None
    return values  # type: ignore[return-value]


class Environment(ABC):
    """A procedural problem generator with an exact verifier.

    Subclasses set :attr:`name`, :attr:`difficulty_scale` (one sentence: what grows with the
    difficulty), optionally :attr:`max_difficulty` and :attr:`eval_difficulties`, and implement
    :meth:`_generate` and :meth:`check`. :meth:`extract_answer` may be overridden to accept
    another answer form (the Maze also reads ``<answer>...</answer>``).
    """

    name: ClassVar[str]
    difficulty_scale: ClassVar[str]
    max_difficulty: ClassVar[int | None] = None
    #: generation runs in other processes and :meth:`submit` returns before it ends (RLVE-Gym's pool), so
    #: the prompt source submits the next rows' problems ahead (:class:`rlec.environments.source.EnvironmentSource`)
    generates_elsewhere: ClassVar[bool] = False
    eval_difficulties: ClassVar[tuple[int, ...]] = (0, 1, 2, 3, 4, 5, 6, 7)

    def generate(self, seed: int, difficulty: int) -> Problem:
        """A problem, deterministic in (seed, difficulty).

        Args:
            seed: any int >= 0.
            difficulty: int in [0, :attr:`max_difficulty`] (no upper bound when that is None).

        Raises:
            ValueError: a negative or non-integer seed or difficulty, or a difficulty above the cap.
        """
        self.check_arguments(seed, difficulty)
        prompt, answer, data = self._generate(problem_rng(self.name, seed, difficulty), difficulty)
        return Problem(self.name, seed, difficulty, prompt, answer, data)

    def submit(self, seed: int, difficulty: int) -> concurrent.futures.Future:
        """Start generating a problem; a future of what :meth:`generate` returns (or raises).

        Here the problem is generated before returning; environments that generate elsewhere
        (:attr:`generates_elsewhere`, RLVE-Gym's) return at once, so problems submitted together overlap.
        """
        future: concurrent.futures.Future = concurrent.futures.Future()
        try:
            future.set_result(self.generate(seed, difficulty))
        except Exception as exc:  # noqa: BLE001 - handed to the caller through the future
            future.set_exception(exc)
        return future

    def generate_many(self, jobs: Sequence[tuple[int, int]], *, raise_failed: bool = True) -> list[Problem | Exception]:
        """Problems for ``(seed, difficulty)`` pairs, in order (:meth:`generate` each; environments
        that generate elsewhere, like RLVE-Gym's, do them in parallel and may return failures when
        ``raise_failed`` is False)."""
        return [self.generate(seed, difficulty) for seed, difficulty in jobs]

    def check_arguments(self, seed: int, difficulty: int) -> None:
        """Refuse a seed or difficulty :meth:`generate` does not take.

        Raises:
            ValueError: a negative or non-integer seed or difficulty, or a difficulty above the cap
                (the message names the environment and the reason).
        """
        for arg, value in (("seed", seed), ("difficulty", difficulty)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"{self.name}: {arg} must be an int >= 0, got {value!r}")
        if self.max_difficulty is not None and difficulty > self.max_difficulty:
            raise ValueError(f"{self.name}: difficulty {difficulty} is above its maximum {self.max_difficulty}")

    def cap(self, max_prompt_tokens: int | None) -> int | None:
        """The highest difficulty allowed under a prompt-token budget (``data.max_prompt_length``).

        The built-in environments have one cap (:attr:`max_difficulty`, chosen so every prompt stays
        under ~1,100 tokens); RLVE-Gym's depend on the budget. None: no cap.
        """
        return self.max_difficulty

    @abstractmethod
    def _generate(self, rng: random.Random, difficulty: int) -> tuple[str, str, dict[str, Any]]:
        """(task text, reference answer, verification data) of one problem, from ``rng`` only."""

    @abstractmethod
    def check(self, answer: str, problem: Problem) -> tuple[float, str]:
        """Score an extracted final answer: ``(score in [0, 1], reason)``; 1.0 means correct.

        Must not raise on any answer text (return ``(0.0, "unparsable")`` instead).
        """

    def right_answers(self, problem: Problem) -> int | None:
        """How many distinct right answers ``problem`` has (Pass@k's many-answer tasks report it), or None where the
        environment does not count them (most have one canonical answer; the Maze accepts unboundedly many walks)."""
        return None

    def extract_answer(self, response: str) -> tuple[str | None, str, bool]:
        """``(final answer or None, source, abstained)`` read from a response (rlec's conventions)."""
        ex = extract(response)
        source = {"boxed": "boxed", "answer_line": "answer_line"}.get(ex.source, "none")
        return ex.answer, source, ex.abstained

    def verify(self, response: Any, problem: Problem) -> Verdict:
        """Judge one response to ``problem``.

        Args:
            response: the model's text (untrusted; anything that is not a str has no answer).
            problem: a problem of this environment.

        Returns:
            A :class:`Verdict`; never raises on the response.

        Raises:
            ValueError: ``problem`` belongs to another environment.
        """
        if problem.environment != self.name:
            raise ValueError(f"{self.name}: cannot verify a problem of environment {problem.environment!r}")
        answer, source, abstained = self.extract_answer(response if isinstance(response, str) else "")
        if abstained:
            return Verdict(0.0, False, "abstain", answer, source)
        if answer is None:
            return Verdict(0.0, False, "no_answer", None, source)
        if len(answer) > MAX_ANSWER_CHARS:
            return Verdict(0.0, False, "answer_too_long", answer[:200], source)
        score, reason = self.check(answer, problem)
        score = min(1.0, max(0.0, float(score)))
        return Verdict(score, score == 1.0, reason, answer, source)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"
