"""``data.rlve`` of the config (an interpolation of ``rlec.rlve``): RLVE's settings, read and checked in one place.

:class:`RLVESettings` is the environment source's settings (:class:`rlec.environments.SourceConfig`,
which validates them on construction) plus the two keys its users read: ``enable`` (the switch)
and ``rows_per_epoch`` (the dataset). The cross-key rules (dataset class, dataloader workers,
files, trainer mode) are :meth:`rlec.algorithms.rlve.algorithm.RLVE.check`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rlec.algorithms.base import wrong_type
from rlec.config_base import Finding, select

SECTION = "data.rlve"
DEFAULT_ROWS_PER_EPOCH = 65_536
# data.custom_cls (path, name) of the RLVE dataset
RLVE_DATASET = ("pkg://rlec.verl_plugin.rlve_dataset", "RLVEDataset")

__all__ = ["DEFAULT_ROWS_PER_EPOCH", "RLVESettings", "RLVE_DATASET", "plain_section"]


def plain_section(cfg: Any) -> dict[str, Any]:
    """``data.rlve`` as a plain dict (interpolations resolved); ``{}`` when absent."""
    node = select(cfg, SECTION, {})
    try:
        from omegaconf import DictConfig, OmegaConf

        if isinstance(node, DictConfig):
            return OmegaConf.to_container(node, resolve=True)  # type: ignore[return-value]
    except ImportError:  # pragma: no cover - omegaconf is a dependency
        pass
    return dict(node or {})


@dataclass(frozen=True)
class RLVESettings:
    """``data.rlve`` (meaning and defaults: ``megatron_configs/algorithm/rlve.yaml``, docs/environments.md).

    Attributes:
        enable: the switch (``data.rlve.enable``).
        rows_per_epoch: environment rows per epoch of the training set (>= 1).
        source: the environment source's settings (:class:`rlec.environments.SourceConfig`).
    """

    enable: bool = False
    rows_per_epoch: int = DEFAULT_ROWS_PER_EPOCH
    source: Any = field(default=None)

    @classmethod
    def from_config(cls, cfg: Any) -> "RLVESettings":
        """Read ``data.rlve``.

        Raises:
            ValueError: a value of the wrong type or out of range, an unknown key
                (:meth:`rlec.environments.SourceConfig.from_mapping`), or ``rows_per_epoch`` < 1.
        """
        from rlec.environments import SourceConfig

        section = plain_section(cfg)
        enable, rows = section.get("enable", False), section.get("rows_per_epoch")
        for key, value, kind in (("enable", enable, bool), ("rows_per_epoch", rows, int)):
            problem = None if value is None else wrong_type(value, kind)
            if problem is not None:
                raise ValueError(f"{key}: {problem}")
        settings = cls(enable=bool(enable), rows_per_epoch=DEFAULT_ROWS_PER_EPOCH if rows is None else int(rows),
                       source=SourceConfig.from_mapping(section))
        for finding in settings.check():
            raise ValueError(finding.message)
        return settings

    def check(self) -> list[Finding]:
        """Errors for values out of range that :class:`SourceConfig` does not already refuse."""
        out = []
        if self.rows_per_epoch < 1:
            out.append(Finding("error", "rlec.rlve", f"rows_per_epoch must be >= 1, got {self.rows_per_epoch}"))
        tokens = getattr(self.source, "max_prompt_tokens", None)
        if tokens is not None and (isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 1):
            out.append(Finding("error", "rlec.rlve", f"max_prompt_tokens must be an int >= 1 or null, got {tokens!r}"))
        return out
