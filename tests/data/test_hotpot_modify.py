"""The seeded paragraph-dropping scheme of modified HotpotQA."""

from __future__ import annotations

from collections import Counter

import pytest

from rlec.data.hotpot_modify import (
    AS_GIVEN,
    DROP_BOTH_SUPPORTING,
    DROP_ONE_SUPPORTING,
    DROP_TWO_DISTRACTORS,
    KEEP_ALL,
    SCHEMES,
    check_weights,
    modify,
)
from rlec.data.sources import HotpotItem, load_items, parse_hotpot


def _item(qid: str = "q1", n_distractors: int = 4) -> HotpotItem:
    ctx = [("Gold A", ("A0.", " A1.")), ("Gold B", ("B0.",))] + [(f"D{i}", (f"D{i}.",)) for i in range(n_distractors)]
    return HotpotItem(qid, "Q?", "ans", tuple(ctx[1:2] + ctx[2:4] + ctx[0:1] + ctx[4:]), supporting_titles=("Gold A", "Gold B"))


def _only(scheme: str) -> list[float]:
    return [1.0 if s == scheme else 0.0 for s in SCHEMES]


def test_keep_all_keeps_every_paragraph():
    m = modify(_item(), 0, _only(KEEP_ALL))
    assert m.context == _item().context and m.dropped_titles == () and m.drop_scheme == KEEP_ALL


def test_drop_two_distractors_keeps_both_supporting():
    m = modify(_item(), 0, _only(DROP_TWO_DISTRACTORS))
    assert len(m.dropped_titles) == 2 and all(t.startswith("D") for t in m.dropped_titles)
    assert {t for t, _ in m.context} >= {"Gold A", "Gold B"} and len(m.context) == 4


def test_drop_one_supporting_drops_one_of_each_kind():
    m = modify(_item(), 0, _only(DROP_ONE_SUPPORTING))
    kinds = sorted(t.startswith("Gold") for t in m.dropped_titles)
    assert kinds == [False, True] and len(m.context) == 4


def test_drop_both_supporting_removes_all_evidence():
    m = modify(_item(), 0, _only(DROP_BOTH_SUPPORTING))
    assert set(m.dropped_titles) == {"Gold A", "Gold B"}
    assert not any(t.startswith("Gold") for t, _ in m.context)


def test_kept_paragraphs_stay_in_original_order_with_their_sentences():
    item = _item()
    for seed in range(20):
        m = modify(item, seed)
        kept = [p for p in item.context if p[0] not in m.dropped_titles]
        assert list(m.context) == kept
        assert [t for t, _ in item.context if t in m.dropped_titles] == list(m.dropped_titles)


def test_too_few_distractors_drops_what_exists():
    m = modify(_item(n_distractors=1), 0, _only(DROP_TWO_DISTRACTORS))
    assert m.dropped_titles == ("D0",)


def test_scheme_depends_only_on_seed_and_question_id():
    a = [modify(_item(f"q{i}"), 7) for i in range(50)]
    b = [modify(_item(f"q{i}"), 7) for i in reversed(range(50))][::-1]
    assert a == b
    assert [m.drop_scheme for m in a] != [modify(_item(f"q{i}"), 8).drop_scheme for i in range(50)]


def test_scheme_frequencies_follow_the_weights():
    n = 4000
    counts = Counter(modify(_item(f"q{i}"), 0).drop_scheme for i in range(n))
    # uniform weights: chi-square with 3 degrees of freedom, 99.9% quantile 16.27
    chi2 = sum((counts[s] - n / 4) ** 2 / (n / 4) for s in SCHEMES)
    assert chi2 < 16.27, counts
    skewed = Counter(modify(_item(f"q{i}"), 0, [0.7, 0.1, 0.1, 0.1]).drop_scheme for i in range(n))
    assert abs(skewed[KEEP_ALL] / n - 0.7) < 4 * (0.7 * 0.3 / n) ** 0.5


def test_premodified_and_disabled_inputs_are_kept_as_given():
    pre = HotpotItem("q", "Q?", "a", (("T", ("s.",)),), drop_scheme="theirs", dropped_titles=("X",))
    assert modify(pre, 0).drop_scheme == "theirs" and modify(pre, 0).dropped_titles == ("X",)
    m = modify(_item(), 0, enabled=False)
    assert m.drop_scheme == AS_GIVEN and m.context == _item().context


@pytest.mark.parametrize("w", [[1, 1, 1], [1, -1, 1, 1], [0, 0, 0, 0], [float("nan"), 1, 1, 1]])
def test_bad_weights_are_rejected(w):
    with pytest.raises(ValueError, match="weights"):
        check_weights(w)


def test_sample_items_use_every_scheme(sample_files):
    items = load_items(sample_files["hotpot_train"], parse_hotpot).items
    schemes = Counter(modify(it, 0).drop_scheme for it in items)
    assert set(schemes) == set(SCHEMES)
