"""A step's RLEC scoring as rlec's reward manager runs it (rlec.reward.batch.score_one_async per response)
and its metrics (rlec.reward.metrics), no verl."""

from __future__ import annotations

import asyncio
import math
from typing import Any

import pytest

from rlec.reward.batch import score_one_async, target_bucket
from rlec.reward.metrics import reward_metrics, rows_from_columns
from rlec.reward.schedule import LinearSchedule

SCHEDULE = LinearSchedule(end_step=11)  # b = (step - 1) / 10
RESPONSES = ["So the answer is \\boxed{4}.", "\\boxed{5}", "\\boxed{I don't know}", "It is \\boxed{Paris}"]
GOLDS = ["4", "4", "Paris", "Paris"]
SOURCES = ["math_dapo", "math_dapo", "hotpotqa", "hotpotqa"]
EXTRAS = [
    {"target_p": 0.5, "objective": "rlec"},
    {"target_p": 0.25, "objective": "rlec"},
    {"target_p": 0.75, "objective": "rlec"},
    {"target_p": 0.0, "objective": "binary"},
]


def score_step(responses, golds, sources, extras, global_step: int, schedule: LinearSchedule) -> tuple[list[float], list[dict[str, Any]]]:
    """Every response of a step scored concurrently, as verl's reward loop calls the reward manager."""
    async def run() -> list[dict[str, Any]]:
        return list(await asyncio.gather(*(score_one_async(r, g, s, e, global_step, schedule)
                                           for r, g, s, e in zip(responses, golds, sources, extras, strict=True))))

    infos = asyncio.run(run())
    return [info["score"] for info in infos], infos


def test_scores_follow_reward_family_at_scheduled_b():
    scores, infos = score_step(RESPONSES, GOLDS, SOURCES, EXTRAS, global_step=6, schedule=SCHEDULE)
    # b = 0.5: correct at p=.5 -> .5^.5; wrong at p=.25 -> -.25 * .75^-.5; abstain -> 0; binary correct -> 1
    assert scores == pytest.approx([0.7071067812, -0.2886751346, 0.0, 1.0])
    assert [i["b"] for i in infos] == [0.5] * 4
    assert [i["target_p"] for i in infos] == [0.5, 0.25, 0.75, 0.0]
    assert [i["outcome"] for i in infos] == ["correct", "incorrect", "abstain", "correct"]
    assert [i["reward_b1"] for i in infos] == pytest.approx([0.5, -0.25, 0.0, 1.0])
    assert [i["bucket"] for i in infos] == ["p0.3-0.6", "p0.0-0.3", "p0.6-1.0", "binary"]
    assert {i["global_step"] for i in infos} == {6}


@pytest.mark.parametrize(("step", "b", "wrong_at_quarter"), [(1, 0.0, -1 / 3), (11, 1.0, -0.25), (50, 1.0, -0.25)])
def test_b_runs_from_zero_on_first_step_to_one_at_end(step, b, wrong_at_quarter):
    scores, infos = score_step(RESPONSES[1:2], GOLDS[1:2], SOURCES[1:2], EXTRAS[1:2], step, SCHEDULE)
    assert infos[0]["b"] == b
    assert scores[0] == pytest.approx(wrong_at_quarter)


def test_a_bad_row_is_a_grader_error_not_a_failed_batch():
    # issue 12: a bad target, an empty gold or an unknown data_source in one row must not fail the step
    responses = RESPONSES[:2] + ["\\boxed{4}", "\\boxed{4}"]
    golds = GOLDS[:2] + ["", "4"]
    sources = SOURCES[:2] + ["math_dapo", "gsm8k"]
    extras = [EXTRAS[0], {"target_p": 1.5}, EXTRAS[0], EXTRAS[0]]
    scores, infos = score_step(responses, golds, sources, extras, 11, SCHEDULE)
    assert [i["grader_error"] for i in infos] == [0.0, 1.0, 1.0, 1.0]
    assert "target_p" in infos[1]["grader_error_reason"] and infos[1]["target_p"] == 0.0
    assert "gold answer" in infos[2]["grader_error_reason"]
    assert "unknown data_source 'gsm8k'" in infos[3]["grader_error_reason"]
    assert [i["outcome"] for i in infos] == ["correct", "incorrect", "incorrect", "incorrect"]
    assert scores == pytest.approx([0.5, 0.0, -0.5, -0.5])  # b = 1: correct 1-p, incorrect -p (p = 0 for the bad target)
    m = reward_metrics(infos)
    assert m["rlec/grader_error_rate"] == 0.75 and m["rlec/src_gsm8k/grader_error_rate"] == 1.0
    single = asyncio.run(score_one_async("\\boxed{4}", "4", "math_dapo", {"target_p": 1.5}, 11, SCHEDULE))
    assert single["grader_error"] == 1.0 and single["score"] == 0.0


def test_target_bucket_edges_and_binary():
    assert target_bucket(0.0) == "p0.0-0.3"
    assert target_bucket(0.3) == "p0.3-0.6"
    assert target_bucket(0.9) == "p0.6-1.0"
    assert target_bucket(0.7, "binary") == "binary"
    with pytest.raises(ValueError, match="outside the bucket edges"):
        target_bucket(0.5, edges=(0.0, 0.3))


def test_metrics_by_bucket_and_source_hand_computed():
    _, infos = score_step(RESPONSES, GOLDS, SOURCES, EXTRAS, 6, SCHEDULE)
    m = reward_metrics(infos)
    assert m["rlec/b"] == 0.5
    assert m["rlec/count"] == 4
    assert m["rlec/reward/mean"] == pytest.approx((0.7071067812 - 0.2886751346 + 0 + 1) / 4)
    assert m["rlec/reward_b1/mean"] == pytest.approx((0.5 - 0.25 + 0 + 1) / 4)
    assert m["rlec/coverage"] == 0.75 and m["rlec/abstention_rate"] == 0.25
    assert m["rlec/accuracy"] == 0.5
    assert m["rlec/selective_accuracy"] == pytest.approx(2 / 3)
    assert m["rlec/p0.0-0.3/accuracy"] == 0.0 and m["rlec/p0.0-0.3/coverage"] == 1.0
    assert m["rlec/p0.6-1.0/abstention_rate"] == 1.0
    assert "rlec/p0.6-1.0/selective_accuracy" not in m  # nothing answered in that bucket
    assert m["rlec/binary/accuracy"] == 1.0
    assert m["rlec/src_math_dapo/accuracy"] == 0.5 and m["rlec/src_math_dapo/count"] == 2
    assert m["rlec/src_hotpotqa/coverage"] == 0.5
    assert m["rlec/grader_error_rate"] == 0.0


def test_metrics_skip_records_without_outcome_and_accept_columns():
    _, infos = score_step(RESPONSES, GOLDS, SOURCES, EXTRAS, 6, SCHEDULE)
    columns = {key: [info[key] for info in infos] + [None] for key in infos[0]}  # one failed session
    m = reward_metrics(rows_from_columns(columns), prefix="val-rlec")
    assert m["val-rlec/count"] == 4
    assert reward_metrics([{}, None]) == {}
    with pytest.raises(ValueError, match="differ in length"):
        rows_from_columns({"a": [1], "b": [1, 2]})


def test_metrics_refuse_incomplete_records():
    with pytest.raises(KeyError, match="lacks"):
        reward_metrics([{"outcome": "correct", "score": 1.0}])
    minimal = {"outcome": "abstain", "score": 0.0, "correct": 0, "answered": 0, "bucket": "binary",
               "data_source": "x", "b": 0.2}
    assert math.isclose(reward_metrics([minimal])["rlec/b"], 0.2)
