"""Pass@k Training's analytic advantage against a brute force over all k-subsets, its batch form,
the entropy switch, and the unbiased pass@k estimator (hand-computed values)."""

from __future__ import annotations

import itertools
import math
from decimal import Decimal, localcontext
from fractions import Fraction

import numpy as np
import pytest
import torch

from rlec.algorithms.passk import (
    EntropySwitch,
    pass_at_k,
    pass_at_k_array,
    passk_advantage_batch,
    passk_group_advantage,
    passk_group_advantages,
    passk_group_reward,
    switch_k,
)


def brute_force(correct: list[bool], k: int) -> tuple[float, list[float]]:
    """Mean subset pass@k and each response's mean normalised subset advantage, by enumeration."""
    subsets = list(itertools.combinations(range(len(correct)), k))
    scores = [float(any(correct[i] for i in s)) for s in subsets]
    mean = sum(scores) / len(scores)
    std = math.sqrt(sum((x - mean) ** 2 for x in scores) / len(scores))
    adv = []
    for i in range(len(correct)):
        mine = [(x - mean) / std for s, x in zip(subsets, scores) if i in s] if std > 0 else [0.0]
        adv.append(sum(mine) / len(mine))
    return mean, adv


CASES = [(n, n_neg, k) for n in range(2, 9) for n_neg in range(0, n + 1) for k in range(1, n)]


@pytest.mark.parametrize(("n", "n_neg", "k"), CASES, ids=[f"N{n}-neg{m}-k{k}" for n, m, k in CASES])
def test_analytic_advantage_equals_brute_force_over_all_subsets(n, n_neg, k):
    correct = [False] * n_neg + [True] * (n - n_neg)
    mean, expected = brute_force(correct, k)
    assert float(passk_group_reward(n, n_neg, k)) == pytest.approx(mean, abs=1e-12)
    assert passk_group_advantages(correct, k) == pytest.approx(expected, abs=1e-9)


def test_hand_computed_group_n4_two_correct_k2():
    # R = 1 - C(2,2)/C(4,2) = 5/6; sigma = sqrt(5/36); A_pos = (1/6)/sigma; A_neg = (1/6 - C(1,1)/C(3,1))/sigma
    assert passk_group_reward(4, 2, 2) == Fraction(5, 6)
    sigma = math.sqrt(5 / 36)
    assert passk_group_advantage(4, 2, 2) == pytest.approx(((1 / 6) / sigma, (1 / 6 - 1 / 3) / sigma))


def test_k1_is_grpo_with_population_std_on_binary_rewards():
    rewards = np.array([1, 0, 0, 1, 1, 0, 0, 0], dtype=float)
    grpo = (rewards - rewards.mean()) / rewards.std()  # numpy's std is the population std
    assert passk_group_advantages(rewards.astype(bool).tolist(), 1) == pytest.approx(grpo.tolist())


@pytest.mark.parametrize(("correct", "k"), [([True] * 5, 2), ([False] * 5, 2), ([True, True, False, False, True], 3), ([True] * 3 + [False], 2)])
def test_sigma_zero_groups_get_zero_advantage(correct, k):
    # all correct, none correct, or N_neg < k: every k-subset scores the same
    assert passk_group_advantages(correct, k) == [0.0] * len(correct)


@pytest.mark.parametrize(("n", "k"), [(1, 1), (2, 4), (3, 8), (4, 4), (1, 3)])
def test_groups_no_larger_than_k_are_defined_as_zero(n, k):
    for n_neg in range(n + 1):
        assert passk_group_advantage(n, n_neg, k) == (0.0, 0.0)


def test_group_reward_below_k_is_pass_at_n():
    assert passk_group_reward(2, 1, 4) == 1 and passk_group_reward(2, 2, 4) == 0


@pytest.mark.parametrize(("args", "match"), [((0, 0, 1), "N must"), ((3, 4, 1), "N_neg"), ((3, 1, 0), "k must"), ((3, -1, 1), "N_neg")])
def test_bad_group_arguments_are_errors(args, match):
    with pytest.raises(ValueError, match=match):
        passk_group_advantage(*args)


def test_exact_binomials_where_floats_would_cancel():
    # N = 60, N_neg = 58, k = 30: C(58,30)/C(60,30) = (30*29)/(60*59); exact R = 1 - 870/3540
    assert passk_group_reward(60, 58, 30) == 1 - Fraction(870, 3540)


def exact_advantage(n: int, n_neg: int, k: int) -> tuple[Decimal, Decimal]:
    """(A_pos, A_neg) from the module docstring's formula with exact binomials, to 60 digits."""
    with localcontext() as ctx:
        ctx.prec = 60
        mean = 1 - Fraction(math.comb(n_neg, k), math.comb(n, k))
        all_neg = Fraction(math.comb(n_neg - 1, k - 1), math.comb(n - 1, k - 1))

        def dec(x: Fraction) -> Decimal:
            return Decimal(x.numerator) / Decimal(x.denominator)

        sigma = dec(mean * (1 - mean)).sqrt()
        return dec(1 - mean) / sigma, dec(1 - mean - all_neg) / sigma


@pytest.mark.parametrize(("n", "n_neg", "k"), [(2000, 300, 300), (1082, 541, 541), (1081, 541, 541), (3000, 1500, 1000),
                                               (2000, 1999, 300), (2000, 1000, 300), (500, 250, 100), (12, 7, 5), (60, 58, 30)])
def test_large_groups_do_not_divide_by_an_underflowed_variance(n, n_neg, k):
    # a float variance underflows to 0.0 from (N=1082, N_neg=k=541) up (issue 26 item 6); the exact values are tiny, not 0/0
    a_pos, a_neg = passk_group_advantage(n, n_neg, k)
    exp_pos, exp_neg = exact_advantage(n, n_neg, k)
    assert math.isfinite(a_pos) and math.isfinite(a_neg) and a_pos > 0 > a_neg
    assert a_pos == pytest.approx(float(exp_pos), rel=1e-12) and a_neg == pytest.approx(float(exp_neg), rel=1e-12)


def test_no_valid_group_raises_over_a_sweep_of_sizes():
    rng = np.random.default_rng(0)
    for _ in range(300):
        n = int(rng.integers(1, 2500))
        k, n_neg = int(rng.integers(1, n + 2)), int(rng.integers(0, n + 1))
        a_pos, a_neg = passk_group_advantage(n, n_neg, k)
        assert math.isfinite(a_pos) and math.isfinite(a_neg) and a_pos >= 0 >= a_neg
        if n <= k:  # N < k: no k-subset (and N = k: one), defined as 0 (module docstring)
            assert (a_pos, a_neg) == (0.0, 0.0)


def test_batch_form_matches_per_group_for_unequal_interleaved_groups():
    groups = {"a": [True, False, False, True, False], "b": [False, False], "c": [True, False, False, False, False, False, True, False, True]}
    order = [("c", 0), ("a", 0), ("b", 0), ("a", 1), ("c", 1), ("c", 2), ("a", 2), ("b", 1), ("a", 3)]
    order += [("a", 4)] + [("c", i) for i in range(3, 9)]
    index = np.array([g for g, _ in order], dtype=object)
    correct = torch.tensor([groups[g][i] for g, i in order])
    per_group = {g: passk_group_advantages(flags, 3) for g, flags in groups.items()}
    expected = [per_group[g][i] for g, i in order]
    out = passk_advantage_batch(correct, index, 3)
    assert out.dtype == torch.float32 and out.shape == (len(order),)
    assert out.tolist() == pytest.approx(expected, abs=1e-6)
    assert per_group["b"] == [0.0, 0.0]  # N = 2 < k = 3


def test_batch_form_checks_shapes():
    with pytest.raises(ValueError, match="one group id per response"):
        passk_advantage_batch(torch.tensor([True, False]), ["a"], 2)
    assert passk_advantage_batch(torch.zeros(0, dtype=torch.bool), [], 2).shape == (0,)


def test_switch_rule_and_state():
    assert switch_k(0.9, 0.5, 4) == 1 and switch_k(0.5, 0.5, 4) == 4 and switch_k(0.1, 0.5, 4) == 4
    with pytest.raises(ValueError, match="entropy"):
        switch_k(float("nan"), 0.5, 4)
    sw = EntropySwitch(k=4, threshold=0.5)
    assert sw.active_k == 1  # pass@1 until the first entropy is read
    assert sw.update(0.3) == 4 and sw.update(0.7) == 1 and sw.update(0.2) == 4
    restored = EntropySwitch(k=4, threshold=0.5)
    restored.load_state_dict(sw.state_dict())
    assert restored == sw
    with pytest.raises(ValueError, match="config has"):
        EntropySwitch(k=8, threshold=0.5).load_state_dict(sw.state_dict())


def test_unbiased_pass_at_k_hand_computed():
    assert pass_at_k(4, 1, 2) == pytest.approx(1 - 3 / 6)  # 1 - C(3,2)/C(4,2)
    assert pass_at_k(5, 2, 3) == pytest.approx(1 - 1 / 10)  # 1 - C(3,3)/C(5,3)
    assert pass_at_k(5, 0, 3) == 0.0 and pass_at_k(5, 3, 3) == 1.0  # n - c < k: always a correct one
    assert pass_at_k(10, 3, 1) == pytest.approx(0.3)  # pass@1 = c/n


def test_unbiased_pass_at_k_matches_subset_enumeration():
    for n, c, k in [(6, 2, 3), (7, 3, 2), (8, 1, 5)]:
        subsets = list(itertools.combinations([True] * c + [False] * (n - c), k))
        assert pass_at_k(n, c, k) == pytest.approx(sum(any(s) for s in subsets) / len(subsets))


def test_pass_at_k_array_is_nan_where_undefined_and_checks_input():
    out = pass_at_k_array(np.array([[4, 1], [5, 0]]), np.array([[1, 1], [2, 0]]), 2)
    assert out[0, 0] == pytest.approx(0.5) and np.isnan(out[0, 1]) and out[1, 0] == pytest.approx(0.7) and np.isnan(out[1, 1])
    with pytest.raises(ValueError, match="0 <= c <= n"):
        pass_at_k_array([3], [4], 1)
    with pytest.raises(ValueError, match=r"k must be an integer in \[1, n=3\]"):
        pass_at_k(3, 1, 4)
