"""The difficulty controller (RLVE Sec. 2.2, as issue 16 states it) and the environment source's
state: a scripted policy raises h exactly to its level, and a resumed source continues exactly."""

from __future__ import annotations

import copy
import json
import random
from collections import Counter

import pytest

from rlec.environments import DifficultyController, EnvironmentSource, SourceConfig


def test_difficulty_is_drawn_uniformly_from_the_window():
    rng = random.Random(0)
    c = DifficultyController(8, initial=6, window=4)
    counts = Counter(c.sample(rng) for _ in range(8000))
    assert set(counts) == {3, 4, 5, 6}
    assert all(abs(n / 8000 - 0.25) < 0.03 for n in counts.values())
    low = DifficultyController(8, initial=1, window=4)
    assert {low.sample(rng) for _ in range(200)} == {0, 1}  # max(0, h - w + 1)


def test_no_decision_before_min_samples_then_raise_and_reset():
    c = DifficultyController(16, initial=2)
    u = c.update([(2, True)] * 15)
    assert (u.h, u.counted, u.decided, u.raised) == (2, 15, False, False) and c.total_at_h == 15
    u = c.update([(2, True)])
    assert (u.h, u.counted, u.accuracy_at_h, u.decided, u.raised) == (3, 16, 1.0, True, True)
    assert (c.correct_at_h, c.total_at_h) == (0, 0)


def test_low_accuracy_resets_without_raising_and_h_never_decreases():
    c = DifficultyController(10, initial=4)
    u = c.update([(4, k < 8) for k in range(10)])  # 0.8 < 0.9
    assert (u.h, u.decided, u.raised, u.accuracy_at_h) == (4, True, False, 0.8)
    assert c.total_at_h == 0
    u = c.update([(4, False)] * 50)
    assert u.h == 4


def test_threshold_is_inclusive_and_only_samples_at_h_count():
    c = DifficultyController(10, initial=1)
    u = c.update([(1, k != 0) for k in range(10)] + [(0, False)] * 30 + [(2, False)] * 30)
    assert u.counted == 10 and u.accuracy_at_h == 0.9 and u.raised and c.h == 2


def test_one_decision_per_update_counts_the_whole_step():
    c = DifficultyController(8)
    u = c.update([(0, True)] * 40)  # five times min_samples in one step: still one raise
    assert (u.h, u.counted) == (1, 40)


def test_maximum_caps_h():
    c = DifficultyController(4, initial=2, maximum=3)
    c.update([(2, True)] * 4)
    c.update([(3, True)] * 4)
    assert c.h == 3 and c.total_at_h == 0  # decided (counters reset), not raised
    with pytest.raises(ValueError, match="maximum"):
        DifficultyController(4, initial=5, maximum=3)


@pytest.mark.parametrize(("kwargs", "message"), [({"min_samples": 0}, "min_samples"), ({"window": 0}, "window"),
                                                 ({"initial": -1}, "initial"), ({"threshold": 0.0}, "threshold"),
                                                 ({"threshold": 1.5}, "threshold")])
def test_bad_settings_are_refused(kwargs, message):
    args = {"min_samples": 8, **kwargs}
    with pytest.raises(ValueError, match=message):
        DifficultyController(args.pop("min_samples"), **args)


def test_state_dict_round_trip_and_errors():
    c = DifficultyController(8, initial=1)
    c.update([(1, True)] * 5)
    d = DifficultyController(8)
    d.load_state_dict(json.loads(json.dumps(c.state_dict())))
    assert d.state_dict() == c.state_dict() == {"h": 1, "correct_at_h": 5, "total_at_h": 5}
    for bad in ({"h": 1}, {"h": -1, "correct_at_h": 0, "total_at_h": 0}, {"h": 0, "correct_at_h": 3, "total_at_h": 2}):
        with pytest.raises(ValueError):
            d.load_state_dict(bad)


# ---- the scripted policy: right below its level, wrong at or above ----

N = 4  # samples per prompt
BATCH = 16  # prompts per step


def run_steps(source: EnvironmentSource, levels: dict[str, int], steps: int) -> list[dict[str, float]]:
    """``steps`` training steps of a policy that is right exactly below each environment's level."""
    history = []
    for _ in range(steps):
        rows = [source.next_row() for _ in range(BATCH)]
        samples = [{"environment": r["extra_info"]["environment"], "difficulty": r["extra_info"]["difficulty"],
                    "correct": float(r["extra_info"]["difficulty"] < levels[r["extra_info"]["environment"]])}
                   for r in rows for _ in range(N)]
        history.append(source.update(samples))
    return history


def test_scripted_policy_raises_h_exactly_to_its_level_and_stops_there():
    levels = {"arithmetic": 3, "sorting": 5, "counting": 0}
    source = EnvironmentSource({"environments": list(levels), "samples_per_prompt": N, "seed": 1})
    history = run_steps(source, levels, 150)
    assert source.difficulties() == levels
    for name, level in levels.items():
        trace = [m[f"rlve/{name}/difficulty"] for m in history]
        assert all(a <= b for a, b in zip(trace, trace[1:]))  # never decreases
        assert all(b - a <= 1 for a, b in zip(trace, trace[1:]))  # one level at a time
        assert trace[-60:] == [float(level)] * 60  # reached early, then held for the last 60 steps
        assert all(0.0 <= m[f"rlve/{name}/share"] <= 1.0 for m in history)
    assert all(abs(m["rlve/share"] - 1.0) < 1e-12 for m in history)
    last = history[-1]
    assert all(last.get(f"rlve/{n}/accuracy_at_h", 0.0) == 0.0 for n in levels)  # stuck at h: always wrong there


def test_resumed_source_continues_exactly_like_an_uninterrupted_one():
    levels = {"maze": 2, "sorting": 4, "knights_knaves": 1}
    config = {"environments": list(levels), "samples_per_prompt": N, "seed": 7, "weights": [2, 1, 1]}
    straight = EnvironmentSource(config)
    run_steps(straight, levels, 20)
    saved = json.loads(json.dumps(straight.state_dict()))  # what a checkpoint would hold
    first_half_state = copy.deepcopy(straight.state_dict())
    rows_straight = [straight.row(straight.counter + k) for k in range(3)]
    metrics_straight = run_steps(straight, levels, 25)

    resumed = EnvironmentSource(config)
    resumed.load_state_dict(saved)
    assert resumed.state_dict() == first_half_state
    assert [resumed.row(resumed.counter + k) for k in range(3)] == rows_straight
    metrics_resumed = run_steps(resumed, levels, 25)
    assert metrics_resumed == metrics_straight
    assert resumed.state_dict() == straight.state_dict()


def test_resume_keeps_new_environments_fresh_and_drops_removed_ones():
    old = EnvironmentSource({"environments": ["maze", "sorting"], "samples_per_prompt": 1})
    old.controllers["maze"].h = 3
    new = EnvironmentSource({"environments": ["maze", "counting"], "samples_per_prompt": 1})
    new.load_state_dict(old.state_dict())
    assert new.difficulties() == {"maze": 3, "counting": 0}
    with pytest.raises(ValueError, match="counter"):
        new.load_state_dict({"controllers": {}})


def test_per_environment_bounds_from_the_config():
    config = SourceConfig(environments=("maze",), samples_per_prompt=1, difficulty={"maze": {"initial": 2, "maximum": 5}})
    source = EnvironmentSource(config)
    assert source.difficulties() == {"maze": 2}
    run_steps(source, {"maze": 99}, 40)
    assert source.difficulties() == {"maze": 5}  # the Pass@k paper's largest training size, 15 x 15
    with pytest.raises(ValueError, match="above the environment's cap"):
        SourceConfig(environments=("maze",), difficulty={"maze": {"maximum": 1000}}).validated()  # construction checks nothing
