"""Grading of environment problems (task kind ``env``): the environment's own verifier decides.

A ``rlve/<name>`` data source (registered by :mod:`rlec.environments.registry`) carries the
problem as JSON in its ground truth (``rlec.environments.Problem.to_json``). Grading parses it,
runs the environment's ``verify`` on the response and maps the :class:`~rlec.environments.Verdict`
onto rlec's outcomes: abstention (``I don't know`` as the final answer) -> abstain; correct ->
correct; anything else -> incorrect. The final answer is read as everywhere in rlec (last
``\\boxed{}``, else an ``Answer:`` line), the Maze also from ``<answer>...</answer>``.
``GradeResult.detail`` is ``env:<reason>`` (``env:correct``, ``env:wall``, ``env:no_answer``, ...).
RLVE-Gym's environments (``rlve/rlve_gym:<Identifier>``) are verified in their worker pool; their
shaped score is ``GradeResult.env_score`` (logged, never the reward).
"""

from __future__ import annotations

from typing import Any

from rlec.grading import ENV, GradeResult
from rlec.reward.formula import Outcome

__all__ = ["grade_environment"]

FORMAT_OK_SOURCES = frozenset({"boxed", "answer_tag"})


def grade_environment(response: Any, gold: str, data_source: str) -> GradeResult:
    """Grade one response to an environment problem.

    Args:
        response: the model's text (untrusted; never raises on it).
        gold: the problem as JSON (``Problem.to_json()``).
        data_source: ``rlve/<name>``; must name the problem's environment.

    Returns:
        A :class:`~rlec.grading.GradeResult` with ``task="env"``.

    Raises:
        ValueError: the gold is not a problem of the data source's environment (bad data, not
            bad model output).
    """
    from rlec.environments import Problem, environment_of  # rlec.environments imports rlec.grading

    env = environment_of(data_source)
    problem = Problem.from_json(gold)
    if problem.environment != env.name:
        raise ValueError(f"data_source {data_source!r} holds a problem of environment {problem.environment!r}")
    verdict = env.verify(response, problem)
    if verdict.abstained:
        outcome = Outcome.ABSTAIN
    else:
        outcome = Outcome.CORRECT if verdict.correct else Outcome.INCORRECT
    return GradeResult(outcome, pred=verdict.answer, answer_source=verdict.source,
                       format_ok=verdict.source in FORMAT_OK_SOURCES, task=ENV, detail=f"env:{verdict.reason}",
                       env_score=verdict.shaped)
