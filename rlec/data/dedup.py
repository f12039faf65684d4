"""Normalised-text de-duplication, within a source and across the train / test split.

Normal form (:func:`normalize_text`): Unicode NFKC, case-folded, every run of whitespace made one
space, stripped. Two problems whose normal forms are equal are the same question.

- Within a source (:func:`dedupe_within`): the first occurrence is kept. DAPO-Math-17k as
  distributed repeats each problem about 100 times under different ids, so this is what turns
  its ~1.79M rows into ~17k questions. A question whose copies disagree on the gold answer is
  dropped entirely (all copies), since no copy can be trusted.
- Across splits (:func:`remove_overlap`): a training candidate whose normal form or id also
  occurs in the evaluation set is removed from training, so evaluation never sees a trained
  question.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from typing import Callable, Iterable, Sequence, TypeVar

T = TypeVar("T")
_SPACE = re.compile(r"\s+")


def normalize_text(text: str) -> str:
    """The de-duplication key of a problem or question (NFKC, case-folded, spaces collapsed)."""
    return _SPACE.sub(" ", unicodedata.normalize("NFKC", text).casefold()).strip()


@dataclass
class DedupStats:
    """What :func:`dedupe_within` removed.

    Attributes:
        duplicate_text: later copies of a question already seen (same normal form, same gold).
        conflicting_gold: items dropped because copies of their question disagree on the gold.
    """

    duplicate_text: int = 0
    conflicting_gold: int = 0


def dedupe_within(items: Sequence[T], text_of: Callable[[T], str], gold_of: Callable[[T], str]) -> tuple[list[T], DedupStats]:
    """Keep the first item of each normalised text; drop questions with conflicting golds.

    Args:
        items: items in input order.
        text_of: the question / problem text of an item.
        gold_of: the gold answer of an item.

    Returns:
        (kept items in input order, :class:`DedupStats`).
    """
    groups: dict[str, list[int]] = {}
    for i, item in enumerate(items):
        groups.setdefault(normalize_text(text_of(item)), []).append(i)
    stats = DedupStats()
    keep: set[int] = set()
    for group in groups.values():
        if len({normalize_text(gold_of(items[i])) for i in group}) > 1:
            stats.conflicting_gold += len(group)
            continue
        stats.duplicate_text += len(group) - 1
        keep.add(group[0])
    return [it for i, it in enumerate(items) if i in keep], stats


def remove_overlap(
    candidates: Iterable[T],
    held_out: Iterable[T],
    text_of: Callable[[T], str],
    id_of: Callable[[T], str],
) -> tuple[list[T], int]:
    """Remove from ``candidates`` every item that shares a normalised text or an id with ``held_out``.

    Returns:
        (remaining candidates in order, number removed).
    """
    held = list(held_out)
    texts = {normalize_text(text_of(it)) for it in held}
    ids = {id_of(it) for it in held}
    kept, removed = [], 0
    for it in candidates:
        if normalize_text(text_of(it)) in texts or id_of(it) in ids:
            removed += 1
        else:
            kept.append(it)
    return kept, removed
