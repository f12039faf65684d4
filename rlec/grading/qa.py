"""HotpotQA answer checking: the official normalisation, exact match and token F1.

Follows ``hotpot_evaluate_v1.py`` (Yang et al., 2018, HotpotQA, Sec. 5.1; the official
evaluation script): normalise = lower-case, drop ASCII punctuation, drop the articles a/an/the,
collapse whitespace. EM decides correctness; F1 is reported. F1 is 0 when either side
normalises to yes / no / noanswer and the two differ (the official special case).

Kept exactly as the official script, including its known pitfalls (FACTS.md): "Saint-Denis" vs
"Saint Denis" differ, curly apostrophes are not punctuation. Two deliberate additions, both on
the prediction side only: LaTeX text wrappers (``\\text{...}``) are removed before normalising,
and an empty normalised *gold* answer is an error rather than a silent match.
"""

from __future__ import annotations

import re
import string
from collections import Counter

from rlec.grading.extract import strip_wrappers

_PUNCT = set(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_SPECIAL = ("yes", "no", "noanswer")


def normalize_answer(s: str) -> str:
    """The official HotpotQA / SQuAD normalisation."""
    s = s.lower()
    s = "".join(ch for ch in s if ch not in _PUNCT)
    s = _ARTICLES.sub(" ", s)
    return " ".join(s.split())


def _normalized_gold(gold: str) -> str:
    if not isinstance(gold, str):
        raise ValueError(f"HotpotQA gold answer must be a string, got {type(gold).__name__}: {gold!r}")
    norm = normalize_answer(gold)
    if not norm:
        raise ValueError(f"HotpotQA gold answer {gold!r} normalises to an empty string")
    return norm


def exact_match(prediction: str, gold: str) -> bool:
    """Official EM after normalisation.

    Raises:
        ValueError: ``gold`` is not a string or normalises to ''.
    """
    return normalize_answer(strip_wrappers(prediction)) == _normalized_gold(gold)


def f1_score(prediction: str, gold: str) -> float:
    """Official token-level F1 in [0, 1], with the yes/no/noanswer special case.

    Raises:
        ValueError: ``gold`` is not a string or normalises to ''.
    """
    norm_gold = _normalized_gold(gold)
    norm_pred = normalize_answer(strip_wrappers(prediction))
    if (norm_pred in _SPECIAL or norm_gold in _SPECIAL) and norm_pred != norm_gold:
        return 0.0
    pred_tokens, gold_tokens = norm_pred.split(), norm_gold.split()
    common = Counter(pred_tokens) & Counter(gold_tokens)
    num_same = sum(common.values())
    if num_same == 0:
        return 0.0
    precision = num_same / len(pred_tokens)
    recall = num_same / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)
