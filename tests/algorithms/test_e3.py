"""E3's pure pieces against hand-computed values: temperature step, annealing, ranks, budgets, length bias."""

from __future__ import annotations

import math
import random

import pytest

from rlec.algorithms.e3 import (
    E3Controller,
    E3Settings,
    PromptHistory,
    TemperatureScheduler,
    allocate_rollouts,
    anneal_factor,
    length_bias_factor,
    temperature_update,
)
from rlec.algorithms.e3.algorithm import E3
from rlec.algorithms.base import AlgorithmContext
from rlec.run_config import RunConfig

QWEN3_VOCAB = 151_936  # ln V + ln ln V = 11.93122 + 2.47916 = 14.41037


def test_temperature_step_hand_computed():
    # H*/H = e: T' = 1 * (1 + 1 * 1 / 14.41037) = 1.069394
    assert temperature_update(1.0, 1.0, math.e, QWEN3_VOCAB) == pytest.approx(1.069394, abs=1e-6)
    # T = 1.2, H = 2.5 above H* = 2: T' = 1.2 * (1 + 1.2 * ln(0.8) / 14.41037) = 1.177702
    assert temperature_update(1.2, 2.5, 2.0, QWEN3_VOCAB) == pytest.approx(1.177702, abs=1e-6)
    assert temperature_update(0.7, 1.3, 1.3, QWEN3_VOCAB) == 0.7  # on target: unchanged


@pytest.mark.parametrize("bad", [dict(temperature=0.0), dict(target=0.0), dict(entropy=float("nan")), dict(vocab_size=2)])
def test_temperature_step_rejects_bad_input(bad):
    args = dict(temperature=1.0, entropy=1.0, target=1.0, vocab_size=QWEN3_VOCAB) | bad
    with pytest.raises(ValueError):
        temperature_update(**args)


def test_anneal_factor_hand_computed():
    assert anneal_factor(60, 100) == 1.0  # annealing starts after 60% of training
    assert anneal_factor(80, 100) == pytest.approx(0.95)  # progress 0.5: 0.1 * 0.5 * (1 + cos(pi/2)) + 0.9
    assert anneal_factor(100, 100) == pytest.approx(0.9)
    assert anneal_factor(130, 100) == pytest.approx(0.9)  # clamped past the end
    assert anneal_factor(5, 10, start=0.0, final=0.5) == pytest.approx(0.75)


def test_scheduler_collects_init_steps_then_steers_toward_the_mean():
    s = TemperatureScheduler(vocab_size=QWEN3_VOCAB, temperature=1.0, init_steps=3, anneal=False)
    assert [s.update(h, step, 100) for step, h in enumerate([1.0, 2.0, 3.0], 1)] == [1.0, 1.0, 1.0]
    assert s.base_target == pytest.approx(2.0) and s.target(4, 100) == pytest.approx(2.0)
    up = s.update(1.0, 4, 100)  # entropy below the target: hotter
    assert up == pytest.approx(1.0 * (1 + math.log(2.0) / 14.41037), abs=1e-6) and up > 1.0
    down = s.update(4.0, 5, 100)  # above: cooler
    assert down < up


def test_scheduler_both_regimes_and_clipping():
    hot = TemperatureScheduler(vocab_size=QWEN3_VOCAB, temperature=1.0, target_entropy=0.8, t_max=1.1, anneal=False)
    temps = [hot.update(0.2, step, 50) for step in range(1, 6)]  # entropy far below target: T rises, clipped
    assert temps == sorted(temps) and temps[-1] == 1.1
    cold = TemperatureScheduler(vocab_size=QWEN3_VOCAB, temperature=1.0, target_entropy=0.2, t_min=0.9, anneal=False)
    temps = [cold.update(2.0, step, 50) for step in range(1, 6)]
    assert temps == sorted(temps, reverse=True) and temps[-1] == 0.9
    collapsed = TemperatureScheduler(vocab_size=QWEN3_VOCAB, temperature=1.0, target_entropy=0.5)
    assert collapsed.update(0.0, 1, 10) == collapsed.t_max  # zero entropy: as hot as allowed
    with pytest.raises(ValueError, match="finite number"):
        collapsed.update(float("inf"), 2, 10)


def test_unbounded_scheduler_follows_the_method_unclipped():
    # the method never clips (E3 Sec. 3.2): with both bounds null T follows the bare update, past 1.5
    free = TemperatureScheduler(vocab_size=QWEN3_VOCAB, temperature=1.4, target_entropy=0.8, t_min=None, t_max=None,
                                anneal=False)
    expected = temperature_update(1.4, 0.2, 0.8, QWEN3_VOCAB)  # 1.4 (1 + 1.4 ln 4 / 14.41037) = 1.588554
    assert expected == pytest.approx(1.588554, abs=1e-6)
    assert free.update(0.2, 1, 50) == expected and not free.clipped
    bounded = TemperatureScheduler(vocab_size=QWEN3_VOCAB, temperature=1.4, target_entropy=0.8, anneal=False)
    assert bounded.update(0.2, 1, 50) == 1.5 and bounded.clipped  # the default safety bound acts, and says so


def test_unbounded_scheduler_refuses_a_non_positive_temperature():
    # T = 1.5, H* / H = 1e-6: 1.5 (1 + 1.5 ln(1e-6) / 14.41) < 0; with no lower bound this is an error, not a clip
    free = TemperatureScheduler(vocab_size=QWEN3_VOCAB, temperature=1.5, target_entropy=1e-6, t_min=None, t_max=None,
                                anneal=False)
    with pytest.raises(ValueError, match=r"rlec\.e3\.temperature\.min/max"):
        free.update(1.0, 1, 50)


def test_temperature_bounds_are_nullable_in_settings_and_controller():
    cfg = {"rlec": {"e3": {"enable": True, "temperature": {"min": None, "max": None, "target_entropy": 1.0}}}}
    s = E3Settings.from_config(cfg)
    assert (s.t_min, s.t_max) == (None, None) and s.temperature_in_bounds(3.0)
    assert (E3Settings.from_config({"rlec": {"e3": {"temperature": {}}}}).t_min, E3Settings().t_max) == (0.5, 1.5)
    controller = E3Controller(s, n=8, temperature=2.5, vocab_size=QWEN3_VOCAB)  # T_0 = 2.5 is fine with no bound
    assert controller.observe(1, 10, 0.5, [], [])["e3/temperature_clipped"] == 0.0 and controller.temperature > 2.5
    run = RunConfig({"rlec": {"e3": {"enable": True, "temperature": {"min": None}}},
                        "trainer": {"v1": {"trainer_mode": "rlec_sync"}},
                        "actor_rollout_ref": {"rollout": {"n": 8, "temperature": 2.5,
                                                          "agent": {"default_agent_loop": "rlec_e3_agent"}}}})
    with pytest.raises(ValueError, match="outside"):  # refused once, by E3's check (the controller takes checked settings)
        E3.from_config(run, AlgorithmContext(vocab_size=QWEN3_VOCAB))
    with pytest.raises(ValueError, match=r"temperature\.min/max"):
        E3Settings.from_config({"rlec": {"e3": {"temperature": {"min": None, "max": 0.0}}}})


def test_annealed_target_is_used_late_in_training():
    s = TemperatureScheduler(vocab_size=QWEN3_VOCAB, temperature=1.0, target_entropy=2.0)
    assert s.target(10, 100) == 2.0 and s.target(80, 100) == pytest.approx(1.9) and s.target(100, 100) == pytest.approx(1.8)
    # at step 100 the target is 1.8 = the entropy: no change
    assert s.update(1.8, 100, 100) == 1.0


def test_scheduler_resume_equals_uninterrupted():
    entropies = [1.1, 0.9, 1.0, 0.7, 0.6, 0.8, 1.3, 0.5, 0.4, 0.9]

    def fresh():
        return TemperatureScheduler(vocab_size=QWEN3_VOCAB, temperature=1.0, init_steps=2)

    whole = fresh()
    expected = [whole.update(h, step, 10) for step, h in enumerate(entropies, 1)]
    first = fresh()
    got = [first.update(h, step, 10) for step, h in enumerate(entropies[:4], 1)]
    second = fresh()
    second.load_state_dict(first.state_dict())
    got += [second.update(h, step, 10) for step, h in enumerate(entropies[4:], 5)]
    assert got == expected


def test_prompt_history_ranks_hand_computed():
    h = PromptHistory()
    h.update(["a", "a", "b", "b", "c", "c", "d", "d"], [1, 1, 1, 0, 0, 1, 0, 0])
    assert [h.accuracy(k) for k in "abcd"] == [1.0, 0.5, 0.5, 0.0] and h.accuracy("e") is None
    # strictly easier prompts / (4 - 1): a 0, b and c 1/3 (one easier), d 3/3
    ranks = h.ranks(["a", "b", "c", "d", "e"])
    assert ranks[:4] == pytest.approx([0.0, 1 / 3, 1 / 3, 1.0]) and ranks[4] is None
    h.update(["d"] * 2, [1, 1])  # later appearances accumulate: d is now 2/4 = 0.5
    assert h.accuracy("d") == 0.5 and h.ranks(["d"]) == pytest.approx([1 / 3])
    one = PromptHistory()
    one.update(["x"], [True])
    assert one.ranks(["x"]) == [0.5]
    restored = PromptHistory()
    restored.load_state_dict(h.state_dict())
    assert restored.counts == h.counts
    with pytest.raises(ValueError, match="2 prompt ids but 1 outcomes"):
        h.update(["a", "b"], [1])


def test_allocation_hand_computed():
    # seen budget 4 x 8 = 32; shares 4 + lam * r with lam = 16 / 1.75: 4, 6.29, 8.57, 13.14 -> largest remainder
    assert allocate_rollouts([0.0, 0.25, 0.5, 1.0, None], 8, 4, 16) == [4, 6, 9, 13, 8]
    assert allocate_rollouts([None, None], 8, 4, 16) == [8, 8]  # unseen prompts get n
    assert allocate_rollouts([0.3, 0.3, 0.3], 8, 2, 16) == [8, 8, 8]  # no difference in difficulty: n each
    # only the hardest can gain; once it is at n_max the easiest share the rest: 2 + 9 + 9 = 20, floor rises to 6
    assert allocate_rollouts([0.0, 0.5, 1.0], 8, 2, 9) == [6, 9, 9]


def test_allocation_properties_on_random_batches():
    rng = random.Random(0)
    for _ in range(1000):
        b, n_min = rng.randint(1, 24), rng.randint(2, 6)
        n = rng.randint(n_min, 12)
        n_max = rng.randint(n, 24)
        ranks = [None if rng.random() < 0.2 else rng.choice([0.0, 1.0, rng.random(), round(rng.random(), 1)]) for _ in range(b)]
        counts = allocate_rollouts(ranks, n, n_min, n_max)
        assert sum(counts) == n * b
        assert all(c == n for r, c in zip(ranks, counts) if r is None)
        assert all(n_min <= c <= n_max for r, c in zip(ranks, counts) if r is not None)
        seen = sorted((r, c) for r, c in zip(ranks, counts) if r is not None)
        assert all(c1 <= c2 for (r1, c1), (r2, c2) in zip(seen, seen[1:]) if r1 < r2)  # harder never fewer


@pytest.mark.parametrize(("n", "n_min", "n_max"), [(8, 1, 16), (3, 4, 16), (17, 4, 16)])
def test_allocation_rejects_impossible_bounds(n, n_min, n_max):
    with pytest.raises(ValueError, match="2 <= n_min <= n <= n_max"):
        allocate_rollouts([0.5], n, n_min, n_max)


def test_length_bias_hand_computed_and_keeps_reward_positive():
    assert length_bias_factor(1000, 0.001) == pytest.approx(0.5)  # 1 - 1 / 2
    assert length_bias_factor(3000, 0.001) == pytest.approx(0.25)
    assert length_bias_factor(0, 0.001) == 1.0 and length_bias_factor(500, 0.0) == 1.0
    assert 0 < 0.1 * length_bias_factor(10**9, 1.0)  # a tiny positive reward stays positive
    with pytest.raises(ValueError):
        length_bias_factor(-1, 0.001)


def _history_with_30_always_solved() -> tuple[PromptHistory, list[str]]:
    keys = [f"q{i:03d}" for i in range(100)]
    history = PromptHistory()
    for i, key in enumerate(keys):  # q000..q029 always right (rank 0, tied); the rest right 1..70 times in 100
        solved = 100 if i < 30 else i - 29
        history.update([key] * 100, [j < solved for j in range(100)])
    return history, keys


def test_length_bias_easy_share_is_exact_when_30_prompts_tie_at_rank_0():
    history, keys = _history_with_30_always_solved()
    assert history.ranks(keys)[:30] == [0.0] * 30  # the 30 share rank 0: a rank cut would bias all 30
    easy = history.easiest(0.1)
    assert len(easy) == 10 and easy <= set(keys[:30])  # 10 % of the prompts, all from the tied easiest
    assert history.easiest(0.1) == easy  # the same 10 on every call
    restored = PromptHistory()
    restored.load_state_dict(history.state_dict())
    assert restored.easiest(0.1) == easy  # and after a resume (the tie-break is a stable digest, not hash())
    assert len(history.easiest(0.35)) == 35 and set(keys[:30]) <= history.easiest(0.35)  # ties first, then by rank
    assert history.easiest(0.0) == frozenset() and len(history.easiest(1.0)) == 100
    with pytest.raises(ValueError, match="penalty_threshold"):
        history.easiest(1.5)


def test_controller_biases_exactly_the_configured_share_of_prompts():
    history, keys = _history_with_30_always_solved()
    settings = E3Settings.from_config({"rlec": {"e3": {"enable": True, "temperature": {"enable": False},
                                                       "budget": {"enable": False},
                                                       "length_bias": {"mu": 0.001, "penalty_threshold": 0.1}}}})
    controller = E3Controller(settings, n=8, temperature=1.0, vocab_size=None)
    controller.history = history
    plans = [controller.plan(keys) for _ in range(3)]
    biased = [{k for k, mu in zip(keys, p.length_mu) if mu > 0} for p in plans]
    assert len(biased[0]) == 10 and biased[0] == biased[1] == biased[2] == history.easiest(0.1)
    assert all(mu in (0.0, 0.001) for mu in plans[0].length_mu)


def test_settings_defaults_nested_keys_and_errors():
    assert E3Settings.from_config({}) == E3Settings()
    s = E3Settings.from_config({"rlec": {"e3": {"enable": True, "budget": {"n_min": 2, "n_max": 12},
                                                "temperature": {"target_entropy": 0.7, "anneal": {"enable": False}}}}})
    assert (s.enable, s.n_min, s.n_max, s.target_entropy, s.anneal) == (True, 2, 12, 0.7, False)
    with pytest.raises(ValueError, match=r"rlec\.e3\.budget\.n_min/n_max"):
        E3Settings.from_config({"rlec": {"e3": {"budget": {"n_min": 1}}}})
    with pytest.raises(ValueError, match=r"rlec\.e3\.length_bias\.mu='x': must be a number"):
        E3Settings.from_config({"rlec": {"e3": {"length_bias": {"mu": "x"}}}})
