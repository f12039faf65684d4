"""The local run's prompt source: a seeded, resumable sampler over the prepared train parquet.

Rows are the verl schema written by ``rlec.data.prepare`` (see ``docs/data.md``). Each epoch
visits every row once in an order drawn from ``numpy.random.default_rng([seed, epoch])``; the
sampler's whole state is ``(epoch, position)``, so a run resumed from a checkpoint draws exactly
the prompts an uninterrupted run would have drawn.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rlec.data.contract import check_row

REQUIRED_COLUMNS = ("data_source", "prompt", "reward_model", "extra_info")


@dataclass(frozen=True)
class PromptRow:
    """One training prompt.

    Attributes:
        uid: a unique id of this row (``"{question_id}/r{repeat}/{index}"``); the group key of
            the advantage.
        messages: chat messages (verl's ``prompt`` column).
        data_source: grader key (``rlec.grading.TASKS``).
        ground_truth: gold answer.
        extra_info: the row's ``extra_info`` dict (``target_p``, ``objective``, ...).
    """

    uid: str
    messages: list[dict[str, str]]
    data_source: str
    ground_truth: str
    extra_info: dict[str, Any]


def load_rows(path: str | Path) -> list[PromptRow]:
    """Read a prepared parquet file into :class:`PromptRow` objects.

    Raises:
        FileNotFoundError: the file does not exist.
        ValueError: a required column is missing or a row breaks the contract
            (:func:`rlec.data.contract.check_row`; the message names the file, row and key).
    """
    import pyarrow.parquet as pq

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: prepared training data not found (run `python -m rlec.data.prepare`)")
    table = pq.read_table(path)
    missing = [c for c in REQUIRED_COLUMNS if c not in table.column_names]
    if missing:
        raise ValueError(f"{path}: missing column(s) {missing}; expected verl's schema {list(REQUIRED_COLUMNS)}")
    rows = []
    for i, rec in enumerate(table.select(list(REQUIRED_COLUMNS)).to_pylist()):
        check_row(rec, f"{path}: row {i}")
        info = dict(rec["extra_info"] or {})
        uid = f"{info.get('question_id', i)}/r{info.get('repeat', 0)}/{info.get('index', i)}"
        messages = [dict(m) for m in rec["prompt"]]
        rows.append(PromptRow(uid, messages, rec["data_source"], rec["reward_model"]["ground_truth"], info))
    if not rows:
        raise ValueError(f"{path}: no rows")
    return rows


class PromptSampler:
    """Seeded epoch-wise sampling without replacement; state = (epoch, position).

    Args:
        num_rows: dataset size (>= 1).
        seed: base seed of the permutations.
    """

    def __init__(self, num_rows: int, seed: int) -> None:
        if num_rows < 1:
            raise ValueError(f"num_rows must be >= 1, got {num_rows}")
        self.num_rows, self.seed = int(num_rows), int(seed)
        self.epoch, self.position = 0, 0
        self._order = self._permutation(0)

    def _permutation(self, epoch: int) -> np.ndarray:
        return np.random.default_rng([self.seed, epoch]).permutation(self.num_rows)

    def next_indices(self, k: int) -> list[int]:
        """The next ``k`` row indices (crossing into the next epoch when needed)."""
        out: list[int] = []
        while len(out) < k:
            if self.position >= self.num_rows:
                self.epoch, self.position = self.epoch + 1, 0
                self._order = self._permutation(self.epoch)
            take = min(k - len(out), self.num_rows - self.position)
            out.extend(int(i) for i in self._order[self.position : self.position + take])
            self.position += take
        return out

    def state_dict(self) -> dict[str, int]:
        """JSON-serialisable state."""
        return {"num_rows": self.num_rows, "seed": self.seed, "epoch": self.epoch, "position": self.position}

    def load_state_dict(self, state: dict[str, int]) -> None:
        """Restore a state saved by :meth:`state_dict`.

        Raises:
            ValueError: the state belongs to a dataset of another size or another seed.
        """
        if int(state["num_rows"]) != self.num_rows or int(state["seed"]) != self.seed:
            raise ValueError(
                f"sampler state is for {state['num_rows']} rows / seed {state['seed']}, "
                f"but this run has {self.num_rows} rows / seed {self.seed}"
            )
        self.epoch, self.position = int(state["epoch"]), int(state["position"])
        self._order = self._permutation(self.epoch)
