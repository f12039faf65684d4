"""``RLVEDataset``: verl's ``data.custom_cls`` that generates environment problems on the fly (RLVE).

verl 0.9.1 has no curriculum sampler; its ``data.custom_cls`` hook builds the training and the
validation dataset as ``cls(data_files, tokenizer, processor, config=data config, max_samples)``
(``verl/trainer/ppo/utils.py``). This class is verl's ``RLHFDataset`` plus an
:class:`rlec.environments.EnvironmentSource`:

- Training set (``data_files`` == ``data.train_files`` and ``rlec.rlve.enable``): indices
  ``[0, S)`` are the static rows of ``data.train_files`` (none with ``data.train_files=[]``),
  indices ``[S, S + rows_per_epoch)`` are environment rows. verl's sampler shuffles them together;
  each environment index yields the source's *next* row, generated at the controllers' current
  difficulty, so an epoch mixes S static rows with ``rows_per_epoch`` fresh problems.
- Validation set (any other ``data_files``): exactly ``RLHFDataset`` (use the fixed
  environment test set of ``python -m rlec.data.prepare --environments ...`` there).

The dataset is ``Stateful`` (``state_dict`` / ``load_state_dict``), so verl's
``StatefulDataLoader`` saves the source's row counter and controllers into ``data.pt`` with every
checkpoint and restores them on resume. That needs ``data.dataloader_num_workers=0`` (a worker
process would hold its own copy of the controllers, never updated by the trainer);
``rlec.cluster.config_check`` refuses anything else. The trainer side
(:class:`rlec.algorithms.rlve.algorithm.RLVE`, driven by :class:`rlec.verl_plugin.trainers.AlgorithmsMixin`)
updates the controllers after every step.

Settings: ``rlec.rlve`` (their home), read here from verl's copy ``data.rlve`` (the interpolation
``${rlec.rlve}`` in ``megatron_configs/algorithm/rlve.yaml``: verl hands a dataset only its ``data``
section; :meth:`rlec.algorithms.rlve.algorithm.RLVE.check` refuses a copy that differs from the
home): the :class:`rlec.environments.SourceConfig` fields plus ``enable`` and ``rows_per_epoch``.
"""

from __future__ import annotations

import logging
from typing import Any, Mapping

import datasets
import torch
from omegaconf import ListConfig
from verl.utils.dataset.rl_dataset import RLHFDataset

from rlec.algorithms.rlve.settings import DATA_COPY, SECTION, RLVESettings
from rlec.environments import EnvironmentSource
from rlec.prompts import build_messages

logger = logging.getLogger(__name__)

__all__ = ["RLVEDataset"]

PROBE_SEEDS = (1, 3, 5)  # odd: evaluation-style seeds, never training problems


def _file_list(files: Any) -> list[str]:
    if files is None:
        return []
    if isinstance(files, (list, tuple, ListConfig)):
        return [str(f) for f in files]
    return [str(files)]


class RLVEDataset(RLHFDataset):
    """verl's RLHFDataset with environment rows generated on the fly (see the module docstring).

    Args:
        data_files: parquet files (verl passes ``data.train_files`` or ``data.val_files``); may be
            empty for the training set (environments only).
        tokenizer, processor, config, max_samples: as for ``RLHFDataset`` (``config`` is verl's
            ``data`` section).

    Attributes:
        rlve_source: the :class:`EnvironmentSource` (None for the validation set or when disabled).
        rows_per_epoch: environment rows per epoch (0 without a source).

    Raises:
        ValueError: bad ``rlec.rlve`` settings (read from verl's copy ``data.rlve``); ``data.train_files`` equal to
            ``data.val_files`` while RLVE is enabled (the two sets are told apart by their files); an environment whose
            largest prompt exceeds ``data.max_prompt_length``.
    """

    def __init__(self, data_files, tokenizer, config, processor=None, max_samples: int = -1):
        # the one reader and check, on verl's copy data.rlve (${rlec.rlve}; verl hands a dataset only `data`)
        settings = RLVESettings.from_config(config, DATA_COPY)
        train_files, val_files = _file_list(config.get("train_files")), _file_list(config.get("val_files"))
        enabled = settings.enable
        if enabled and train_files == val_files:
            raise ValueError(f"{SECTION}.enable: data.train_files and data.val_files are the same list "
                             f"({train_files}); RLVEDataset tells the training set from the validation set by its files")
        is_train = enabled and _file_list(data_files) == train_files
        self.rlve_source: EnvironmentSource | None = None
        self.rows_per_epoch = 0
        super().__init__(data_files=_file_list(data_files), tokenizer=tokenizer, config=config, processor=processor,
                         max_samples=max_samples)
        if not is_train:
            return
        self.rlve_source = EnvironmentSource(settings.source)
        self.rows_per_epoch = settings.rows_per_epoch
        self._check_prompt_lengths()
        logger.info("RLVE training set: %d static rows + %d environment rows per epoch; environments %s",
                    self.static_rows, self.rows_per_epoch, list(self.rlve_source.environments))

    # ---- files: an empty training file list means environments only ----
    def _read_files_and_tokenize(self):
        if not self.data_files:
            self.dataframe = datasets.Dataset.from_dict({})
            return
        super()._read_files_and_tokenize()

    @property
    def static_rows(self) -> int:
        """Rows from ``data_files`` (indices ``[0, static_rows)``)."""
        return len(self.dataframe)

    def __len__(self) -> int:
        return self.static_rows + self.rows_per_epoch

    def __getitem__(self, item):
        if self.rlve_source is None or item < self.static_rows:
            return super().__getitem__(item)
        if not 0 <= item < len(self):
            raise IndexError(f"index {item} out of range for {len(self)} rows")
        return self._verl_row(self.rlve_source.next_row())

    def _verl_row(self, row: dict[str, Any]) -> dict[str, Any]:
        """What ``RLHFDataset.__getitem__`` returns for a text-only row (tests/verl_plugin/test_rlve_dataset.py
        checks the two agree key by key)."""
        row["raw_prompt"] = self._build_messages(row, key=self.prompt_key)
        row["dummy_tensor"] = torch.tensor([0], dtype=torch.uint8)
        row["index"] = row["extra_info"]["index"]
        row["tools_kwargs"] = {}
        row["interaction_kwargs"] = {}
        return row

    def _check_prompt_lengths(self) -> None:
        """Refuse a run whose environments can produce prompts longer than ``data.max_prompt_length``:
        each environment's problems at its highest reachable difficulty, at the longest target."""
        limit = int(self.config.get("max_prompt_length", 1024))
        kwargs = dict(self.apply_chat_template_kwargs or {})
        for name, controller in self.rlve_source.controllers.items():
            if ":" in name:  # RLVE-Gym's: the cap already comes from measured prompt tokens (rlve.max_prompt_tokens)
                continue
            if controller.maximum is None:
                logger.warning("RLVE: environment %s has no maximum difficulty; prompt lengths are not bounded", name)
                continue
            env = self.rlve_source.environments[name]
            longest = 0
            for seed in PROBE_SEEDS:
                problem = env.generate(seed, controller.maximum)
                messages = build_messages(problem.prompt, 0.55)
                ids = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, **kwargs)
                if isinstance(ids, Mapping):
                    ids = ids["input_ids"]
                longest = max(longest, len(ids))
            if longest > limit:
                raise ValueError(f"RLVE environment {name!r} at its maximum difficulty {controller.maximum} gives prompts "
                                 f"of {longest} tokens > data.max_prompt_length {limit}; lower "
                                 f"rlec.rlve.difficulty.{name}.maximum or raise data.max_prompt_length")

    # ---- Stateful: verl's StatefulDataLoader saves this into data.pt ----
    def state_dict(self) -> dict[str, Any]:
        """``{"rlve": EnvironmentSource.state_dict()}``, or ``{}`` without a source."""
        return {"rlve": self.rlve_source.state_dict()} if self.rlve_source is not None else {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output (a state without ``rlve`` leaves the source fresh)."""
        if self.rlve_source is not None and state and state.get("rlve") is not None:
            self.rlve_source.load_state_dict(state["rlve"])
