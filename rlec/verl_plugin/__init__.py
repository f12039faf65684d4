"""rlec's registrations in verl 0.9.1: reward manager, trainers, advantage estimator, agent loop.

This package (and, on CPU only, the CPU wing :mod:`rlec.cpu`) is the only part of rlec that registers with verl.
Import it in every Ray process
(the reward-loop workers run the reward manager, the TaskRunner builds the trainer) by setting

    VERL_USE_EXTERNAL_MODULES=rlec.verl_plugin

in the launching shell (``verl/__init__.py`` imports the listed modules) and, for Ray clusters
started with ``ray start``, also in ``ray_kwargs.ray_init.runtime_env.env_vars`` (workers inherit
the environment of ``ray start``, not of the driver). ``megatron_configs/rlec.yaml`` and
``tools/run_megatron_rlec.sh`` do both. Without it a worker dies with ``Unknown reward manager: rlec``.

Registered when the process imports the verl module each registers with (a post-import hook,
``wrapt.register_post_import_hook``; at once where that module is already loaded), so a process
imports only what it uses: verl's load balancer, reward loop and the rollout server never import
verl's trainer or Megatron for rlec's sake (about 3 CPU-seconds each, in every launch):

- :mod:`rlec.verl_plugin.reward_manager` (on ``verl.experimental.reward_loop.reward_manager``): reward
  manager ``rlec`` (``reward.reward_manager.source=register``, ``name=rlec``);
- :mod:`rlec.verl_plugin.trainers` (on ``verl.trainer.ppo.v1``): ``trainer.v1.trainer_mode`` = ``rlec_sync``,
  ``rlec_colocate_async``, ``rlec_separate_async`` (with :class:`~rlec.verl_plugin.trainers.AlgorithmsMixin`,
  which drives every enabled algorithm of :mod:`rlec.algorithms.registry`);
- :mod:`rlec.verl_plugin.estimators` (on ``verl.trainer.ppo.core_algos``): advantage estimator ``rlec_passk``
  (``algorithm.adv_estimator=rlec_passk``);
- :mod:`rlec.verl_plugin.e3` (on ``verl.experimental.agent_loop``): agent loop ``rlec_e3_agent``
  (``actor_rollout_ref.rollout.agent.default_agent_loop=rlec_e3_agent``).

Registered on import of this package: with ``RLEC_LAYER_SPEC=local`` (a GPU node without Transformer Engine)
:mod:`rlec.verl_plugin.local_spec` swaps verl's mbridge bridge for rlec's local-spec one when verl's engine module is
imported. The classes above are attributes of this package too (imported on first use).

Not here: running verl on CPU. The CPU wing :mod:`rlec.cpu` (verl platform ``cpu``, its Megatron engine and shims, the
``rlec_hf`` rollout, the scripted answers of the CPU run's agent loops, the induced mismatch) is a second external
module that only the CPU layout names (``VERL_USE_EXTERNAL_MODULES=rlec.cpu,rlec.verl_plugin``:
``megatron_configs/layout/cpu.yaml``, ``tools/run_megatron_rlec.sh``); nothing in this package imports it
(import-linter contract "GPU plugins never import the CPU wing", ``tests/verl_plugin/test_gpu_without_cpu_wing.py``).
What the two share is :mod:`rlec.verl_plugin.cpu_interface` (names, no CPU code).

Loaded by path, not registered: :mod:`rlec.verl_plugin.rlve_dataset` (``data.custom_cls``, the
RLVE environment dataset; ``megatron_configs/algorithm/rlve.yaml``).
"""

from __future__ import annotations

import importlib
from typing import Any

import wrapt

from rlec.verl_plugin.local_spec import enable_local_spec

enable_local_spec()  # RLEC_LAYER_SPEC=local: a GPU node without TE

PLUGIN_MODULE = "rlec.verl_plugin"

# verl's module -> rlec's module that registers with it (imported right after verl's, in any process that imports it)
ON_IMPORT: dict[str, str] = {
    "verl.experimental.reward_loop.reward_manager": "rlec.verl_plugin.reward_manager",
    "verl.trainer.ppo.v1": "rlec.verl_plugin.trainers",
    "verl.trainer.ppo.core_algos": "rlec.verl_plugin.estimators",
    "verl.experimental.agent_loop": "rlec.verl_plugin.e3",
}
# the names this package exports -> the module that defines them
_EXPORTS: dict[str, str] = {
    "E3_AGENT_LOOP": "rlec.verl_plugin.e3", "E3AgentLoop": "rlec.verl_plugin.e3",
    "PASSK_ESTIMATOR": "rlec.verl_plugin.estimators", "compute_rlec_passk_advantage": "rlec.verl_plugin.estimators",
    "REWARD_MANAGER_NAME": "rlec.verl_plugin.reward_manager", "RLECRewardManager": "rlec.verl_plugin.reward_manager",
    "global_step_of": "rlec.verl_plugin.reward_manager",
    **{name: "rlec.verl_plugin.trainers" for name in ("AlgorithmsMixin", "RLECColocateAsyncTrainer", "RLECMetricsMixin",
                                                     "RLECSeparateAsyncTrainer", "RLECSyncTrainer")},
}

for _verl_module, _ours in ON_IMPORT.items():
    wrapt.register_post_import_hook(lambda _module, ours=_ours: importlib.import_module(ours), _verl_module)


def __getattr__(name: str) -> Any:
    """The exported classes and names, imported from their module on first use (PEP 562)."""
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "E3_AGENT_LOOP",
    "PASSK_ESTIMATOR",
    "PLUGIN_MODULE",
    "AlgorithmsMixin",
    "E3AgentLoop",
    "compute_rlec_passk_advantage",
    "REWARD_MANAGER_NAME",
    "RLECColocateAsyncTrainer",
    "RLECMetricsMixin",
    "RLECRewardManager",
    "RLECSeparateAsyncTrainer",
    "RLECSyncTrainer",
    "global_step_of",
]
