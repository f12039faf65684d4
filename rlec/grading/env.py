"""Grading of environment problems (task kind ``env``): the environment's own verifier decides.

An environment row's ``data_source`` starts with a prefix (``rlve/<name>``); its ground truth is the
problem as JSON (``rlec.environments.Problem.to_json``). Grading asks the verifier registered for
the prefix for the row's verdict and maps it onto rlec's outcomes: abstention (``I don't know`` as
the final answer) -> abstain; correct -> correct; anything else -> incorrect. The final answer is
read as everywhere in rlec (last ``\\boxed{}``, else an ``Answer:`` line), the Maze also from
``<answer>...</answer>``. ``GradeResult.detail`` is ``env:<reason>`` (``env:correct``,
``env:wall``, ``env:no_answer``, ...). RLVE-Gym's environments (``rlve/rlve_gym:<Identifier>``) are
verified in their worker pool; their shaped score is ``GradeResult.env_score`` (logged, never the
reward).

Environments sit above grading (they read answers with :mod:`rlec.grading.extract`), so grading
never imports them. The package that owns a prefix registers its verifiers here when it is
imported (:func:`register_verifiers`; :mod:`rlec.environments.registry` does it for ``rlve/``), and
:data:`VERIFIER_PACKAGES` names that package by prefix, so a process that grades such a row
(a reward worker, the evaluation) imports it on the row's first use without
importing it itself.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable, Protocol

from rlec.grading import ENV, GradeResult
from rlec.grading.outcome import Outcome

__all__ = ["VERIFIER_PACKAGES", "EnvironmentVerdict", "Verify", "environment_prefix", "grade_environment",
           "register_verifiers", "verifier_for"]

FORMAT_OK_SOURCES = frozenset({"boxed", "answer_tag"})
# data-source prefix -> the package whose import calls register_verifiers for it
VERIFIER_PACKAGES: dict[str, str] = {"rlve/": "rlec.environments"}


class EnvironmentVerdict(Protocol):
    """What grading reads of a verifier's judgement (``rlec.environments.Verdict`` has these fields)."""

    correct: bool
    reason: str
    answer: str | None
    source: str
    shaped: float | None

    @property
    def abstained(self) -> bool: ...


# verify(response, ground_truth) -> verdict of one data source's rows; ValueError: the ground truth
# is not a problem of this data source (bad data, not bad model output)
Verify = Callable[[Any, str], EnvironmentVerdict]
# resolve(data_source) -> its Verify; ValueError: a data source of this prefix that does not exist
_RESOLVERS: dict[str, Callable[[str], Verify]] = {}


def register_verifiers(prefix: str, resolve: Callable[[str], Verify]) -> None:
    """Make every ``data_source`` starting with ``prefix`` gradable by an environment verifier.

    Called by the package that owns the prefix when it is imported; registering the same prefix
    again replaces the resolver (module reloads).

    Args:
        prefix: e.g. ``"rlve/"``; must end with ``/``.
        resolve: ``resolve(data_source)`` returns the row's ``verify(response, ground_truth)``;
            it raises ValueError for a data source of the prefix that does not exist.

    Raises:
        ValueError: a prefix that does not end with ``/``.
    """
    if not isinstance(prefix, str) or not prefix.endswith("/") or len(prefix) < 2:
        raise ValueError(f"verifier prefix must be a non-empty name ending with '/', got {prefix!r}")
    _RESOLVERS[prefix] = resolve


def environment_prefix(data_source: Any) -> str | None:
    """The registered (or importable, :data:`VERIFIER_PACKAGES`) prefix ``data_source`` starts with, else None."""
    if not isinstance(data_source, str):
        return None
    for prefix in (*_RESOLVERS, *VERIFIER_PACKAGES):
        if data_source.startswith(prefix):
            return prefix
    return None


def verifier_for(data_source: str) -> Verify:
    """The verifier of an environment data source, importing the package that registers it if needed.

    Raises:
        ValueError: no verifier for the prefix (the package named in :data:`VERIFIER_PACKAGES`
            cannot be imported or did not register one, or the prefix is unknown), or an unknown
            data source of the prefix.
    """
    prefix = environment_prefix(data_source)
    if prefix is None:
        raise ValueError(f"data_source {data_source!r} is not an environment source; "
                         f"known prefixes: {sorted({*_RESOLVERS, *VERIFIER_PACKAGES})}")
    if prefix not in _RESOLVERS:
        try:
            importlib.import_module(VERIFIER_PACKAGES[prefix])  # registers its verifiers on import
        except ImportError as exc:
            raise ValueError(f"package {VERIFIER_PACKAGES[prefix]!r}, which grades {prefix!r} sources, "
                             f"cannot be imported: {exc}") from None
    if prefix not in _RESOLVERS:
        raise ValueError(f"package {VERIFIER_PACKAGES[prefix]!r} registered no verifiers for {prefix!r} "
                         f"(rlec.grading.env.register_verifiers)")
    return _RESOLVERS[prefix](data_source)


def grade_environment(response: Any, gold: str, data_source: str) -> GradeResult:
    """Grade one response to an environment problem.

    Args:
        response: the model's text (untrusted; never raises on it).
        gold: the problem as JSON (``Problem.to_json()``).
        data_source: ``rlve/<name>``; must name the problem's environment.

    Returns:
        A :class:`~rlec.grading.GradeResult` with ``task="env"``.

    Raises:
        ValueError: an unknown data source, or a gold that is not a problem of the data source's
            environment (bad data, not bad model output).
    """
    verdict = verifier_for(data_source)(response, gold)
    if verdict.abstained:
        outcome = Outcome.ABSTAIN
    else:
        outcome = Outcome.CORRECT if verdict.correct else Outcome.INCORRECT
    return GradeResult(outcome, pred=verdict.answer, answer_source=verdict.source,
                       format_ok=verdict.source in FORMAT_OK_SOURCES, task=ENV, detail=f"env:{verdict.reason}",
                       env_score=verdict.shaped)
