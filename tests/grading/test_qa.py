"""HotpotQA normalisation, EM and F1 (official hotpot_evaluate_v1.py semantics)."""

from __future__ import annotations

import pytest

from rlec.grading.qa import exact_match, f1_score, normalize_answer


def test_normalize_answer() -> None:
    assert normalize_answer("The  Eiffel, Tower!") == "eiffel tower"


@pytest.mark.parametrize(
    ("pred", "gold", "em"),
    [
        ("Yes.", "yes", True),
        ("yes it is", "yes", False),
        ("the Eiffel Tower", "Eiffel Tower", True),
        ("\\text{Eiffel Tower}", "Eiffel Tower", True),
        ("Saint-Denis", "Saint Denis", False),  # official script: hyphen dropped, words joined
        ("\\textrm{Paris}", "Paris", True),  # every text-style command is unwrapped (issue 12)
        ("\\mathrm{Eiffel}\\ \\text{Tower}", "Eiffel Tower", True),
        ("\\operatorname{Kyoto}", "Kyoto", True),
        # a gold made only of an article normalises to '': the official EM compares the normalised strings
        ("A", "A", True),
        ("the", "A", True),
        ("C", "A", False),
    ],
)
def test_exact_match(pred: str, gold: str, em: bool) -> None:
    assert exact_match(pred, gold) is em


def test_f1_partial_and_yes_no_special_case() -> None:
    assert f1_score("Eiffel Tower Paris", "Eiffel Tower") == pytest.approx(0.8)  # P 2/3, R 1
    assert f1_score("yes it is", "yes") == 0.0  # yes/no answers must match exactly
    assert f1_score("no", "yes") == 0.0


def test_both_empty_after_normalisation_is_em_but_not_f1() -> None:
    # official hotpot_evaluate_v1.py: EM compares strings, F1 counts common tokens (none here)
    assert exact_match("A", "A") and f1_score("A", "A") == 0.0


@pytest.mark.parametrize("gold", [None, 5, b"Paris"])
def test_non_string_gold_is_an_error_of_the_component(gold) -> None:
    # rlec.grading.grade turns this into a grader_error outcome (tests/grading/test_grade.py)
    with pytest.raises(ValueError, match="gold"):
        exact_match("anything", gold)
