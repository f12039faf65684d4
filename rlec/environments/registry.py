"""The environments rlec knows, by name, and their grader data sources ``rlve/<name>``.

:func:`register_environment` adds an environment and registers its data source with
:mod:`rlec.grading` (task kind ``env``), so ``rlec.grading.grade(response, problem.to_json(),
"rlve/<name>")``, ``rlec.reward.score.compute_score`` and verl's reward loop grade it like any
other source. The built-in environments register when :mod:`rlec.environments` is imported
(which ``import rlec.grading`` does).
"""

from __future__ import annotations

import re
from typing import Sequence

from rlec.environments.base import Environment
from rlec.grading import ENV, register_data_source

DATA_SOURCE_PREFIX = "rlve/"
ENVIRONMENTS: dict[str, Environment] = {}
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")

__all__ = ["DATA_SOURCE_PREFIX", "ENVIRONMENTS", "data_source_of", "environment_of", "get_environment",
           "parse_environment_names", "register_environment"]


def data_source_of(name: str) -> str:
    """The ``data_source`` of an environment's rows: ``rlve/<name>``."""
    return DATA_SOURCE_PREFIX + name


def register_environment(env: Environment) -> Environment:
    """Add ``env`` to :data:`ENVIRONMENTS` and its data source to ``rlec.grading.TASKS``.

    Registering the same class under the same name again is a no-op (module reloads).

    Returns:
        ``env`` (so it can be used as ``register_environment(MyEnv())`` at module level).

    Raises:
        ValueError: a name that is not lower-case ``[a-z][a-z0-9_]*``, or a name already taken by
            another class.
    """
    name = getattr(env, "name", None)
    if not isinstance(name, str) or not _NAME.match(name):
        raise ValueError(f"environment name must match [a-z][a-z0-9_]*, got {name!r}")
    known = ENVIRONMENTS.get(name)
    if known is not None and type(known).__qualname__ != type(env).__qualname__:
        raise ValueError(f"environment name {name!r} is already registered by {type(known).__qualname__}")
    register_data_source(data_source_of(name), ENV)
    ENVIRONMENTS[name] = env
    return env


def get_environment(name: str) -> Environment:
    """The registered environment called ``name``.

    Raises:
        ValueError: unknown name (the message lists the known ones).
    """
    try:
        return ENVIRONMENTS[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown environment {name!r}; known: {sorted(ENVIRONMENTS)}") from None


def environment_of(data_source: str) -> Environment:
    """The environment behind a ``rlve/<name>`` data source.

    Raises:
        ValueError: not an ``rlve/`` data source, or an unknown environment.
    """
    if not isinstance(data_source, str) or not data_source.startswith(DATA_SOURCE_PREFIX):
        raise ValueError(f"data_source {data_source!r} is not an environment source ({DATA_SOURCE_PREFIX}<name>)")
    return get_environment(data_source[len(DATA_SOURCE_PREFIX):])


def parse_environment_names(spec: str | Sequence[str]) -> list[str]:
    """Environment names from ``"maze,sorting"``, ``"all"`` or a sequence; order kept, duplicates dropped.

    Raises:
        ValueError: an empty list or an unknown name.
    """
    items = spec.split(",") if isinstance(spec, str) else list(spec)
    names: list[str] = []
    for item in (str(x).strip() for x in items):
        if not item:
            continue
        for name in (sorted(ENVIRONMENTS) if item == "all" else [item]):
            get_environment(name)
            if name not in names:
                names.append(name)
    if not names:
        raise ValueError(f"no environment named in {spec!r}; known: {sorted(ENVIRONMENTS)}")
    return names
