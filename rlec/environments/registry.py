"""The environments rlec knows, by name, and their grader data sources ``rlve/<name>``.

:func:`register_environment` adds an environment and registers its data source with
:mod:`rlec.grading` (task kind ``env``), so ``rlec.grading.grade(response, problem.to_json(),
"rlve/<name>")`` and verl's reward loop (rlec's reward manager) grade it like any
other source. Importing this module registers the verifier of every ``rlve/`` source with
:mod:`rlec.grading.env` (:func:`verify_row`); the built-in environments register when
:mod:`rlec.environments` is imported, which grading does by name on the first ``rlve/`` row
(``rlec.grading.env.VERIFIER_PACKAGES``).
"""

from __future__ import annotations

import fnmatch
import re
from typing import Callable, Sequence

from rlec.environments.base import Environment, Problem, Verdict
from rlec.grading import ENV, register_data_source
from rlec.grading.env import register_verifiers

DATA_SOURCE_PREFIX = "rlve/"
ENVIRONMENTS: dict[str, Environment] = {}
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
_NAMESPACED = re.compile(r"^([a-z][a-z0-9_]*):([A-Za-z][A-Za-z0-9_]*)$")
ALL = "all"
# namespace -> (its identifiers usable now, the factory of one environment); environments of a
# namespace (RLVE-Gym's 400: ``rlve_gym:<Identifier>``) are created and registered on first use
_NAMESPACES: dict[str, tuple[Callable[[], Sequence[str]], Callable[[str], Environment]]] = {}

__all__ = ["ALL", "DATA_SOURCE_PREFIX", "ENVIRONMENTS", "builtin_names", "data_source_of", "environment_of",
           "expand_environment_name", "get_environment", "namespace_names", "parse_environment_names",
           "reference_answer", "register_environment", "register_namespace", "verify_row"]


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
    if not isinstance(name, str) or not (_NAME.match(name) or _NAMESPACED.match(name)):
        raise ValueError(f"environment name must match [a-z][a-z0-9_]* or <namespace>:<Identifier>, got {name!r}")
    known = ENVIRONMENTS.get(name)
    if known is not None and type(known).__qualname__ != type(env).__qualname__:
        raise ValueError(f"environment name {name!r} is already registered by {type(known).__qualname__}")
    register_data_source(data_source_of(name), ENV)
    ENVIRONMENTS[name] = env
    return env


def register_namespace(namespace: str, identifiers: Callable[[], Sequence[str]],
                       factory: Callable[[str], Environment]) -> None:
    """Make ``<namespace>:<Identifier>`` names resolvable: created with ``factory(identifier)`` on first use.

    Args:
        namespace: lower-case ``[a-z][a-z0-9_]*`` (``rlve_gym``).
        identifiers: the identifiers usable now (``<namespace>:all`` and globs expand over them).
        factory: builds the environment of one identifier; raises ValueError with the reason to refuse it.
    """
    if not _NAME.match(namespace):
        raise ValueError(f"namespace must match [a-z][a-z0-9_]*, got {namespace!r}")
    _NAMESPACES[namespace] = (identifiers, factory)


def builtin_names() -> list[str]:
    """The names of the registered environments outside every namespace (what ``all`` means), sorted."""
    return sorted(n for n in ENVIRONMENTS if ":" not in n)


def namespace_names(namespace: str) -> list[str]:
    """``<namespace>:<Identifier>`` for every identifier the namespace offers now (sorted)."""
    if namespace not in _NAMESPACES:
        raise ValueError(f"unknown environment namespace {namespace!r}; known: {sorted(_NAMESPACES)}")
    return [f"{namespace}:{i}" for i in sorted(_NAMESPACES[namespace][0]())]


def _known_hint() -> str:
    return f"known: {builtin_names()} and " + ", ".join(f"{ns}:<Identifier> ({ns}:all)" for ns in sorted(_NAMESPACES))


def get_environment(name: str) -> Environment:
    """The registered environment called ``name`` (a namespaced one is created on first use).

    Raises:
        ValueError: unknown name, or a namespaced environment its namespace refuses (the message
            names it and says why).
    """
    try:
        return ENVIRONMENTS[name]
    except (KeyError, TypeError):
        pass
    match = _NAMESPACED.match(name) if isinstance(name, str) else None
    if match and match.group(1) in _NAMESPACES:
        return register_environment(_NAMESPACES[match.group(1)][1](match.group(2)))
    raise ValueError(f"unknown environment {name!r}; {_known_hint()}")


def environment_of(data_source: str) -> Environment:
    """The environment behind a ``rlve/<name>`` data source.

    Raises:
        ValueError: not an ``rlve/`` data source, or an unknown environment.
    """
    if not isinstance(data_source, str) or not data_source.startswith(DATA_SOURCE_PREFIX):
        raise ValueError(f"data_source {data_source!r} is not an environment source ({DATA_SOURCE_PREFIX}<name>)")
    return get_environment(data_source[len(DATA_SOURCE_PREFIX):])


def _verifier(data_source: str) -> Callable[[object, str], Verdict]:
    env = environment_of(data_source)
    return lambda response, ground_truth: verify_row(env, response, ground_truth)


def verify_row(env: Environment, response: object, ground_truth: str) -> Verdict:
    """``env``'s verdict on a response to the problem held (as JSON) in a row's ground truth.

    Raises:
        ValueError: the ground truth is not a problem (``Problem.from_json``), or a problem of
            another environment (bad data, not bad model output).
    """
    problem = Problem.from_json(ground_truth)
    if problem.environment != env.name:
        raise ValueError(f"data_source {data_source_of(env.name)!r} holds a problem of environment {problem.environment!r}")
    return env.verify(response, problem)


register_verifiers(DATA_SOURCE_PREFIX, _verifier)


def expand_environment_name(item: str) -> list[str]:
    """The names one item of an environment list stands for.

    ``all``: every built-in environment; ``<namespace>:all``: every usable one of the namespace
    (``rlve_gym:all``); a glob with ``*``, ``?`` or ``[...]`` (``rlve_gym:Tree*``, ``*sort*``):
    the matching built-in and namespaced names; anything else: itself.

    Raises:
        ValueError: an unknown namespace, or a glob that matches nothing.
    """
    if item == ALL:
        return builtin_names()
    namespace, sep, rest = item.partition(":")
    if sep and rest == ALL:
        return namespace_names(namespace)
    if not any(c in item for c in "*?["):
        return [item]
    pool = builtin_names() + [n for ns in sorted(_NAMESPACES) for n in namespace_names(ns)]
    matched = [n for n in pool if fnmatch.fnmatchcase(n, item)]
    if not matched:
        raise ValueError(f"no environment matches {item!r}; {_known_hint()}")
    return matched


def parse_environment_names(spec: str | Sequence[str]) -> list[str]:
    """Environment names from ``"maze,sorting"``, ``"all"``, ``"rlve_gym:all"``, globs
    (``"rlve_gym:Tree*"``) or a sequence of these; order kept, duplicates dropped.

    Raises:
        ValueError: an empty list, an unknown name, or a refused environment (with the reason).
    """
    items = spec.split(",") if isinstance(spec, str) else list(spec)
    names: list[str] = []
    for item in (str(x).strip() for x in items):
        if not item:
            continue
        for name in expand_environment_name(item):
            get_environment(name)
            if name not in names:
                names.append(name)
    if not names:
        raise ValueError(f"no environment named in {spec!r}; {_known_hint()}")
    return names


def reference_answer(data_source: str, ground_truth: str) -> str:
    """What a correct ``\\boxed{}`` answer to a row holds: its ``reward_model.ground_truth``, or for an
    environment row (``rlve/<name>``, whose ground truth is the problem as JSON, :class:`~rlec.environments.base.Problem`)
    the problem's reference answer.

    Raises:
        ValueError: an environment row whose ground truth is not a problem of that environment.
    """
    if str(data_source).startswith(DATA_SOURCE_PREFIX):
        return Problem.from_json(ground_truth).answer
    return ground_truth
