"""``rlec.rlve`` of the config: RLVE's settings, their one home, read and checked in one place.

:class:`RLVESettings` is the environment source's settings (:class:`rlec.environments.SourceConfig`,
its fields and defaults) plus the two keys its users read: ``enable`` (the switch) and
``rows_per_epoch`` (the dataset). It is read by the generic reader (:func:`rlec.settings.read_section`:
unknown keys and wrong types refused naming ``rlec.rlve.<key>``) and checked by one
:meth:`RLVESettings.check` returning findings. The cross-key rules (dataset class, dataloader
workers, files, trainer mode, verl's copy) are :meth:`rlec.algorithms.rlve.algorithm.RLVE.check`.

verl's side (``megatron_configs/algorithm/rlve.yaml`` sets it from the home): ``data.custom_cls``
(the RLVE dataset) and ``data.rlve: ${rlec.rlve}`` (:data:`VERL_COPY`), because verl hands a dataset
only its ``data`` section; the dataset reads that copy from the section it is handed
(``RLVESettings.from_config(data, DATA_COPY)``), everything else the home, and
:meth:`rlec.algorithms.rlve.algorithm.RLVE.check` refuses a copy that differs from it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rlec.config_base import Finding
from rlec.environments.source import SETTINGS_KEY, SourceConfig
from rlec.settings import read_section

SECTION = SETTINGS_KEY  # rlec.rlve
# what the RLVE dataset reads (verl hands it only `data`): the overlay's interpolation ${rlec.rlve}, as its key in
# verl's data section and in the whole config
DATA_COPY = "rlve"
VERL_COPY = f"data.{DATA_COPY}"
DEFAULT_ROWS_PER_EPOCH = 65_536
# data.custom_cls (path, name) of the RLVE dataset
RLVE_DATASET = ("pkg://rlec.verl_plugin.rlve_dataset", "RLVEDataset")

__all__ = ["DATA_COPY", "DEFAULT_ROWS_PER_EPOCH", "RLVESettings", "RLVE_DATASET", "SECTION", "VERL_COPY"]


@dataclass(frozen=True)
class RLVESettings(SourceConfig):
    """``rlec.rlve`` (meaning: ``megatron_configs/algorithm/rlve.yaml``, docs/environments.md; defaults:
    these fields and :class:`rlec.environments.SourceConfig`'s, pinned equal to the overlay's by
    ``tests/environments/test_source.py``).

    Attributes:
        enable: the switch (``rlec.rlve.enable``).
        rows_per_epoch: environment rows per epoch of the training set (>= 1).
        (the others): the environment source's settings (:class:`rlec.environments.SourceConfig`).
    """

    enable: bool = False
    rows_per_epoch: int = DEFAULT_ROWS_PER_EPOCH

    @property
    def source(self) -> SourceConfig:
        """The environment source's settings (validated, resolved when built by :meth:`from_config`)."""
        return self

    @classmethod
    def read(cls, cfg: Any, key: str = SECTION) -> "RLVESettings":
        """Read ``rlec.rlve`` (:func:`rlec.settings.read_section`, keys named ``rlec.rlve.<key>``) without range checks.

        Args:
            cfg: the composed config, or verl's ``data`` section (what verl hands a dataset).
            key: the section read, relative to ``cfg``: the home (default), or verl's copy (:data:`VERL_COPY` in the
                composed config, :data:`DATA_COPY` in the ``data`` section).

        Raises:
            rlec.settings.SettingError: an unknown key or a value not of its type.
        """
        return read_section(cls, cfg, key, SECTION)  # the copy's keys are named as the home's, the keys users set

    @classmethod
    def from_config(cls, cfg: Any, key: str = SECTION) -> "RLVESettings":
        """Read ``key`` (:meth:`read`), check (:meth:`check`) and resolve the environment names (:meth:`SourceConfig.resolved`).

        Raises:
            ValueError: an unknown key or a value of the wrong type (:class:`rlec.settings.SettingError`), or the
                first error of :meth:`check` (its message names the full key).
        """
        return cls.read(cfg, key).checked()

    def checked(self) -> "RLVESettings":
        """These settings, environment names resolved (:meth:`SourceConfig.resolved`), when :meth:`check` finds no
        error (what :meth:`from_config` returns; the algorithm reads its section once, ``run.section``, and checks
        it here).

        Raises:
            ValueError: the first error of :meth:`check` (its message names the full key).
        """
        for finding in self.check():
            if finding.level == "error":
                raise ValueError(finding.message)
        return self.resolved()

    def check(self, prefix: str = SETTINGS_KEY) -> list[Finding]:
        """One error per value out of range: :meth:`SourceConfig.check` and ``rows_per_epoch`` >= 1."""
        out = super().check(prefix)
        if self.rows_per_epoch < 1:
            out.append(Finding("error", f"{prefix}.rows_per_epoch", f"{prefix}.rows_per_epoch must be >= 1, "
                               f"got {self.rows_per_epoch}"))
        return out
