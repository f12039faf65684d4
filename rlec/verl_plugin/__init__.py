"""rlec's registrations in verl 0.9.1: reward manager, trainers, advantage estimator, agent loop.

This package is the only part of rlec that registers with verl. Import it in every Ray process
(the reward-loop workers run the reward manager, the TaskRunner builds the trainer) by setting

    VERL_USE_EXTERNAL_MODULES=rlec.verl_plugin

in the launching shell (``verl/__init__.py`` imports the listed modules) and, for Ray clusters
started with ``ray start``, also in ``ray_kwargs.ray_init.runtime_env.env_vars`` (workers inherit
the environment of ``ray start``, not of the driver). ``megatron_configs/rlec.yaml`` and
``tools/run_megatron_rlec.sh`` do both. Without it a worker dies with ``Unknown reward manager: rlec``.

Registered on import:

- :mod:`rlec.verl_plugin.reward_manager`: reward manager ``rlec``
  (``reward.reward_manager.source=register``, ``name=rlec``);
- :mod:`rlec.verl_plugin.trainers`: ``trainer.v1.trainer_mode`` = ``rlec_sync``,
  ``rlec_colocate_async``, ``rlec_separate_async`` (with :class:`~rlec.verl_plugin.trainers.AlgorithmsMixin`,
  which drives every enabled algorithm of :mod:`rlec.algorithms.registry`);
- :mod:`rlec.verl_plugin.estimators`: advantage estimator ``rlec_passk``
  (``algorithm.adv_estimator=rlec_passk``);
- :mod:`rlec.verl_plugin.cpu_rollout`: rollout ``rlec_hf`` (transformers on CPU,
  ``actor_rollout_ref.rollout.name=rlec_hf``);
- :mod:`rlec.verl_plugin.cpu`: on a machine without CUDA and with ``VERL_PLATFORM=cpu``, verl
  platform ``cpu``, the Megatron engine for it and the CPU shims;
- :mod:`rlec.verl_plugin.e3`: agent loop ``rlec_e3_agent``
  (``actor_rollout_ref.rollout.agent.default_agent_loop=rlec_e3_agent``).

Loaded by path, not registered: :mod:`rlec.verl_plugin.rlve_dataset` (``data.custom_cls``, the
RLVE environment dataset; ``megatron_configs/algorithm/rlve.yaml``).
"""

from __future__ import annotations

# first: verl's modules ask for the platform at import time
from rlec.verl_plugin.cpu import enable_cpu

enable_cpu()

from rlec.verl_plugin.cpu_rollout import ROLLOUT_NAME as CPU_ROLLOUT, register_rollout  # noqa: E402
from rlec.verl_plugin.e3 import E3_AGENT_LOOP, E3AgentLoop  # noqa: E402
from rlec.verl_plugin.estimators import PASSK_ESTIMATOR, compute_rlec_passk_advantage  # noqa: E402
from rlec.verl_plugin.reward_manager import REWARD_MANAGER_NAME, RLECRewardManager, global_step_of  # noqa: E402
from rlec.verl_plugin.trainers import (  # noqa: E402
    AlgorithmsMixin,
    RLECColocateAsyncTrainer,
    RLECMetricsMixin,
    RLECSeparateAsyncTrainer,
    RLECSyncTrainer,
)

PLUGIN_MODULE = "rlec.verl_plugin"

register_rollout()

__all__ = [
    "CPU_ROLLOUT",
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
