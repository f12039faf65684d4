"""HotpotQA answer checking: the official normalisation, exact match and token F1.

Follows ``hotpot_evaluate_v1.py`` (Yang et al., 2018, HotpotQA, Sec. 5.1; the official
evaluation script): normalise = lower-case, drop ASCII punctuation, drop the articles a/an/the,
collapse whitespace. EM decides correctness; F1 is reported. F1 is 0 when either side
normalises to yes / no / noanswer and the two differ (the official special case).

Kept exactly as the official script, including its known pitfalls (tests/grading/test_qa.py pins each): "Saint-Denis" vs
"Saint Denis" differ, curly apostrophes are not punctuation, and an answer made only of articles or
punctuation normalises to '' (gold "A" is matched by "A" or "the", as the official EM compares the
normalised strings; F1 is then 0). One deliberate addition, on the prediction side only: the
prediction is read as text first (:func:`rlec.grading.extract.latex_to_text`: ``\\text{}``,
``\\textrm{}``, ``\\mathrm{}``, ... unwrapped, LaTeX spaces read as spaces).
"""

from __future__ import annotations

import re
import string
from collections import Counter

from rlec.grading.extract import latex_to_text

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
    return normalize_answer(gold)


def _normalized_pred(prediction: str) -> str:
    if not isinstance(prediction, str):
        raise ValueError(f"HotpotQA prediction must be a string, got {type(prediction).__name__}")
    return normalize_answer(latex_to_text(prediction))


def exact_match(prediction: str, gold: str) -> bool:
    """Official EM: the normalised strings are equal (both empty included).

    Raises:
        ValueError: ``prediction`` or ``gold`` is not a string.
    """
    return _normalized_pred(prediction) == _normalized_gold(gold)


def f1_score(prediction: str, gold: str) -> float:
    """Official token-level F1 in [0, 1], with the yes/no/noanswer special case.

    Raises:
        ValueError: ``prediction`` or ``gold`` is not a string.
    """
    norm_gold = _normalized_gold(gold)
    norm_pred = _normalized_pred(prediction)
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
