"""The prepared-parquet contract, checked where rows are read (training and evaluation).

Rows follow verl's schema (docs/data.md, "Data contract"): ``data_source`` (a key of
``rlec.grading.TASKS`` or an environment's ``rlve/<name>``), ``prompt`` (chat messages), ``reward_model.ground_truth`` and
``extra_info`` (``question_id``, ``task_text``, ``target_p``, ``objective``, ...). Readers call
:func:`field` and :func:`check_row` so a bad row fails with its file, row and key before any
model work starts.
"""

from __future__ import annotations

from typing import Any

from rlec.grading import TASKS, has_grader
from rlec.reward.score import target_of


class ContractError(ValueError):
    """A row breaks the data contract (the message names the file, the row and the key)."""


def field(row: dict[str, Any], path: str, where: str) -> Any:
    """``row[a][b]...`` for ``path = "a.b"``.

    Raises:
        ValueError: a missing key (the message names ``where`` and the key).
    """
    value: Any = row
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            raise ContractError(f"{where}: missing key {path!r}")
        value = value[part]
    return value


def check_row(row: dict[str, Any], where: str) -> dict[str, Any]:
    """Validate the keys every consumer needs; returns ``row`` unchanged.

    Raises:
        ContractError: unknown ``data_source``, empty ``prompt`` or gold answer, or a bad
            ``extra_info.target_p`` / ``objective`` (the message names ``where`` and the key).
    """
    data_source = field(row, "data_source", where)
    if not has_grader(data_source):
        raise ContractError(f"{where}: data_source {data_source!r} has no grader; known: {sorted(TASKS)}")
    prompt = field(row, "prompt", where)
    if not isinstance(prompt, (list, tuple)) or not prompt or not all(isinstance(m, dict) and "content" in m for m in prompt):
        raise ContractError(f"{where}: key 'prompt' must be a non-empty list of chat messages, got {prompt!r:.80}")
    gold = field(row, "reward_model.ground_truth", where)
    if not isinstance(gold, str) or not gold.strip():
        raise ContractError(f"{where}: key 'reward_model.ground_truth' must be a non-empty string, got {gold!r}")
    extra = field(row, "extra_info", where)
    try:
        target_of(extra)
    except ValueError as exc:
        raise ContractError(f"{where}: {exc}") from None
    return row

