"""The prepared-parquet contract, checked where rows are read (training and evaluation).

Rows follow verl's schema (docs/data.md, "Data contract"): ``data_source`` (a key of
``rlec.grading.TASKS`` or an environment's ``rlve/<name>``), ``prompt`` (chat messages), ``reward_model.ground_truth`` and
``extra_info`` (``question_id``, ``task_text``, ``target_p``, ``objective``, ...). Readers call
:func:`field` and :func:`check_row` so a bad row fails with its file, row and key before any
model work starts.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlec.grading import TASKS, has_grader
from rlec.reward.score import target_of

if TYPE_CHECKING:
    from rlec.data.lengths import PromptLimit


ROWS_PER_BATCH = 4096  # rows of a parquet file read at once by check_parquet (memory bound)
REQUIRED_COLUMNS = ("data_source", "prompt", "reward_model", "extra_info")  # the columns check_row reads
# the roles of chat messages a chat template renders (Qwen3's renders a message of any other role as nothing: the
# question vanishes from the prompt without a word)
CHAT_ROLES = ("system", "user", "assistant", "tool")


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
        ContractError: unknown ``data_source``, empty ``prompt``, a message whose role is not one of
            :data:`CHAT_ROLES` or whose content is not a string, an empty gold answer, or a bad
            ``extra_info.target_p`` / ``objective`` (the message names ``where`` and the key).
    """
    data_source = field(row, "data_source", where)
    if not has_grader(data_source):
        raise ContractError(f"{where}: data_source {data_source!r} has no grader; known: {sorted(TASKS)}")
    prompt = field(row, "prompt", where)
    if not isinstance(prompt, (list, tuple)) or not prompt or not all(isinstance(m, dict) and "content" in m for m in prompt):
        raise ContractError(f"{where}: key 'prompt' must be a non-empty list of chat messages, got {prompt!r:.80}")
    for j, message in enumerate(prompt):
        role, content = message.get("role"), message["content"]
        if role not in CHAT_ROLES:  # verl renders it through the chat template, which drops or mangles it
            raise ContractError(f"{where}: key 'prompt[{j}].role' must be one of {list(CHAT_ROLES)}, got {role!r:.80}: the "
                                "chat template renders another role as nothing (Qwen3's) or as text the model never saw")
        if not isinstance(content, str):  # verl's length filter fails on it and drops the row without a word
            raise ContractError(f"{where}: key 'prompt[{j}].content' must be a string, got {content!r:.80}: verl's prompt "
                                "filter fails on it and drops the row without a word")
    gold = field(row, "reward_model.ground_truth", where)
    if not isinstance(gold, str) or not gold.strip():
        raise ContractError(f"{where}: key 'reward_model.ground_truth' must be a non-empty string, got {gold!r}")
    extra = field(row, "extra_info", where)
    try:
        target_of(extra)
    except ValueError as exc:
        raise ContractError(f"{where}: {exc}") from None
    return row


def check_parquet(path: str | Path, prompt_limit: PromptLimit | None = None) -> int:
    """Check every row of a prepared parquet file against the data contract (:func:`check_row`), read in batches of
    :data:`ROWS_PER_BATCH` rows (memory bound): what every launch runs before Ray starts (:mod:`rlec.cluster.paths`).
    With ``prompt_limit``, also every prompt's length in tokens, chat template applied, as verl's prompt filter counts
    it (:class:`rlec.data.lengths.PromptLimit`): verl drops a longer row without a word (or fails on it in a worker).

    Returns:
        The number of rows (>= 1).

    Raises:
        FileNotFoundError: the file does not exist (or is a folder).
        ValueError: not a readable parquet file, a column of :data:`REQUIRED_COLUMNS` missing, or no rows;
            :class:`ContractError` (a ValueError) for a row that breaks the contract (the message
            names the file, the row and the key).
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = Path(os.path.expanduser(str(path)))
    if not path.is_file():
        what = "is a folder, expected a parquet file" if path.is_dir() else "does not exist"
        raise FileNotFoundError(f"{path}: {what}; prepare it with python -m rlec.data.prepare (docs/cluster.md section 2)")
    try:
        reader = pq.ParquetFile(path)
        rows = reader.metadata.num_rows
        missing = [c for c in REQUIRED_COLUMNS if c not in reader.schema_arrow.names]
        if missing:
            raise ValueError(f"{path}: missing column(s) {missing}; expected verl's schema {list(REQUIRED_COLUMNS)}")
        if not rows:
            raise ValueError(f"{path}: no rows")
        start = 0
        for batch in reader.iter_batches(batch_size=ROWS_PER_BATCH, columns=list(REQUIRED_COLUMNS)):
            for i, rec in enumerate(batch.to_pylist(), start):
                check_row(rec, f"{path}: row {i}")
                if prompt_limit is not None:
                    where = f"{path}: row {i}"
                    try:
                        tokens = prompt_limit.excess(rec["prompt"])
                    except Exception as exc:  # the template itself fails: verl's filter drops the row for it
                        raise ContractError(f"{where}: key 'prompt': the chat template fails on it ({type(exc).__name__}: "
                                            f"{exc}): verl's prompt filter would drop the row without a word") from None
                    if tokens is not None:
                        raise ContractError(f"{where}: key 'prompt' is {tokens:,} tokens with the chat template, more than "
                                            f"data.max_prompt_length = {prompt_limit.limit:,}: verl's prompt filter "
                                            "(data.filter_overlong_prompts) would drop the row without a word")
            start += batch.num_rows
    except (OSError, pa.ArrowException) as exc:
        raise ValueError(f"{path}: not a readable parquet file ({exc})") from None
    return rows
