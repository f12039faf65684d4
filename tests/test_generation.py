"""rlec's one generation engine: exact sampling, stop rules, shapes and seeding (rollout and evaluation)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from rlec.generation import HFEngine, SamplingSettings, stop_token_ids
from rlec.prompts import build_messages, math_task, render


@pytest.fixture(scope="module")
def engine(tiny_moe_dir: Path) -> HFEngine:
    from rlec.models import load_tokenizer

    torch.set_num_threads(1)
    return HFEngine(str(tiny_moe_dir), load_tokenizer(tiny_moe_dir), SamplingSettings(temperature=0.0, max_new_tokens=6), device="cpu")


def _prompts(engine: HFEngine) -> list[list[int]]:
    texts = [render(engine.tokenizer, build_messages(math_task("What is 2+3?"), 0.4)),
             render(engine.tokenizer, build_messages(math_task("What is 10-7? Show the steps."), None))]
    return engine.encode(texts)


def test_stop_tokens_are_the_union_of_model_tokenizer_and_qwen_turn_ends(engine: HFEngine) -> None:
    tok = engine.tokenizer
    ids = stop_token_ids(tok, engine.model)
    for token in ("<|im_end|>", "<|endoftext|>"):
        assert tok.convert_tokens_to_ids(token) in ids
    assert engine.model.config.eos_token_id in ids and ids == sorted(set(ids))


def test_sample_shapes_masks_grouping_and_seeding(engine: HFEngine) -> None:
    prompt_ids = _prompts(engine)
    out = engine.sample(prompt_ids, n=3, max_new_tokens=6, temperature=1.0, seed=5)
    assert out.prompts.shape[0] == out.responses.shape[0] == 6 and out.responses.shape[1] == 6
    # left padding: each row's prompt ends at the last column, and rows i*n..i*n+n-1 share prompt i
    for row in range(6):
        ids = prompt_ids[row // 3]
        assert out.prompts[row, -len(ids):].tolist() == ids and int(out.prompt_mask[row].sum()) == len(ids)
    # the response mask covers each response up to and including its first stop token
    stops = torch.tensor(engine.stop_ids)
    for row, reason in zip(range(6), out.finish_reasons):
        ones = out.response_mask[row].nonzero().flatten().tolist()
        assert ones == list(range(len(ones)))
        assert (reason == "stop") == bool(torch.isin(out.responses[row, : len(ones)], stops).any())
    again = engine.sample(prompt_ids, n=3, max_new_tokens=6, temperature=1.0, seed=5)
    assert torch.equal(out.responses, again.responses)
    other = engine.sample(prompt_ids, n=3, max_new_tokens=6, temperature=1.0, seed=6)
    assert not torch.equal(out.responses, other.responses)


def test_greedy_generation_for_evaluation_is_deterministic_and_reports_lengths(engine: HFEngine) -> None:
    texts = [engine.tokenizer.decode(ids) for ids in _prompts(engine)]
    first, second = engine.generate(texts, [1, 2]), engine.generate(texts, [3, 4])
    assert [g.text for g in first] == [g.text for g in second]  # temperature 0: the seed does not matter
    for g, ids in zip(first, _prompts(engine)):
        assert g.prompt_tokens == len(ids) and 1 <= g.response_tokens <= 6 and g.finish_reason in ("stop", "length")


def test_bad_sampling_arguments_are_refused(engine: HFEngine) -> None:
    with pytest.raises(ValueError, match="n>=1"):
        engine.sample(_prompts(engine), n=0, max_new_tokens=4)
    with pytest.raises(ValueError, match="temperature>=0"):
        engine.sample(_prompts(engine), max_new_tokens=4, temperature=-1.0)


# hand-computed: softmax([2, 1, 0, -1, 0.5]) = [.5630, .2071, .0762, .0280, .1256] (mass ordered 0, 1, 4, 2, 3);
# top_p 0.7 keeps tokens 0 and 1 (0.5630 < 0.7 <= 0.7701), renormalised: e^2 / (e^2 + e) = 0.7311;
# top_k 3 keeps tokens 0, 1, 4: [e^2, e, e^0.5] / sum = [.6285, .2312, .1402]
@pytest.mark.parametrize(
    ("temperature", "top_p", "top_k", "want"),
    [
        (1.0, 1.0, -1, [0.5630, 0.2071, 0.0762, 0.0280, 0.1256]),
        (0.5, 1.0, -1, [0.8292, 0.1122, 0.0152, 0.0021, 0.0413]),
        (1.0, 0.7, -1, [0.7311, 0.2689, 0.0, 0.0, 0.0]),
        (1.0, 1.0, 3, [0.6285, 0.2312, 0.0, 0.0, 0.1402]),
        (1.0, 0.7, 3, [0.7311, 0.2689, 0.0, 0.0, 0.0]),  # top-k first, then the nucleus of what is left
    ],
)
def test_race_sampler_draws_from_the_softmax(temperature: float, top_p: float, top_k: int, want: list[float]) -> None:
    from rlec.generation import RaceSampler

    torch.manual_seed(0)
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0, 0.5]]).repeat(40_000, 1)
    out = RaceSampler(temperature, top_p, top_k)(torch.zeros(40_000, 1, dtype=torch.long), logits.bfloat16())
    assert out.dtype == torch.float32
    assert torch.all((out == 0).sum(dim=1) == 1) and torch.all(torch.isinf(out).sum(dim=1) == 4)
    counts = torch.bincount(out.argmax(dim=1), minlength=5).float() / 40_000
    want_t = torch.tensor(want)
    assert torch.all(counts[want_t == 0] == 0), counts  # a token outside the nucleus is never drawn
    assert torch.allclose(counts, want_t, atol=0.01), (counts, want_t)


def test_race_sampler_never_draws_a_zero_probability_token(monkeypatch) -> None:
    """The extreme draws (0: an infinite ratio; huge: a ratio near 0) still land on a token with mass."""
    from rlec.generation import RaceSampler

    logits = torch.tensor([[float("-inf"), 1.0, 1.0, float("-inf"), float("-inf")]], dtype=torch.bfloat16)
    sampler = RaceSampler()
    for value in (0.0, 1e30):
        monkeypatch.setattr(sampler, "draws", lambda rows, count, v=value: torch.full((rows, count), v))
        assert sampler(torch.zeros(1, 1, dtype=torch.long), logits).argmax().item() in (1, 2)
    with pytest.raises(ValueError, match="temperature must be > 0"):
        RaceSampler(temperature=0.0)
    with pytest.raises(ValueError, match=r"top_p must be in \(0, 1\]"):
        RaceSampler(top_p=1.5)
    with pytest.raises(ValueError, match="top_k must be"):
        RaceSampler(top_k=-2)
    with pytest.raises(ValueError, match="2 row generators for 1 rows"):
        RaceSampler(generators=[torch.Generator(), torch.Generator()])(torch.zeros(1, 1, dtype=torch.long), logits)


def test_race_sampler_draws_survive_last_bit_changes_of_the_logits() -> None:
    """A row's logits change in their last bits with the batch shape (up to 6e-7 measured on the tiny model). With
    one seed per row, 1,024 near-uniform rows (Qwen3's 151,936 tokens, as a random-init model gives) perturbed by
    1e-4 keep their token: the inverse-CDF draw used before changed 15 of these very rows (and the resumed run of
    the CI of 2026-12-02 drew other responses), the race none (a flip needs its two best ratios within the noise)."""
    from rlec.generation import RaceSampler

    rows, vocab = 1024, 151_936
    base = torch.randn(rows, vocab, generator=torch.Generator().manual_seed(0)) * 0.05
    noisy = base + torch.randn(rows, vocab, generator=torch.Generator().manual_seed(1)) * 1e-4

    def draw(scores: torch.Tensor) -> torch.Tensor:
        sampler = RaceSampler(generators=[torch.Generator().manual_seed(1000 + r) for r in range(rows)])
        return sampler(torch.zeros(rows, 1, dtype=torch.long), scores).argmax(dim=1)

    first = draw(base)
    assert int((first != draw(noisy)).sum()) <= 2  # measured 0; the inverse CDF: 15
    assert torch.equal(first, draw(base)) and len(set(first.tolist())) > rows * 0.9  # seeded, and spread over the vocabulary

def test_a_row_with_its_own_seed_samples_the_same_tokens_in_any_batch(engine: HFEngine) -> None:
    """Per-request seeds make a response independent of the batch it is generated in (verl's CPU rollout batches
    the requests that arrive together, so the batches differ between a run and its resume): each row draws from
    its own generator, whatever its neighbours, padding and batch size (see the test above for the logits' noise)."""
    prompt_ids = _prompts(engine)
    short = prompt_ids[0][-5:]
    seeds = [11, 12, 13, 14, 15, 16, 17, 18]
    rows = [prompt_ids[0], prompt_ids[1], short, prompt_ids[0][3:], prompt_ids[1][7:], prompt_ids[0], short, prompt_ids[1]]
    together = engine.sample(rows, max_new_tokens=24, temperature=1.0, row_seeds=seeds)
    for i in (0, 2, 4, 7):
        alone = engine.sample([rows[i]], max_new_tokens=24, temperature=1.0, row_seeds=[seeds[i]])
        assert together.responses[i].tolist() == alone.responses[0].tolist(), f"row {i}"
