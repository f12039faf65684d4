"""What runs inside a RLVE-Gym worker process: generation and scoring with the ``Gym`` package.

Only :class:`rlec.environments.gym_pool.GymPool` calls these functions, each in a spawned worker
(never in the trainer's process): RLVE-Gym's ``manual_seed`` re-seeds Python's ``random``, numpy
and torch globally for every problem, and its own ``generator`` runs ``_generate`` in a thread with
a timeout that does not stop the thread. Here ``_generate`` runs in the worker's main thread and
the pool's hard per-task time limit kills the worker instead.

A problem of environment ``E`` at (rlec seed s, difficulty d) is drawn as follows (all from rlec's
own generator :func:`rlec.environments.base.problem_rng` of ``("rlve_gym:E", s, d)``):

1. the controller ``identifier2controller[E]()`` is stepped d times (``update()``), its
   ``get_parameter_list()`` gives the parameter settings of level d;
2. ``index = rng.randrange(len(settings))`` picks one setting;
3. attempt k (0, 1, ...) uses Gym seed ``seeds[k]``, the k-th ``rng.getrandbits(32)`` draw;
   ``manual_seed(seed)`` then ``_generate()`` as RLVE-Gym does.

So (E, s, d, k) gives the same problem in every process (the pool also fixes ``PYTHONHASHSEED``
for its workers, since some environments iterate over sets of strings).
"""

from __future__ import annotations

import copy
import functools
import json
import signal
import time
from typing import Any

from rlec.environments.base import problem_rng

__all__ = ["draw", "generate_task", "score_task", "worker_init"]

GYM_NAMESPACE = "rlve_gym"


def worker_init() -> None:
    """Runs once per worker before its first task: die at once on SIGTERM, import Gym (1-60 s)."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    import Gym.environments  # noqa: F401
    import Gym.parameter_controllers  # noqa: F401


@functools.lru_cache(maxsize=4096)
def _settings(name: str, difficulty: int) -> tuple[str, ...]:
    """The parameter settings of level ``difficulty`` (JSON strings, so the cache hands out copies)."""
    from Gym.parameter_controllers import identifier2controller

    controller = identifier2controller[name]()
    for _ in range(difficulty):
        controller.update()
    return tuple(json.dumps(p, sort_keys=True) for p in controller.get_parameter_list())


def draw(name: str, seed: int, difficulty: int, attempt: int) -> tuple[int, dict[str, Any], int]:
    """(setting index, the setting, Gym seed) of attempt ``attempt`` of problem (name, seed, difficulty)."""
    rng = problem_rng(f"{GYM_NAMESPACE}:{name}", seed, difficulty)
    settings = _settings(name, difficulty)
    index = rng.randrange(len(settings))
    gym_seed = 0
    for _ in range(attempt + 1):
        gym_seed = rng.getrandbits(32)
    return index, json.loads(settings[index]), gym_seed


def _generated(name: str, parameter: dict[str, Any], gym_seed: int) -> Any:
    from Gym.environment import manual_seed
    from Gym.environments import identifier2environment

    env = identifier2environment[name]()
    env.seed, env.parameter = gym_seed, copy.deepcopy(parameter)
    manual_seed(gym_seed)
    env._generate()
    if env.parameter is None:
        raise RuntimeError(f"{name}: generation left no parameter")
    return env


def generate_task(name: str, seed: int, difficulty: int, attempt: int) -> dict[str, Any]:
    """Generate one problem (see the module docstring); raises whatever the environment raises.

    Returns:
        ``{"prompt", "answer" (str, "" when the environment sets no reference answer), "index",
        "gym_seed", "attempt", "threshold", "config" (the generated parameter when it survives a JSON
        round trip unchanged, else None: the scorer then regenerates it), "seconds"}``.
    """
    start = time.perf_counter()
    index, parameter, gym_seed = draw(name, seed, difficulty, attempt)
    env = _generated(name, parameter, gym_seed)
    prompt = env.prompt_generator()
    reference = env.parameter.get("reference_answer")
    try:
        config = json.loads(json.dumps(env.parameter))
        config = config if config == env.parameter else None
    except (TypeError, ValueError):
        config = None
    return {"prompt": prompt, "answer": "" if reference is None else str(reference), "index": index,
            "gym_seed": gym_seed, "attempt": attempt, "threshold": float(env.passing_reward_threshold),
            "config": config, "seconds": time.perf_counter() - start}


@functools.lru_cache(maxsize=256)
def _regenerated(name: str, difficulty: int, index: int, gym_seed: int) -> Any:
    parameter = json.loads(_settings(name, difficulty)[index])
    return _generated(name, parameter, gym_seed)


def score_task(name: str, difficulty: int, data: dict[str, Any], answer: str) -> tuple[float, float, float]:
    """The environment's shaped score of ``<answer>{answer}</answer>`` and its passing threshold.

    Args:
        name: the RLVE-Gym identifier (``Maze``).
        difficulty: the problem's difficulty (to regenerate it when ``data["config"]`` is None).
        data: ``Problem.data`` of the problem (``index``, ``gym_seed``, ``threshold``, ``config``).
        answer: the final answer rlec extracted from the response.

    Returns:
        (score in [-1, 1] as RLVE-Gym's ``verifier`` reports it, threshold, seconds it took here).
    """
    from Gym.environments import identifier2environment

    start = time.perf_counter()
    if data.get("config") is not None:
        env = identifier2environment[name]()
        env.set_config({"seed": data["gym_seed"], "parameter": copy.deepcopy(data["config"]),
                        "passing_reward_threshold": data["threshold"]})
    else:
        env = _regenerated(name, difficulty, int(data["index"]), int(data["gym_seed"]))
    result = env.verifier(f"<answer>{answer}</answer>")
    return float(result["reward"]), float(env.passing_reward_threshold), time.perf_counter() - start
