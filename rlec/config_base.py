"""The ground floor of rlec's config: the folders, the one finding type, reading a key of a composed config.

Everything the algorithms (:mod:`rlec.algorithms`), the settings schema (:mod:`rlec.settings`) and the
reward need from the config lives here, so :mod:`rlec.config` (which also holds the rules that name
every registered algorithm, such as :func:`rlec.config.resume_differences`) may read the algorithm
registry without an import cycle. :mod:`rlec.config` re-exports every name of this module.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
CONFIG_DIR = REPO_ROOT / "megatron_configs"
# verl's tracker of the newest checkpoint in trainer.default_local_dir (its step number as text)
TRACKER = "latest_checkpointed_iteration.txt"
CLUSTER_CONFIG = "rlec"

__all__ = ["TRACKER", "CLUSTER_CONFIG", "CONFIG_DIR", "REPO_ROOT", "Finding", "flatten", "select"]


@dataclass(frozen=True)
class Finding:
    """One result of a config check: ``level`` is "error" (refuses the run) or "warning"; ``key`` the
    dotted setting concerned; ``message`` the value and the rule. The one finding type of rlec: the
    cluster rules (:mod:`rlec.rules.checks`), the layout rules and every algorithm's ``check``
    (:mod:`rlec.algorithms.base`) return it."""

    level: str
    key: str
    message: str

    def __str__(self) -> str:
        return f"{self.level.upper()} [{self.key}] {self.message}"


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


def flatten(cfg: Any, prefix: str = "") -> dict[str, Any]:
    """``{"a.b.c": leaf}`` of a nested config (``DictConfig`` or dict); lists are leaves."""
    try:
        from omegaconf import OmegaConf

        if OmegaConf.is_config(cfg):
            cfg = OmegaConf.to_container(cfg, resolve=True)
    except ImportError:  # pragma: no cover - omegaconf is a dependency
        pass
    out: dict[str, Any] = {}
    if isinstance(cfg, dict):
        for key, value in cfg.items():
            out.update(flatten(value, f"{prefix}{key}."))
        return out
    out[prefix[:-1]] = cfg
    return out
