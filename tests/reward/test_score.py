"""Scoring one response the way rlec's reward manager does (rlec.reward.batch.score_one_async): p from
extra_info (rlec.reward.score.target_of), b from the schedule at the step, flat outputs."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import numpy as np
import pytest

from rlec.reward.batch import score_one_async
from rlec.reward.schedule import EVALUATION_B, LinearSchedule
from rlec.reward.score import target_of


def score(source: Any, response: Any, gold: Any, extra_info: Any, b: float = EVALUATION_B) -> dict[str, Any]:
    """The reward manager's score of one response at a constant b (a schedule from b to b)."""
    schedule = LinearSchedule(end_step=2, start_value=b, end_value=b)
    return asyncio.run(score_one_async(response, gold, source, extra_info, 1, schedule))


def test_score_uses_target_and_b() -> None:
    out = score("math_dapo", "\\boxed{7}", "8", {"target_p": 0.75, "objective": "rlec"}, b=0.0)
    assert out["outcome"] == "incorrect"
    assert out["score"] == pytest.approx(-3.0)  # -p/(1-p) at b = 0
    assert (out["target_p"], out["b"], out["answered"], out["correct"]) == (0.75, 0.0, 1.0, 0.0)


def test_score_follows_schedule_from_step() -> None:
    info = {"target_p": 0.75, "objective": "rlec"}
    schedule = LinearSchedule(end_step=11)  # b = (step - 1) / 10
    first, middle, last = (asyncio.run(score_one_async("\\boxed{8}", "8", "math_dapo", info, step, schedule))
                           for step in (1, 6, 11))
    assert [first["b"], middle["b"], last["b"]] == pytest.approx([0.0, 0.5, 1.0])
    assert [first["score"], middle["score"], last["score"]] == pytest.approx([1.0, 0.5, 0.25])


def test_binary_objective_and_missing_target_mean_p_zero() -> None:
    assert target_of({"objective": "binary", "target_p": 0.6}) == 0.0
    assert target_of({}) == 0.0 and target_of(None) == 0.0
    out = score("hotpotqa", "\\boxed{Paris}", "Rome", {"objective": "binary"})
    assert out["score"] == 0.0 and out["target_p"] == 0.0 and out["bucket"] == "binary"


def test_abstain_scores_zero_and_format_flag() -> None:
    out = score("hotpotqa", "\\boxed{I don't know}", "Rome", {"target_p": 0.5}, b=0.3)
    assert out["score"] == 0.0 and out["answered"] == 0.0 and out["outcome"] == "abstain"
    out = score("math_dapo", "Answer: 4", "4", {"target_p": 0.5}, b=1.0)
    assert out["format_ok"] == 0.0 and out["correct"] == 1.0
    assert (out["grader_error"], out["grader_error_reason"]) == (0.0, "")


@pytest.mark.parametrize(
    ("extra_info", "match"),
    [({"target_p": 1.0}, "target_p"), ({"target_p": "high"}, "target_p"), ({"objective": "ternary"}, "objective"),
     ("p=0.3", "extra_info must be a dict"),
     # issue 26 item 4: an RLEC row without its target, and a target that is a string, are refused (not p = 0 / 0.5)
     ({"objective": "rlec", "target_p": None}, r"target_p'\] is null but extra_info\['objective'\] is 'rlec'"),
     ({"objective": "rlec"}, r"target_p'\] is missing"),
     ({"objective": "rlec", "target_p": "0.5"}, r"target_p'\] must be a real number in \[0, 1\), got '0.5'"),
     ({"target_p": "0.5"}, "strings and booleans are not converted"), ({"target_p": True}, "target_p"),
     # issue 34 item 7: an int beyond a float raised OverflowError against the never-raises contract
     ({"objective": "rlec", "target_p": 10**400}, r"target_p'\]: target p must be a number in \[0, 1\), got 1000"),
     ({"objective": "rlec", "target_p": -10**5000}, "got <int too large to print>")],
)
def test_bad_extra_info_is_a_grader_error_naming_the_key(extra_info, match) -> None:
    with pytest.raises(ValueError, match=match):
        target_of(extra_info)
    # inside verl's reward loop a bad row must not fail the step: incorrect at p = 0, flagged
    out = score("math_dapo", "\\boxed{1}", "1", extra_info, b=0.5)
    assert (out["outcome"], out["score"], out["target_p"], out["grader_error"]) == ("incorrect", 0.0, 0.0, 1.0)
    assert out["grader_error_reason"].startswith("data: ") and re.search(match, out["grader_error_reason"])


def test_numeric_targets_of_any_real_type_are_read() -> None:
    assert target_of({"objective": "rlec", "target_p": np.float32(0.25)}) == 0.25
    assert target_of({"objective": "rlec", "target_p": 0}) == 0.0 and target_of({"objective": "binary", "target_p": None}) == 0.0


@pytest.mark.parametrize(
    ("source", "response", "gold"),
    [("math_dapo", "\\boxed{4}", None), ("math_dapo", "\\boxed{4}", "  "), ("hotpotqa", "\\boxed{A}", ["A"]),
     ("gsm8k", "\\boxed{4}", "4"), (None, "\\boxed{4}", "4"), ("math_dapo", None, "4"), ("math_dapo", b"\\boxed{4}", "4")],
)
def test_scoring_never_raises_on_a_sample(source, response, gold) -> None:
    out = score(source, response, gold, {"target_p": 0.5, "objective": "rlec"}, b=1.0)
    assert out["outcome"] == "incorrect" and out["score"] == pytest.approx(-0.5)
    assert out["grader_error"] == float(gold in (None, "  ", ["A"]) or source in ("gsm8k", None))


def test_issue_12_hotpotqa_article_gold_scores_instead_of_raising() -> None:
    info = {"target_p": 0.3, "objective": "rlec"}
    assert score("hotpotqa", "\\boxed{A}", "A", info, b=1.0)["score"] == pytest.approx(0.7)
    assert score("hotpotqa", "\\boxed{C}", "A", info, b=1.0)["score"] == pytest.approx(-0.3)


def test_a_bad_b_is_a_configuration_error() -> None:
    with pytest.raises(ValueError):
        score("math_dapo", "\\boxed{1}", "1", {}, b=1.5)
    with pytest.raises(ValueError, match="stability coefficient b must be a number"):  # not OverflowError
        score("math_dapo", "\\boxed{1}", "1", {}, b=10**400)
