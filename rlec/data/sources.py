"""Parse and validate DAPO-Math and HotpotQA records into typed items.

Math records (``DAPO_JSON``), one of:

- DAPO-Math-17k as distributed: ``data_source`` "math_dapo", ``prompt`` = one user message whose
  content wraps the problem in :data:`DAPO_PREFIX` ... :data:`DAPO_SUFFIX` (the bare problem is
  recovered; content without the wrapper is taken as the problem itself), ``ability``,
  ``reward_model`` {``ground_truth``, ``style``}, ``extra_info`` {``index``};
- plain records: ``problem`` (or ``question``) and ``answer``, optional ``id`` / ``index``.

The question id is the DAPO ``extra_info.index`` (or the plain record's id); without one it is
``math-<sha1 of the normalised problem>``, stable across runs.

HotpotQA records (``HOTPOT_TRAIN_JSON`` / ``HOTPOT_TEST_JSON``): ``_id`` (or ``id``), ``question``,
``answer``, ``context`` = [[title, [sentence, ...]], ...] or the dict-of-lists form
{``title``: [...], ``sentences``: [[...], ...]}, ``supporting_facts`` = [[title, sentence_id], ...]
or {``title``: [...], ``sent_id``: [...]}, optional ``type`` and ``level``. A record that carries
``drop_scheme`` (and optionally ``dropped_titles``) is already modified and kept as given.

Duplicate ids: the same id with the same content is collapsed (counted); the same id with
different content is a :class:`~rlec.data.readers.DataError`.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field, fields
from typing import Any, Callable, Mapping, TypeVar

from rlec.data.dedup import normalize_text
from rlec.data.readers import DataError, InvalidRows, iter_records

DAPO_PREFIX = (
    "Solve the following math problem step by step. The last line of your response should be of the "
    "form Answer: $Answer (without quotes) where $Answer is the answer to the problem.\n\n"
)
DAPO_SUFFIX = '\n\nRemember to put your answer on its own line after "Answer:".'


@dataclass(frozen=True)
class MathItem:
    """One math problem. ``answer`` is the gold string given to the grader."""

    question_id: str
    problem: str
    answer: str


@dataclass(frozen=True)
class HotpotItem:
    """One HotpotQA question with its (possibly already modified) context.

    Attributes:
        context: ((title, (sentence, ...)), ...) in input order.
        supporting_titles: titles named in ``supporting_facts``, first-seen order, no repeats.
        drop_scheme: set when the input was already modified (kept as given), else None.
        dropped_titles: the input's ``dropped_titles`` for an already modified record.
    """

    question_id: str
    question: str
    answer: str
    context: tuple[tuple[str, tuple[str, ...]], ...]
    supporting_titles: tuple[str, ...] = ()
    type: str = ""
    level: str = ""
    drop_scheme: str | None = None
    dropped_titles: tuple[str, ...] = ()


@dataclass
class Loaded:
    """The items of one file plus what reading them found.

    Attributes:
        items: valid items, first occurrence of each id and of each content, in file order.
        rows_read: records seen (valid or not).
        duplicate_rows: repeated ids with identical content (collapsed).
        repeated_content: rows equal to an earlier row except for the id (collapsed; the
            normalised-text pass in :mod:`rlec.data.dedup` catches the near-identical ones).
    """

    items: list[Any] = field(default_factory=list)
    rows_read: int = 0
    duplicate_rows: int = 0
    repeated_content: int = 0


def _nonempty_str(value: Any, path: os.PathLike[str] | str, row: int, key: str, *, allow_number: bool = False) -> str:
    if allow_number and isinstance(value, (int, float)) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str):
        raise DataError(path, f"wrong type: expected a string, got {type(value).__name__}", row=row, key=key)
    if not value.strip():
        gold = key in ("answer", "reward_model.ground_truth")
        raise DataError(path, "empty gold answer" if gold else "empty value: expected a non-empty string", row=row, key=key)
    return value.strip()


def _require(rec: Mapping[str, Any], key: str, path: os.PathLike[str] | str, row: int, prefix: str = "") -> Any:
    if key not in rec or rec[key] is None:
        raise DataError(path, f"missing key: {prefix + key!r} is required", row=row, key=prefix + key)
    return rec[key]


def _content_id(kind: str, text: str) -> str:
    return f"{kind}-{hashlib.sha1(normalize_text(text).encode()).hexdigest()[:16]}"


def parse_math(rec: Any, path: os.PathLike[str] | str, row: int) -> MathItem:
    """Validate one math record (DAPO row or plain record) and return the item.

    Raises:
        DataError: not an object, a missing key, a wrong type, or an empty problem / gold answer
            (the message names file, row and key).
    """
    if not isinstance(rec, dict):
        raise DataError(path, f"wrong type: expected a JSON object, got {type(rec).__name__}", row=row)
    if "prompt" in rec:
        prompt = rec["prompt"]
        if not isinstance(prompt, list) or not prompt or not all(isinstance(m, dict) for m in prompt):
            raise DataError(path, "wrong type: expected a non-empty list of chat messages", row=row, key="prompt")
        user = [m for m in prompt if m.get("role", "user") == "user"]
        if not user:
            raise DataError(path, "missing key: no message with role 'user'", row=row, key="prompt")
        content = _nonempty_str(user[0].get("content"), path, row, "prompt[0].content")
        problem = content.removeprefix(DAPO_PREFIX.strip()).removesuffix(DAPO_SUFFIX.strip()).strip()
        if not problem:
            raise DataError(path, "empty value: the DAPO wrapper holds no problem", row=row, key="prompt[0].content")
        rm = _require(rec, "reward_model", path, row)
        if not isinstance(rm, dict):
            raise DataError(path, f"wrong type: expected an object, got {type(rm).__name__}", row=row, key="reward_model")
        gold = _nonempty_str(_require(rm, "ground_truth", path, row, "reward_model."), path, row, "reward_model.ground_truth", allow_number=True)
        extra = rec.get("extra_info") or {}
        qid = extra.get("index") if isinstance(extra, dict) else None
        id_key = "extra_info.index"
    elif "problem" in rec or "question" in rec:
        key = "problem" if "problem" in rec else "question"
        problem = _nonempty_str(rec[key], path, row, key)
        gold = _nonempty_str(_require(rec, "answer", path, row), path, row, "answer", allow_number=True)
        id_key = next((k for k in ("id", "index", "question_id", "unique_id") if rec.get(k) is not None), "id")
        qid = rec.get(id_key)
    else:
        raise DataError(
            path,
            "missing key: expected a DAPO row ('prompt' + 'reward_model') or a plain record ('problem' or 'question' + 'answer')",
            row=row,
            key="prompt",
        )
    if qid is None:
        qid = _content_id("math", problem)
    elif isinstance(qid, bool) or not isinstance(qid, (str, int)) or not str(qid).strip():
        raise DataError(path, f"wrong type: expected a non-empty string or integer id, got {qid!r}", row=row, key=id_key)
    return MathItem(question_id=str(qid).strip(), problem=problem, answer=gold)


def _context(value: Any, path: os.PathLike[str] | str, row: int) -> tuple[tuple[str, tuple[str, ...]], ...]:
    if isinstance(value, dict):  # dict-of-lists layout (Hugging Face `hotpot_qa`)
        titles, sents = value.get("title"), value.get("sentences")
        if not isinstance(titles, list) or not isinstance(sents, list) or len(titles) != len(sents):
            raise DataError(path, "wrong type: expected {'title': [...], 'sentences': [[...], ...]} of equal length", row=row, key="context")
        pairs = list(zip(titles, sents))
    elif isinstance(value, list):
        pairs = value
    else:
        raise DataError(path, f"wrong type: expected [[title, [sentence, ...]], ...], got {type(value).__name__}", row=row, key="context")
    out = []
    for j, pair in enumerate(pairs):
        ok = isinstance(pair, (list, tuple)) and len(pair) == 2 and isinstance(pair[0], str)
        ok = ok and isinstance(pair[1], list) and all(isinstance(s, str) for s in pair[1])
        if not ok:
            raise DataError(path, f"wrong type: paragraph {j} must be [title, [sentence, ...]]", row=row, key=f"context[{j}]")
        out.append((pair[0], tuple(pair[1])))
    return tuple(out)


def _supporting_titles(value: Any, path: os.PathLike[str] | str, row: int) -> tuple[str, ...]:
    if isinstance(value, dict):
        titles, ids = value.get("title"), value.get("sent_id")
        if not isinstance(titles, list) or not isinstance(ids, list) or len(titles) != len(ids):
            raise DataError(path, "wrong type: expected {'title': [...], 'sent_id': [...]} of equal length", row=row, key="supporting_facts")
        facts = list(zip(titles, ids))
    elif isinstance(value, list):
        facts = value
    else:
        raise DataError(path, f"wrong type: expected [[title, sentence_id], ...], got {type(value).__name__}", row=row, key="supporting_facts")
    for j, fact in enumerate(facts):
        ok = isinstance(fact, (list, tuple)) and len(fact) == 2 and isinstance(fact[0], str)
        if not ok or isinstance(fact[1], bool) or not isinstance(fact[1], int):
            raise DataError(path, f"wrong type: fact {j} must be [title, sentence_id (int)]", row=row, key=f"supporting_facts[{j}]")
    return tuple(dict.fromkeys(t for t, _ in facts))


def parse_hotpot(rec: Any, path: os.PathLike[str] | str, row: int, *, require_supporting: bool = True) -> HotpotItem:
    """Validate one HotpotQA record and return the item.

    Args:
        require_supporting: ``supporting_facts`` must be present (needed to drop paragraphs).

    Raises:
        DataError: not an object, a missing key, a wrong type, or an empty question / answer.
    """
    if not isinstance(rec, dict):
        raise DataError(path, f"wrong type: expected a JSON object, got {type(rec).__name__}", row=row)
    id_key = "id" if "_id" not in rec and "id" in rec else "_id"
    qid = _nonempty_str(_require(rec, id_key, path, row), path, row, id_key, allow_number=True)
    question = _nonempty_str(_require(rec, "question", path, row), path, row, "question")
    answer = _nonempty_str(_require(rec, "answer", path, row), path, row, "answer", allow_number=True)
    context = _context(_require(rec, "context", path, row), path, row)
    if require_supporting or rec.get("supporting_facts") is not None:
        supporting = _supporting_titles(_require(rec, "supporting_facts", path, row), path, row)
    else:
        supporting = ()
    scheme = rec.get("drop_scheme")
    if scheme is not None and not isinstance(scheme, str):
        raise DataError(path, f"wrong type: expected a string, got {type(scheme).__name__}", row=row, key="drop_scheme")
    dropped = rec.get("dropped_titles") or []
    if not isinstance(dropped, list) or not all(isinstance(t, str) for t in dropped):
        raise DataError(path, "wrong type: expected a list of titles", row=row, key="dropped_titles")
    return HotpotItem(
        question_id=qid,
        question=question,
        answer=answer,
        context=context,
        supporting_titles=supporting,
        type=str(rec.get("type") or ""),
        level=str(rec.get("level") or ""),
        drop_scheme=scheme,
        dropped_titles=tuple(dropped),
    )


ItemT = TypeVar("ItemT", MathItem, HotpotItem)


def _content(item: MathItem | HotpotItem) -> tuple:
    """Everything but the id: two rows with equal content are the same question."""
    return tuple(getattr(item, f.name) for f in fields(item) if f.name != "question_id")


def load_items(
    path: str | os.PathLike[str],
    parse: Callable[[Any, os.PathLike[str] | str, int], ItemT],
    *,
    skip_invalid: bool = False,
    invalid: InvalidRows | None = None,
) -> Loaded:
    """Read every record of ``path`` with ``parse`` (:func:`parse_math` / :func:`parse_hotpot`).

    Rows whose content (everything but the id) equals an earlier row's are collapsed while
    reading, so DAPO-Math-17k's 1.79M rows never sit in memory at once; only the ids of
    collapsed rows (with a hash of their content, for the duplicate-id check) are kept.

    Args:
        skip_invalid: skip bad rows (recorded in ``invalid``) instead of raising.
        invalid: where skipped rows are counted (required when ``skip_invalid``).

    Returns:
        :class:`Loaded` with the valid, distinct items in file order, ids unique.

    Raises:
        FileNotFoundError: the file is missing.
        DataError: a file-level problem, or (without ``skip_invalid``) the first bad row or a
            duplicate id whose content differs from the first occurrence.
    """
    if skip_invalid and invalid is None:
        raise ValueError("skip_invalid needs an InvalidRows to count into")
    out = Loaded()
    ids: dict[str, tuple[int, int]] = {}  # id -> (first row, hash of its content)
    contents: set[tuple] = set()
    for row, rec in iter_records(path):
        out.rows_read += 1
        try:
            item = parse(rec, path, row)
            content = _content(item)
            seen = ids.get(item.question_id)
            if seen is not None:
                if seen[1] == hash(content):
                    out.duplicate_rows += 1
                    continue
                id_key = "_id" if isinstance(item, HotpotItem) else "extra_info.index"
                raise DataError(
                    path, f"duplicate id: {item.question_id!r} (first at row {seen[0]}) with different content", row=row, key=id_key
                )
        except DataError as err:
            if not skip_invalid:
                raise
            invalid.add(err)  # type: ignore[union-attr]
            continue
        ids[item.question_id] = (row, hash(content))
        if content in contents:
            out.repeated_content += 1
            continue
        contents.add(content)
        out.items.append(item)
    return out
