"""RLVE-Gym's 400 environments behind rlec's :class:`~rlec.environments.base.Environment` interface.

RLVE-Gym (arXiv 2511.07317's environment set; ``rlve-gym`` 0.0.1, MIT, import name ``Gym``) is used
as installed: its names are read from its source without importing it (importing it costs 1.5-60 s
and loads torch), and every generation and verification runs in the worker processes of
:mod:`rlec.environments.gym_pool`.

- Name: ``rlve_gym:<Identifier>`` (``rlve_gym:Maze``); data source ``rlve/rlve_gym:Maze``. Selected
  like a built-in environment (``ENVIRONMENTS=rlve_gym:Maze,sorting``, ``rlec.rlve.environments``),
  as all of them (``rlve_gym:all``) or by a glob (``rlve_gym:Tree*``).
- Difficulty d: the environment's parameter controller stepped d times (RLVE-Gym's own levels);
  the parameter setting at a level and the Gym seed come from rlec's generator of the problem
  (:func:`rlec.environments.gym_worker.draw`), so (environment, seed, difficulty) gives the same
  problem in every process.
- Cap: ``cap(budget)``, the highest d whose prompts (task text + rlec's template at the longest target, Qwen3
  tokenizer) fit the prompt-token budget (``data.max_prompt_length``), from the committed level
  table :data:`LEVELS_FILE` (``python -m rlec.environments measure`` rewrites it);
  ``max_difficulty`` is the highest measured level (``generate`` refuses anything above). Environments
  whose gold answer fails their own verifier, or that have no level table, are refused with the reason.
- Verification: rlec extracts the final answer as for every source (last ``\\boxed{}``, else an
  ``Answer:`` line) and hands ``<answer>{answer}</answer>`` to the environment's verifier; correct
  iff its score reaches the environment's passing threshold. The shaped score is
  ``Verdict.shaped`` (logged, never the reward).
"""

from __future__ import annotations

import ast
import concurrent.futures
import functools
import importlib.util
import json
from pathlib import Path
from typing import Any, Sequence

from rlec.environments.base import MAX_ANSWER_CHARS, Environment, Problem, Verdict

__all__ = ["DEFAULT_PROMPT_TOKENS", "LEVELS_FILE", "NAMESPACE", "GymEnvironment", "gym_identifiers", "levels",
           "refusal", "SLOW_GEN_MS", "cap_for"]

NAMESPACE = "rlve_gym"
PREFIX = NAMESPACE + ":"
DEFAULT_PROMPT_TOKENS = 2048  # megatron_configs/recipe.yaml data.max_prompt_length
LEVELS_FILE = Path(__file__).with_name("rlve_gym_levels.json")
SLOW_GEN_MS = 2000.0  # a level whose problems take longer (mean of the level table) ends the usable range


@functools.lru_cache(maxsize=1)
def gym_identifiers() -> tuple[str, ...]:
    """RLVE-Gym's environment identifiers (``identifier2environment``'s keys), read without importing it.

    Returns:
        The 400 identifiers of rlve-gym 0.0.1, sorted; () when the package is not installed.
    """
    spec = importlib.util.find_spec("Gym")
    if spec is None or not spec.submodule_search_locations:
        return ()
    source = Path(list(spec.submodule_search_locations)[0], "environments", "__init__.py").read_text()
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "identifier2environment":
            return tuple(sorted(k.value for k in node.value.keys if isinstance(k, ast.Constant)))  # type: ignore[attr-defined]
    return ()


@functools.lru_cache(maxsize=1)
def levels() -> dict[str, Any]:
    """The committed level table (:data:`LEVELS_FILE`): per identifier ``tokens`` (largest prompt per
    level d = 0, 1, ...), ``gen_ms`` per level, ``verify_ms``, ``status`` ("ok" or why it is refused);
    ``{}`` when absent."""
    if not LEVELS_FILE.exists():
        return {}
    return json.loads(LEVELS_FILE.read_text())


def refusal(identifier: str) -> str | None:
    """Why ``rlve_gym:<identifier>`` cannot be used (None when it can)."""
    if identifier not in gym_identifiers():
        return "not an RLVE-Gym environment" if gym_identifiers() else "rlve-gym is not installed"
    entry = levels().get("environments", {}).get(identifier)
    if entry is None:
        return "not in the level table (python -m rlec.environments measure)"
    if entry.get("status") != "ok":
        return str(entry.get("status"))
    return None


def cap_for(identifier: str, max_prompt_tokens: int) -> int:
    """The highest difficulty whose prompts (template + longest target included) fit ``max_prompt_tokens``
    and whose problems generate, and gold answers verify, in at most :data:`SLOW_GEN_MS` (so a level
    near the pool's limit, which times out under load, is never reached).

    Returns:
        -1 when not even d = 0 fits.
    """
    entry = levels().get("environments", {}).get(identifier, {})
    cap = -1
    verify = entry.get("verify_ms_levels") or []
    for d, (tokens, gen_ms) in enumerate(zip(entry.get("tokens", []), entry.get("gen_ms", []))):
        if tokens > max_prompt_tokens or gen_ms > SLOW_GEN_MS or (d < len(verify) and verify[d] > SLOW_GEN_MS):
            break
        cap = d
    return cap


FLOAT_EXACT_LIMIT = 2**53  # above it a float cannot tell n from n + 1


def exact_integer_mismatch(answer: str, gold: str) -> bool:
    """Whether ``answer`` and the reference ``gold`` are both integers, the gold beyond 2**53, and differ.

    RLVE-Gym computes its scores in floating point, where an integer beyond 2**53 and its neighbour are
    the same number, so an answer off by one can score exactly 1.0; such answers are compared as
    integers. Smaller integers (exact in a float) and any other answer are left to the verifier.
    """
    a, g = str(answer).strip(), str(gold).strip()
    if not (_is_integer(a) and _is_integer(g)) or max(len(a), len(g)) > 4000:  # int() refuses > 4300 digits
        return False
    gold_value = int(g)
    return abs(gold_value) > FLOAT_EXACT_LIMIT and int(a) != gold_value


def _is_integer(text: str) -> bool:
    body = text[1:] if text[:1] in "+-" else text
    return body.isascii() and body.isdigit()


class GymEnvironment(Environment):
    """One RLVE-Gym environment (see the module docstring).

    Args:
        identifier: RLVE-Gym's identifier (``Maze``).
        pool: the pool that generates and verifies (None: :func:`rlec.environments.gym_pool.shared_gym_pool`).

    Raises:
        ValueError: ``identifier`` is not an RLVE-Gym environment, or is refused (:func:`refusal`).
    """

    difficulty_scale = "RLVE-Gym's parameter controller stepped d times"
    generates_elsewhere = True

    def __init__(self, identifier: str, pool: Any = None) -> None:
        reason = refusal(identifier)
        if reason is not None:
            raise ValueError(f"environment {PREFIX}{identifier} is refused: {reason}")
        self.identifier = identifier
        self._pool = pool
        self.name = PREFIX + identifier  # type: ignore[misc]
        # the highest measured level: generate() refuses anything above; the budget's cap is cap()
        self.max_difficulty = len(levels()["environments"][identifier]["tokens"]) - 1  # type: ignore[misc]
        default_cap = cap_for(identifier, DEFAULT_PROMPT_TOKENS)
        self.eval_difficulties = tuple(range(min(8, default_cap + 1)))  # type: ignore[misc]

    def cap(self, max_prompt_tokens: int | None) -> int | None:
        """The highest difficulty whose prompts fit ``max_prompt_tokens`` (``data.max_prompt_length``;
        None: :data:`DEFAULT_PROMPT_TOKENS`), at most :attr:`max_difficulty`; -1 when none fits."""
        return cap_for(self.identifier, DEFAULT_PROMPT_TOKENS if max_prompt_tokens is None else max_prompt_tokens)

    @property
    def pool(self) -> Any:
        """The :class:`rlec.environments.gym_pool.GymPool` this environment runs in."""
        if self._pool is not None:
            return self._pool
        from rlec.environments.gym_pool import shared_gym_pool

        return shared_gym_pool()

    def generate(self, seed: int, difficulty: int) -> Problem:
        """A problem, deterministic in (seed, difficulty), generated in the RLVE-Gym pool.

        Raises:
            ValueError: a negative seed or difficulty, or a difficulty above the cap.
            rlec.environments.gym_pool.GenerationFailed: no attempt generated within its limit.
        """
        return self.generate_many([(seed, difficulty)])[0]  # type: ignore[return-value]

    def submit(self, seed: int, difficulty: int) -> concurrent.futures.Future:
        """Start generating a problem in the pool and return at once (validated as for :meth:`generate`).

        Returns:
            A future of the :class:`Problem`; ``result()`` raises
            :class:`rlec.environments.gym_pool.GenerationFailed` when no attempt generated.
        """
        self.check_arguments(seed, difficulty)
        problem: concurrent.futures.Future = concurrent.futures.Future()

        def convert(future: concurrent.futures.Future) -> None:
            try:
                r = future.result()
            except Exception as exc:  # noqa: BLE001 - GenerationFailed, or a pool closed meanwhile
                problem.set_exception(exc)
                return
            data = {k: r[k] for k in ("index", "gym_seed", "attempt", "threshold", "config")}
            problem.set_result(Problem(self.name, seed, difficulty, r["prompt"], r["answer"], data))

        self.pool.submit(self.identifier, seed, difficulty).add_done_callback(convert)
        return problem

    def generate_many(self, jobs: Sequence[tuple[int, int]], *, raise_failed: bool = True) -> list[Problem | Exception]:
        """Problems for ``(seed, difficulty)`` pairs, generated in parallel in the pool.

        Args:
            jobs: (seed, difficulty) pairs, each validated as for :meth:`generate`.
            raise_failed: raise the first ``GenerationFailed``; else return it in its place.
        """
        from rlec.environments.gym_pool import GenerationFailed

        for seed, difficulty in jobs:
            self.check_arguments(seed, difficulty)
        futures = [self.submit(seed, difficulty) for seed, difficulty in jobs]
        out: list[Problem | Exception] = []
        for future in futures:
            try:
                out.append(future.result())
            except GenerationFailed as failed:
                if raise_failed:
                    raise
                out.append(failed)
        return out

    def _generate(self, rng: Any, difficulty: int) -> tuple[str, str, dict[str, Any]]:
        raise NotImplementedError("RLVE-Gym problems are generated in the pool (generate)")

    def check(self, answer: str, problem: Problem) -> tuple[float, str]:
        """``(1.0, "correct")`` when the verifier's score reaches the threshold, else (clamped score, reason)."""
        verdict = self.score(answer, problem)
        return (1.0 if verdict[0] else max(0.0, min(verdict[1], 0.999)), verdict[2])

    def score(self, answer: str, problem: Problem) -> tuple[bool, float, str]:
        """(correct, shaped score in [-1, 1], reason) of one extracted answer; never raises on it."""
        result = self.pool.score_many([(self.identifier, problem.difficulty, problem.data, answer)])[0]
        if isinstance(result, str):
            return False, -1.0, "verifier_timeout" if result.startswith("timeout") else "verifier_error"
        shaped, threshold, _ = result
        correct = shaped >= threshold  # exactly: RLVE-Gym's own 1e-6 slack accepts n + 1 for n > ~1e7 (shaped (n/(n+1))^beta)
        if correct and exact_integer_mismatch(answer, problem.answer):
            return False, shaped, "wrong_integer"
        return correct, shaped, "correct" if correct else ("partial" if shaped > 0 else "wrong")

    def verify(self, response: Any, problem: Problem) -> Verdict:
        """As :meth:`Environment.verify`, with ``Verdict.shaped`` = the verifier's own score."""
        if problem.environment != self.name:
            raise ValueError(f"{self.name}: cannot verify a problem of environment {problem.environment!r}")
        answer, source, abstained = self.extract_answer(response if isinstance(response, str) else "")
        if abstained or answer is None:
            return Verdict(0.0, False, "abstain" if abstained else "no_answer", answer, source)
        if len(answer) > MAX_ANSWER_CHARS:
            return Verdict(0.0, False, "answer_too_long", answer[:200], source)
        correct, shaped, reason = self.score(answer, problem)
        score = 1.0 if correct else max(0.0, min(shaped, 0.999))
        return Verdict(score, correct, reason, answer, source, shaped=shaped)
