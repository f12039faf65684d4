"""Field names of Megatron's config dataclasses, for checking override keys before a run.

verl passes ``actor_rollout_ref.actor.megatron.override_transformer_config.*`` to Megatron's
``TransformerConfig`` and ``actor.optim.override_optimizer_config.*`` to its ``OptimizerConfig``;
a misspelt key only fails on the cluster, inside a Ray worker. The pre-launch check
(``rlec.cluster.config_check``) asks this module (the only package that imports Megatron) for the names and
hands them to ``rlec.rules.checks``, which imports no ``rlec.megatron``.
"""

from __future__ import annotations

import dataclasses
import importlib.util

__all__ = ["config_field_names"]


def config_field_names() -> tuple[frozenset[str], frozenset[str]] | None:
    """``(TransformerConfig fields, OptimizerConfig fields)`` of the installed megatron-core.

    Returns:
        The two sets of field names, or ``None`` when megatron-core is not installed.
    """
    if importlib.util.find_spec("megatron") is None or importlib.util.find_spec("megatron.core") is None:
        return None
    from megatron.core.optimizer.optimizer_config import OptimizerConfig
    from megatron.core.transformer.transformer_config import TransformerConfig

    return (frozenset(f.name for f in dataclasses.fields(TransformerConfig)),
            frozenset(f.name for f in dataclasses.fields(OptimizerConfig)))
