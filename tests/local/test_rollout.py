"""HF rollout for the local run: shapes, masks, seeding, scripted responses, advantages."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from rlec.local.rollout import generate, inject_scripted
from rlec.local.update import mean_only_advantages
from rlec.prompts import build_messages, math_task


@pytest.fixture(scope="module")
def model_and_tokenizer(tiny_moe_dir: Path):
    from transformers import AutoModelForCausalLM

    from rlec.models import load_tokenizer

    torch.set_num_threads(1)
    return AutoModelForCausalLM.from_pretrained(tiny_moe_dir, dtype=torch.float32), load_tokenizer(tiny_moe_dir)


def _rollout(model_and_tokenizer, seed: int):
    model, tok = model_and_tokenizer
    messages = [build_messages(math_task("What is 2+3?"), 0.4), build_messages(math_task("What is 10-7?"), None)]
    return generate(model, tok, messages, ["a", "b"], n=3, max_new_tokens=6, seed=seed)


def test_generate_shapes_masks_and_seeding(model_and_tokenizer) -> None:
    batch = _rollout(model_and_tokenizer, seed=5)
    assert batch.prompts.shape[0] == batch.responses.shape[0] == 6 and batch.responses.shape[1] == 6
    assert batch.attention_mask.shape == (6, batch.prompts.shape[1] + 6)
    assert list(batch.group_index) == ["a"] * 3 + ["b"] * 3
    # the mask covers the response up to and including the first stop token
    for row, reason in zip(batch.response_mask, batch.finish_reasons):
        ones = row.nonzero().flatten().tolist()
        assert ones == list(range(len(ones))) and (reason == "length") == (len(ones) == 6)
    again = _rollout(model_and_tokenizer, seed=5)
    assert torch.equal(batch.responses, again.responses)


def test_scripted_responses_give_groups_reward_variance(model_and_tokenizer) -> None:
    _, tok = model_and_tokenizer
    batch = _rollout(model_and_tokenizer, seed=1)
    replaced = inject_scripted(batch, tok, ["5", "3"], n=3, fraction=0.34, seed=0)
    assert replaced == 2
    for row in (2, 5):  # the last of each group
        n_tokens = int(batch.response_mask[row].sum())
        assert tok.decode(batch.responses[row, :n_tokens], skip_special_tokens=True) == batch.texts[row]
        if batch.finish_reasons[row] == "stop":
            assert batch.texts[row] in ("\\boxed{5}", "\\boxed{3}", "\\boxed{I don't know}")
        else:  # cut at max_new_tokens, like a sampled response
            assert n_tokens == 6 and "\\boxed{I don't know}".startswith(batch.texts[row])


def test_mean_only_advantages_from_verl(model_and_tokenizer) -> None:
    batch = _rollout(model_and_tokenizer, seed=2)
    rewards, adv = mean_only_advantages(batch, [1.0, 0.0, 0.5, -3.0, -3.0, -3.0])
    assert torch.allclose(adv[:3, 0], torch.tensor([0.5, -0.5, 0.0]))
    assert torch.all(adv[3:] == 0)  # an all-equal group has no advantage
    assert torch.all((adv != 0) <= (batch.response_mask > 0))  # zero outside the response
    assert torch.allclose(rewards.sum(dim=1), torch.tensor([1.0, 0.0, 0.5, -3.0, -3.0, -3.0]))


# hand-computed: softmax([2, 1, 0, -1, 0.5]) = [.5630, .2071, .0762, .0280, .1256] (mass ordered 0, 1, 4, 2, 3);
# top_p 0.7 keeps tokens 0 and 1 (0.5630 < 0.7 <= 0.7701), renormalised: e^2 / (e^2 + e) = 0.7311
@pytest.mark.parametrize(
    ("temperature", "top_p", "want"),
    [
        (1.0, 1.0, [0.5630, 0.2071, 0.0762, 0.0280, 0.1256]),
        (0.5, 1.0, [0.8292, 0.1122, 0.0152, 0.0021, 0.0413]),
        (1.0, 0.7, [0.7311, 0.2689, 0.0, 0.0, 0.0]),
    ],
)
def test_inverse_cdf_sampler_draws_from_the_softmax(temperature: float, top_p: float, want: list[float]) -> None:
    from rlec.local.rollout import InverseCDFSampler

    torch.manual_seed(0)
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0, 0.5]]).repeat(40_000, 1)
    out = InverseCDFSampler(temperature, top_p)(torch.zeros(40_000, 1, dtype=torch.long), logits.bfloat16())  # exact in bf16
    assert out.dtype == torch.float32
    assert torch.all((out == 0).sum(dim=1) == 1) and torch.all(torch.isinf(out).sum(dim=1) == 4)
    counts = torch.bincount(out.argmax(dim=1), minlength=5).float() / 40_000
    want_t = torch.tensor(want)
    assert torch.all(counts[want_t == 0] == 0), counts  # a token outside the nucleus is never drawn
    assert torch.allclose(counts, want_t, atol=0.01), (counts, want_t)


def test_inverse_cdf_sampler_never_draws_a_zero_probability_token(monkeypatch) -> None:
    """The extreme uniform draws land on the first and last tokens that have mass."""
    from rlec.local.rollout import InverseCDFSampler

    logits = torch.tensor([[float("-inf"), 1.0, 1.0, float("-inf")]], dtype=torch.bfloat16)
    for value, token in ((0.0, 2), (1.0 - 2**-53, 1)):  # u = (1 - rand) x total: rand 0 -> u = total
        monkeypatch.setattr(torch, "rand", lambda *a, v=value, **k: torch.full((1, 1), v, dtype=torch.float64))
        assert InverseCDFSampler()(torch.zeros(1, 1, dtype=torch.long), logits).argmax().item() == token
    with pytest.raises(ValueError, match="temperature must be > 0"):
        InverseCDFSampler(temperature=0.0)
    with pytest.raises(ValueError, match=r"top_p must be in \(0, 1\]"):
        InverseCDFSampler(top_p=1.5)
