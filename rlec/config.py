"""The one config schema of rlec: verl's trainer config plus ``rlec.*``, composed by Hydra.

Cluster runs (``python -m verl.trainer.main_ppo --config-path megatron_configs --config-name rlec``)
and the local CPU run (``python -m rlec.local.runner``, config name ``local``) compose the same
files under ``megatron_configs/``: ``rlec.yaml`` holds every algorithm setting once, layouts,
precisions and algorithm overlays are groups, and ``local.yaml`` only changes scale (batch,
lengths, steps) and adds the ``rlec.local.*`` settings a CPU run needs. Every reader of the
config goes through :func:`select`, which accepts a composed ``DictConfig`` or a plain nested
dict (tests, JSON metadata).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

REPO_ROOT = Path(__file__).resolve().parents[1]
CONFIG_DIR = REPO_ROOT / "megatron_configs"
CLUSTER_CONFIG = "rlec"
LOCAL_CONFIG = "local"

__all__ = ["CLUSTER_CONFIG", "CONFIG_DIR", "LOCAL_CONFIG", "REPO_ROOT", "compose", "select"]


def select(cfg: Any, dotted: str, default: Any = None) -> Any:
    """``cfg[a][b][c]`` for ``"a.b.c"``, or ``default`` when a level is missing or None.

    Args:
        cfg: a composed ``DictConfig``, a plain nested dict, or None.
        dotted: the key path, e.g. ``"actor_rollout_ref.rollout.n"``.
        default: returned when any level is absent or holds None.
    """
    node = cfg
    for part in dotted.split("."):
        try:
            node = node[part]
        except (KeyError, TypeError, IndexError, AttributeError):
            return default
        if node is None:
            return default
    return node


def compose(overrides: Sequence[str] = (), config_name: str = CLUSTER_CONFIG, config_dir: str | Path = CONFIG_DIR) -> Any:
    """Compose a config the way ``verl.trainer.main_ppo --config-path DIR --config-name NAME`` does.

    Args:
        overrides: Hydra overrides (``key=value``, ``group=option``, ``+new.key=value``).
        config_name: ``rlec`` (cluster) or ``local`` (the CPU run).
        config_dir: the folder holding the YAML files.

    Returns:
        The composed ``omegaconf.DictConfig`` (struct mode: unknown keys are errors).

    Raises:
        hydra.errors.HydraException / omegaconf.errors.OmegaConfBaseException: an unknown group
            option or key, a bad override, a missing file.
    """
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(Path(config_dir).resolve()), version_base=None):
        return hydra_compose(config_name=config_name, overrides=list(overrides))
