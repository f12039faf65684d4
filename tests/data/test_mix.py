"""Selection, repeats, objectives and targets (statistical checks with fixed seeds)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from rlec.data.mix import BINARY, RLEC, MixConfig, Question, draw_objectives, math_test_count, draw_without_replacement, split_held_out, stream, training_samples


def _questions(src: str, n: int) -> list[Question]:
    return [Question(src, f"{src}-{i}", f"task {src} {i}", "1") for i in range(n)]


@pytest.fixture(scope="module")
def big():
    cfg = MixConfig(seed=3)
    qs = {"math": _questions("math", 1500), "hotpotqa": _questions("hotpotqa", 1000)}
    return cfg, qs, training_samples(qs, cfg)


def test_every_question_appears_once_per_repeat(big):
    cfg, qs, samples = big
    assert len(samples) == cfg.repeats * 2500
    per_q = Counter(s.question.question_id for s in samples)
    assert set(per_q.values()) == {cfg.repeats}
    assert Counter((s.question.question_id, s.repeat) for s in samples).most_common(1)[0][1] == 1


def test_binary_fraction_is_exact_per_source_and_repeat(big):
    cfg, qs, samples = big
    counts = Counter((s.question.source, s.repeat) for s in samples if s.objective == BINARY)
    assert counts == {(src, r): round(0.1 * len(qs[src])) for src in qs for r in range(cfg.repeats)}
    assert all(s.target_p == 0.0 and s.prompt_target is None for s in samples if s.objective == BINARY)


def test_targets_are_uniform_on_the_hundredths_grid_without_zero(big):
    _, _, samples = big
    p = np.array([s.target_p for s in samples if s.objective == RLEC])
    k = np.round(p * 100).astype(int)
    assert np.allclose(p, k / 100) and k.min() == 1 and k.max() == 90  # 0.01 .. 0.90, never 0
    counts = np.bincount(k, minlength=91)[1:]
    expected = len(k) / 90
    # chi-square over the 90 grid values: 99.9% quantile with 89 degrees of freedom is ~136
    assert ((counts - expected) ** 2 / expected).sum() < 136
    assert abs(p.mean() - 0.455) < 4 * np.sqrt((90**2 - 1) / 12) / 100 / np.sqrt(len(p))


def test_target_grid_bounds():
    from rlec.data.mix import target_grid

    assert target_grid(0.0, 0.9) == (1, 90)
    assert target_grid(0.07, 0.07) == (7, 7)  # no float round-off at the edges
    assert target_grid(0.125, 0.5) == (13, 50)
    with pytest.raises(ValueError, match="no target"):
        MixConfig(target_min=0.0, target_max=0.0)
    assert MixConfig(target_min=0.0, target_max=0.0, binary_fraction=1.0).binary_fraction == 1.0


def test_repeats_draw_fresh_targets(big):
    _, _, samples = big
    by_q: dict[str, set] = {}
    for s in samples:
        by_q.setdefault(s.question.question_id, set()).add((s.objective, s.target_p))
    assert np.mean([len(v) for v in by_q.values()]) > 4.5  # 5 repeats, collisions rare


def test_rows_are_shuffled_across_sources_and_repeats(big):
    _, _, samples = big
    head = samples[:200]
    assert {s.question.source for s in head} == {"math", "hotpotqa"} and len({s.repeat for s in head}) == 5


def test_same_seed_same_samples_and_streams_are_independent():
    qs = {"math": _questions("math", 50)}
    assert training_samples(qs, MixConfig(seed=1)) == training_samples(qs, MixConfig(seed=1))
    assert training_samples(qs, MixConfig(seed=1)) != training_samples(qs, MixConfig(seed=2))
    # changing the number of repeats leaves the first repeat's targets unchanged
    three = {(s.question.question_id, s.repeat): s.target_p for s in training_samples(qs, MixConfig(seed=1, repeats=3))}
    five = {(s.question.question_id, s.repeat): s.target_p for s in training_samples(qs, MixConfig(seed=1))}
    assert all(five[k] == v for k, v in three.items())


def test_draw_without_replacement_takes_everything_when_the_source_is_smaller():
    items = list(range(10))
    assert sorted(draw_without_replacement(items, 15_000, stream(0, "x"))) == items
    assert len(set(draw_without_replacement(list(range(100)), 30, stream(0, "x")))) == 30


def test_math_held_out_size_and_split():
    assert math_test_count(42, 500, 0.2) == 8
    assert math_test_count(17_398, 500, 0.2) == 500
    train, test = split_held_out(list(range(42)), 8, stream(0, "split/math"))
    assert len(test) == 8 and sorted(train + test) == list(range(42)) and not set(train) & set(test)


def test_draw_objectives_with_all_binary_or_none():
    b, p = draw_objectives(7, 1.0, 0.0, 0.9, stream(0, "t"))
    assert b.all() and (p == 0).all()
    b, p = draw_objectives(7, 0.0, 0.5, 0.5, stream(0, "t"))
    assert not b.any() and (p == 0.5).all()
    b, p = draw_objectives(7, 1.0, 0.0, 0.0, stream(0, "t"))
    assert b.all() and (p == 0).all()


def test_draw_targets_is_the_one_draw_of_both_kinds_of_generator():
    """Issue 59: data preparation (numpy, vectorised) and RLVE's rows (random.Random, one per row) draw p with one
    function; each keeps its generator's stream (the values the two implementations drew before)."""
    import random

    from rlec.data.mix import draw_targets

    p = draw_targets(stream(0, "t"), 0.0, 0.9, size=5)
    assert p.tolist() == (stream(0, "t").integers(1, 91, size=5) / 100).tolist()
    assert draw_targets(random.Random("x"), 0.25, 0.3) == random.Random("x").randint(25, 30) / 100
    assert all(0.25 <= draw_targets(random.Random(i), 0.25, 0.3) <= 0.3 for i in range(50))
    assert draw_targets(random.Random(0), 0.0, 0.0) == 0.0 and draw_targets(stream(0, "t"), 0.0, 0.0, size=3).tolist() == [0.0] * 3
    with pytest.raises(TypeError, match="pass size"):
        draw_targets(stream(0, "t"), 0.0, 0.9)
    with pytest.raises(TypeError, match="needs a numpy generator"):
        draw_targets(random.Random(0), 0.0, 0.9, size=2)


@pytest.mark.parametrize(
    "kwargs", [{"repeats": 0}, {"binary_fraction": 1.5}, {"target_max": 1.0}, {"target_min": 0.6, "target_max": 0.5}, {"math_train_size": -1}]
)
def test_bad_mix_options_are_rejected(kwargs):
    with pytest.raises(ValueError):
        MixConfig(**kwargs)


def test_target_histogram_bins_grid_targets_by_hundredths():
    from rlec.data.mix import Sample
    from rlec.data.summary import target_histogram

    q = Question("math", "q", "t", "1")
    samples = [Sample(q, "train", 0, RLEC, p) for p in (0.0, 0.1, 0.29, 0.3, 0.3, 0.89, 0.9)] + [Sample(q, "train", 0, BINARY, 0.0)]
    hist = target_histogram(samples, 0.0, 0.9)
    assert hist["counts"] == [1, 1, 1, 2, 0, 0, 0, 0, 2]
    assert hist["edges"][3] == 0.3
