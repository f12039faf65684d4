"""Verifiable environments with adaptive difficulty (RLVE, arXiv 2511.07317).

An environment generates problems procedurally (``generate(seed, difficulty) -> Problem``) and
verifies answers exactly (``verify(response, problem) -> Verdict``); a difficulty controller per
environment raises the difficulty as the policy masters it; a prompt source turns both into verl
rows with RLEC targets. Pure Python: no verl, no torch. Documentation: docs/environments.md.

Built-in environments (``rlve/<name>`` data sources, graded by :mod:`rlec.grading`):
addition, arithmetic, sorting, maze, linear_equations, base_conversion, counting, shortest_path,
knights_knaves, pair_sum. RLVE-Gym's 400 (``rlve_gym:<Identifier>``, ``rlve_gym:all``): :mod:`rlec.environments.rlve_gym`.
"""

from __future__ import annotations

from rlec.environments.addition import Addition
from rlec.environments.arithmetic import Arithmetic
from rlec.environments.base import Environment, Problem, Verdict, parse_int, parse_int_list, problem_rng
from rlec.environments.base_conversion import BaseConversion
from rlec.environments.controller import DifficultyController, Update
from rlec.environments.counting import Counting
from rlec.environments.knights_knaves import KnightsKnaves
from rlec.environments.linear_equations import LinearEquations
from rlec.environments.maze import Maze
from rlec.environments.pair_sum import PairSum
from rlec.environments.registry import (
    DATA_SOURCE_PREFIX,
    ENVIRONMENTS,
    data_source_of,
    environment_of,
    get_environment,
    builtin_names,
    expand_environment_name,
    namespace_names,
    parse_environment_names,
    reference_answer,
    register_environment,
    register_namespace,
)
from rlec.environments.shortest_path import ShortestPath
from rlec.environments.sorting import Sorting

for _env in (Addition(), Arithmetic(), Sorting(), Maze(), LinearEquations(), BaseConversion(), Counting(), ShortestPath(),
             KnightsKnaves(), PairSum()):
    register_environment(_env)


def _usable_gym_identifiers() -> list[str]:
    from rlec.environments.rlve_gym import gym_identifiers, refusal

    return [i for i in gym_identifiers() if refusal(i) is None]


def _gym_environment(identifier: str) -> Environment:
    from rlec.environments.rlve_gym import GymEnvironment

    return GymEnvironment(identifier)


# RLVE-Gym's 400 environments: rlve_gym:<Identifier>, created on first use (rlec/environments/rlve_gym.py)
register_namespace("rlve_gym", _usable_gym_identifiers, _gym_environment)

from rlec.environments.source import EnvironmentSource, SourceConfig, problem_row, question_id  # noqa: E402

__all__ = [
    "builtin_names",
    "expand_environment_name",
    "namespace_names",
    "register_namespace",
    "DATA_SOURCE_PREFIX",
    "ENVIRONMENTS",
    "DifficultyController",
    "Environment",
    "EnvironmentSource",
    "Problem",
    "SourceConfig",
    "Update",
    "Verdict",
    "data_source_of",
    "environment_of",
    "get_environment",
    "parse_environment_names",
    "reference_answer",
    "parse_int",
    "parse_int_list",
    "problem_row",
    "problem_rng",
    "question_id",
    "register_environment",
]
