"""Left-alignment of padded rows (how log-probs run with a plain causal mask) and its inverse."""

from __future__ import annotations

import pytest
import torch

from rlec.megatron.logprobs import left_align, restore


def _batch() -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.arange(1, 25).view(3, 8)
    mask = torch.tensor([[0, 0, 1, 1, 1, 1, 0, 0],   # left-padded prompt, right-padded response
                         [1, 1, 1, 1, 1, 1, 1, 1],
                         [0, 0, 0, 0, 0, 1, 1, 1]])
    return ids, mask


def test_rows_start_at_position_zero_like_verl_position_ids() -> None:
    ids, mask = _batch()
    out = left_align(ids, mask, multiple=4)
    assert out["tokens"].shape == (3, 8)
    assert out["tokens"][0, :4].tolist() == [3, 4, 5, 6] and out["tokens"][0, 4:].tolist() == [0, 0, 0, 0]
    assert out["valid"].sum(1).tolist() == [4, 8, 3]
    assert out["shift"].tolist() == [2, 0, 5]
    # verl: position_ids = cumsum(mask) - 1 on valid tokens; after alignment that is 0..n-1.
    verl_positions = (mask.cumsum(1) - 1).clamp(min=0)
    assert torch.equal(restore(out["position_ids"], out["shift"], 8) * mask, verl_positions * mask)


def test_length_is_padded_to_the_multiple() -> None:
    ids, mask = _batch()
    assert left_align(ids[:, :7], mask[:, :7], multiple=4)["tokens"].shape == (3, 8)


def test_restore_inverts_alignment_on_valid_positions() -> None:
    ids, mask = _batch()
    out = left_align(ids, mask)
    back = restore(out["tokens"].float(), out["shift"], 8)
    assert torch.equal(back * mask, ids.float() * mask)
    assert torch.equal(back * (1 - mask), torch.zeros(3, 8))
    vocab_like = restore(out["tokens"].float()[..., None].expand(3, 8, 5), out["shift"], 8)
    assert torch.equal(vocab_like[..., 2] * mask, ids.float() * mask)


def test_non_contiguous_mask_is_refused_with_the_row() -> None:
    ids, mask = _batch()
    mask[1, 3] = 0
    with pytest.raises(ValueError, match="attention_mask row 1: valid tokens must form one contiguous run"):
        left_align(ids, mask)
    with pytest.raises(ValueError, match="same \\(batch, seq\\) shape"):
        left_align(ids, mask[:, :5])
