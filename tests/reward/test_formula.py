"""RLEC reward family and b schedule: hand-computed values, the q > p property, errors."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rlec.grading.outcome import Outcome
from rlec.reward.formula import reward_stakes, rlec_reward, rlec_reward_array


@pytest.mark.parametrize(
    ("p", "b", "correct", "incorrect"),
    [
        (0.75, 0.0, 1.0, -3.0),  # b = 0: +1 / -odds
        (0.75, 1.0, 0.25, -0.75),  # b = 1: +(1-p) / -p
        (0.75, 0.5, 0.5, -1.5),  # sqrt(0.25) = 0.5; -0.75 / 0.5 = -1.5
        (0.5, 0.0, 1.0, -1.0),
        (0.0, 0.0, 1.0, 0.0),  # binary objective at every b
        (0.0, 1.0, 1.0, 0.0),
    ],
)
def test_hand_computed_rewards(p: float, b: float, correct: float, incorrect: float) -> None:
    assert rlec_reward(Outcome.CORRECT, p, b) == pytest.approx(correct)
    assert rlec_reward("incorrect", p, b) == pytest.approx(incorrect)
    assert rlec_reward(Outcome.ABSTAIN, p, b) == 0.0


def test_binary_objective_incorrect_is_plus_zero() -> None:
    assert math.copysign(1.0, reward_stakes(0.0, 0.3)[1]) == 1.0


@pytest.mark.parametrize("p", [1.0, -0.1, 1.5, float("nan"), "x", None])
def test_bad_target_raises_naming_value(p) -> None:
    with pytest.raises(ValueError, match="target p"):
        rlec_reward("correct", p, 0.5)


@pytest.mark.parametrize("b", [-0.01, 1.01, float("nan")])
def test_bad_b_raises_naming_value(b) -> None:
    with pytest.raises(ValueError, match="stability coefficient b"):
        rlec_reward("correct", 0.5, b)


def test_unknown_outcome_raises() -> None:
    with pytest.raises(ValueError, match="outcome must be one of"):
        rlec_reward("maybe", 0.5, 0.5)


@settings(max_examples=400, deadline=None)
@given(
    p=st.floats(0.0, 0.99, allow_nan=False),
    b=st.floats(0.0, 1.0, allow_nan=False),
    q=st.floats(0.0, 1.0, allow_nan=False),
)
def test_answering_beats_abstaining_iff_q_exceeds_p(p: float, b: float, q: float) -> None:
    r_c, r_i = reward_stakes(p, b)
    expected = q * r_c + (1 - q) * r_i
    scale = (1 - p) ** (b - 1)  # the closed form: expected = (1-p)^(b-1) (q - p)
    assert expected == pytest.approx(scale * (q - p), abs=1e-9)
    if abs(q - p) > 1e-9:
        assert np.sign(expected) == np.sign(q - p)


def test_vectorised_numpy_and_torch_match_scalar() -> None:
    rng = np.random.default_rng(0)
    p = rng.uniform(0, 0.9, 64)
    correct = rng.random(64) < 0.5
    answered = rng.random(64) < 0.7
    for b in (0.0, 0.37, 1.0):
        want = [
            rlec_reward(Outcome.ABSTAIN if not a else (Outcome.CORRECT if c else Outcome.INCORRECT), pi, b)
            for c, a, pi in zip(correct, answered, p)
        ]
        got_np = rlec_reward_array(correct, answered, p, b)
        got_t = rlec_reward_array(torch.tensor(correct), torch.tensor(answered), torch.tensor(p), b)
        np.testing.assert_allclose(got_np, want, rtol=1e-12)
        np.testing.assert_allclose(got_t.numpy(), want, rtol=1e-12)


def test_vectorised_error_names_index() -> None:
    with pytest.raises(ValueError, match="index 2 is 1.0"):
        rlec_reward_array(np.ones(3, bool), np.ones(3, bool), np.array([0.1, 0.2, 1.0]), 0.5)
