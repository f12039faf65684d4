"""Modified HotpotQA: drop context paragraphs so that abstaining is sometimes the right call.

Each question gets one of four schemes, drawn with its own RNG seeded by ``(seed, question_id)``
(so a question's scheme does not depend on which other questions were read or selected):

=========================  ===================================================  ==============
scheme                     paragraphs removed                                   answerable?
=========================  ===================================================  ==============
``keep_all``               none                                                 yes
``drop_two_distractors``   two non-supporting paragraphs                        yes
``drop_one_supporting``    one supporting and one non-supporting paragraph      usually not
``drop_both_supporting``   every supporting paragraph (two in HotpotQA)         usually not
=========================  ===================================================  ==============

The three dropping schemes each remove two paragraphs, so the number of paragraphs left does
not give away whether the evidence is complete. Which paragraphs go is drawn from the same RNG;
when an item has too few paragraphs of a kind, as many as exist are dropped (the recorded
``dropped_titles`` say what actually went). "Usually not": the facts may be repeated in another
paragraph or known to the model, which is exactly the uncertainty the confidence target prices.

Default weights are uniform (0.25 each). An input record that already carries ``drop_scheme``
is kept as given; with ``enabled=False`` every other record is kept as given too and recorded
with scheme ``as_given``.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Sequence

from rlec.data.sources import HotpotItem

KEEP_ALL = "keep_all"
DROP_TWO_DISTRACTORS = "drop_two_distractors"
DROP_ONE_SUPPORTING = "drop_one_supporting"
DROP_BOTH_SUPPORTING = "drop_both_supporting"
SCHEMES: tuple[str, ...] = (KEEP_ALL, DROP_TWO_DISTRACTORS, DROP_ONE_SUPPORTING, DROP_BOTH_SUPPORTING)
AS_GIVEN = "as_given"
DEFAULT_WEIGHTS: tuple[float, ...] = (0.25, 0.25, 0.25, 0.25)


@dataclass(frozen=True)
class Modified:
    """The context the prompt shows, and what was removed from the original.

    Attributes:
        context: ((title, (sentence, ...)), ...), original order, dropped paragraphs removed.
        drop_scheme: one of :data:`SCHEMES`, :data:`AS_GIVEN`, or the input's own scheme name.
        dropped_titles: titles removed, in their original context order.
    """

    context: tuple[tuple[str, tuple[str, ...]], ...]
    drop_scheme: str
    dropped_titles: tuple[str, ...]


def check_weights(weights: Sequence[float]) -> tuple[float, ...]:
    """Validate the four scheme weights (order of :data:`SCHEMES`) and normalise them to sum 1.

    Raises:
        ValueError: not four finite non-negative numbers with a positive sum.
    """
    w = tuple(float(x) for x in weights)
    if len(w) != len(SCHEMES) or any(not math.isfinite(x) or x < 0 for x in w) or sum(w) <= 0:
        raise ValueError(f"drop-scheme weights must be {len(SCHEMES)} non-negative numbers ({', '.join(SCHEMES)}) with a positive sum, got {weights!r}")
    total = sum(w)
    return tuple(x / total for x in w)


def modify(item: HotpotItem, seed: int, weights: Sequence[float] = DEFAULT_WEIGHTS, *, enabled: bool = True) -> Modified:
    """Apply the seeded paragraph-dropping scheme to one HotpotQA item.

    Args:
        item: the question with its full context and supporting titles.
        seed: the run's seed; with ``item.question_id`` it fixes the scheme and the paragraphs.
        weights: probabilities of :data:`SCHEMES`, in that order (normalised).
        enabled: False keeps the context as given (scheme :data:`AS_GIVEN`).

    Returns:
        :class:`Modified`.

    Raises:
        ValueError: bad ``weights``.
    """
    if item.drop_scheme is not None:
        return Modified(item.context, item.drop_scheme, item.dropped_titles)
    if not enabled:
        return Modified(item.context, AS_GIVEN, ())
    w = check_weights(weights)
    rng = random.Random(f"rlec-hotpot-drop:{seed}:{item.question_id}")
    scheme = rng.choices(SCHEMES, weights=w)[0]
    titles = [t for t, _ in item.context]
    gold = set(item.supporting_titles)
    supporting = [t for t in titles if t in gold]
    distractors = [t for t in titles if t not in gold]
    if scheme == DROP_TWO_DISTRACTORS:
        drop = rng.sample(distractors, min(2, len(distractors)))
    elif scheme == DROP_ONE_SUPPORTING:
        drop = rng.sample(supporting, min(1, len(supporting))) + rng.sample(distractors, min(1, len(distractors)))
    elif scheme == DROP_BOTH_SUPPORTING:
        drop = supporting
    else:
        drop = []
    dropped = set(drop)
    return Modified(
        context=tuple(p for p in item.context if p[0] not in dropped),
        drop_scheme=scheme,
        dropped_titles=tuple(t for t in titles if t in dropped),
    )
