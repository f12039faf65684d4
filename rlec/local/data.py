"""The local run's prompt source: verl's own dataset, sampler and stateful dataloader.

Exactly what verl's trainer builds in ``_init_dataloader``: ``create_rl_dataset`` (``RLHFDataset``
over the prepared parquet, or the class named by ``data.custom_cls``, e.g. rlec's procedural
environments), ``create_rl_sampler`` (seeded by ``data.seed``), and torchdata's
``StatefulDataLoader`` with verl's ``collate_fn``. Its ``state_dict`` (sampler position, and the
dataset's own state when it has one) goes into every local checkpoint, so a resumed run draws
exactly the prompts an uninterrupted one would. Epochs follow one another without end; the step
count is ``trainer.total_training_steps``.

Before verl reads a parquet file, every row is checked against rlec's data contract
(:func:`rlec.data.contract.check_row`), so a bad file fails with its path, row and key instead of
a traceback from inside ``datasets``.
"""

from __future__ import annotations

import contextlib
import io
from pathlib import Path
from typing import Any, Iterator

from rlec.config import select
from rlec.data.contract import check_row

REQUIRED_COLUMNS = ("data_source", "prompt", "reward_model", "extra_info")


def check_parquet(path: str | Path) -> int:
    """Check a prepared parquet file against the data contract.

    Returns:
        The number of rows (>= 1).

    Raises:
        FileNotFoundError: the file does not exist.
        ValueError: not a readable parquet file, a required column is missing, no rows, or a row
            breaks the contract (the message names the file, row and key).
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: prepared data not found (run `python -m rlec.data.prepare`)")
    try:
        table = pq.read_table(path)
    except (pa.ArrowException, OSError) as exc:
        raise ValueError(f"{path}: not a readable parquet file ({exc})") from None
    missing = [c for c in REQUIRED_COLUMNS if c not in table.column_names]
    if missing:
        raise ValueError(f"{path}: missing column(s) {missing}; expected verl's schema {list(REQUIRED_COLUMNS)}")
    if table.num_rows == 0:
        raise ValueError(f"{path}: no rows")
    for i, row in enumerate(table.select(list(REQUIRED_COLUMNS)).to_pylist()):
        check_row(row, f"{path}: row {i}")
    return table.num_rows


class PromptLoader:
    """Batches of ``data.train_batch_size`` prompts from verl's dataloader, epoch after epoch.

    Args:
        cfg: the composed local config (``data.*``).
        tokenizer: the policy's tokenizer (verl's dataset filters overlong prompts with it).

    Attributes:
        dataset: the dataset object (``RLHFDataset`` or ``data.custom_cls``).
        epoch: epochs completed.

    Raises:
        ValueError: the dataset holds fewer prompts than one batch.
    """

    def __init__(self, cfg: Any, tokenizer: Any) -> None:
        from torchdata.stateful_dataloader import StatefulDataLoader
        from verl.trainer.ppo.utils import create_rl_dataset, create_rl_sampler
        from verl.utils.dataset.rl_dataset import collate_fn

        with contextlib.redirect_stdout(io.StringIO()):  # verl prints "dataset len: N"
            self.dataset = create_rl_dataset(select(cfg, "data.train_files"), cfg.data, tokenizer, None, is_train=True,
                                             max_samples=int(select(cfg, "data.train_max_samples", -1)))
        batch_size = int(cfg.data.train_batch_size)
        if len(self.dataset) < batch_size:
            raise ValueError(f"{select(cfg, 'data.train_files')}: {len(self.dataset)} prompt(s) after filtering, fewer than "
                             f"data.train_batch_size={batch_size}")
        self.loader = StatefulDataLoader(dataset=self.dataset, batch_size=batch_size, num_workers=0, drop_last=True,
                                         collate_fn=collate_fn, sampler=create_rl_sampler(cfg.data, self.dataset))
        self.epoch = 0
        self._it: Iterator[dict[str, Any]] | None = None

    def __len__(self) -> int:
        """Batches per epoch."""
        return len(self.loader)

    def next_batch(self) -> dict[str, Any]:
        """The next batch: verl's collated dict (``raw_prompt``, ``data_source``, ``reward_model``,
        ``extra_info``, ... as numpy object arrays of length ``train_batch_size``)."""
        if self._it is None:
            self._it = iter(self.loader)
        try:
            return next(self._it)
        except StopIteration:
            self.epoch += 1
            self._it = iter(self.loader)
            return next(self._it)

    def state_dict(self) -> dict[str, Any]:
        """The dataloader's state (sampler position, dataset state) and the epoch count."""
        return {"epoch": self.epoch, "loader": self.loader.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output (before the first :meth:`next_batch`)."""
        self.epoch = int(state["epoch"])
        self.loader.load_state_dict(state["loader"])
        self._it = None
