"""The CPU wing's ``bshd_padding_vectorized`` shim (rlec.cpu.bshd_padding): verl's BSHD padding without its row loop.

The reference is verl 0.9.1's own ``preprocess_bshd_engine`` / ``postprocess_bshd_engine`` (installed, unpatched),
run on the same random jagged batches; Megatron's parallel sizes are set by monkeypatching ``parallel_state`` (both
functions read them there), so no process group is needed. The drift guard pins the two functions' source.
"""

from __future__ import annotations

import hashlib
import inspect

import pytest
import torch

from rlec.cpu import bshd_padding
from rlec.cpu import verl_shims as cpu
from rlec.megatron.compat import is_patched

# sha256 of verl 0.9.1's source of the two functions the shim stands in for (inspect.getsource, unwrapped)
VERL_SOURCE_SHA256 = {
    "preprocess_bshd_engine": "0ad9ea98233ba64939f940c89753b03c95a64c6c0fc4b57c51eb74a8e06527bb",
    "postprocess_bshd_engine": "6ce9ba1981413ecf9ca9fa553eeb424bb3b89a64727aac7d599c73a698f640de",
}


def verl_function(name: str):
    """verl's own function, even where this process already applied a shim over it."""
    from verl.models.mcore import util

    return inspect.unwrap(getattr(util, name))


@pytest.fixture
def parallel(monkeypatch):
    """Megatron's parallel sizes as verl's functions read them: tensor parallel ``tp``, context parallel ``cp``."""
    from megatron.core import parallel_state

    def set_sizes(tp: int = 1, cp: int = 1) -> None:
        monkeypatch.setattr(parallel_state, "get_tensor_model_parallel_world_size", lambda: tp)
        monkeypatch.setattr(parallel_state, "get_context_parallel_world_size", lambda: cp)
        monkeypatch.setattr(parallel_state, "get_context_parallel_rank", lambda: 0)
        monkeypatch.setattr(parallel_state, "get_context_parallel_group", lambda: None)

    set_sizes()
    return set_sizes


def jagged(lengths: list[int], dense: tuple[int, ...] = (), dtype: torch.dtype = torch.long, seed: int = 0,
           requires_grad: bool = False) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """A jagged nested tensor of rows of ``lengths`` (random values), and its rows."""
    g = torch.Generator().manual_seed(seed)
    if dtype.is_floating_point:
        rows = [torch.randn(n, *dense, generator=g).to(dtype).requires_grad_(requires_grad) for n in lengths]
    elif dtype == torch.bool:
        rows = [torch.randint(0, 2, (n, *dense), generator=g).bool() for n in lengths]
    else:
        rows = [torch.randint(0, 151_936, (n, *dense), generator=g).to(dtype) for n in lengths]
    return torch.nested.as_nested_tensor(rows, layout=torch.jagged), rows


def random_lengths(batch: int, longest: int, seed: int) -> list[int]:
    """``batch`` lengths in [1, longest], with a row of 1 and one of ``longest`` whenever there are two rows."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, longest + 1, (batch,), generator=g).tolist()
    if batch >= 2:
        lengths[0], lengths[-1] = 1, longest
    return lengths


BATCHES = [  # (lengths, dense dims, dtype): the gate's shapes (~45 tokens, rows of 4 and 16), edge cases, routes
    ([7], (), torch.long),  # batch size 1
    ([1], (), torch.long),  # a single one-token row
    (random_lengths(4, 62, seed=1), (), torch.long),  # old_log_prob's micro-batch of 4
    (random_lengths(16, 62, seed=2), (), torch.long),  # update_actor's micro-batch of 16
    ([5, 5, 5], (), torch.float32),  # equal lengths (temperature rows)
    (random_lengths(5, 9, seed=3), (2, 3), torch.long),  # dense dims after the sequence (layers, top-k routes)
    (random_lengths(6, 30, seed=4), (), torch.bool),
]
IDS = ["b1", "one-token", "b4", "b16", "equal", "dense", "bool"]


def assert_same_padding(ours, theirs) -> None:
    for a, b in zip(ours, theirs, strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape and a.stride() == b.stride() and a.device == b.device
        assert torch.equal(a, b)


@pytest.mark.parametrize(("lengths", "dense", "dtype"), BATCHES, ids=IDS)
@pytest.mark.parametrize("need_roll", [False, True])
@pytest.mark.parametrize("forced", [None, 70])
def test_padding_equals_verls_on_jagged_batches(parallel, lengths, dense, dtype, need_roll, forced):
    x, _ = jagged(lengths, dense, dtype, seed=len(lengths))
    ours = bshd_padding.preprocess_bshd(x, need_roll=need_roll, forced_max_seqlen=forced)
    assert ours is not None  # the vectorised path ran (not verl's fallback)
    assert_same_padding(ours, verl_function("preprocess_bshd_engine")(x, need_roll=need_roll, forced_max_seqlen=forced))


@pytest.mark.parametrize(("tp", "fp8"), [(2, False), (4, False), (1, True), (2, True)])
def test_padding_equals_verls_with_tensor_parallel_and_fp8_alignment(parallel, tp, fp8):
    parallel(tp=tp)
    for seed, batch in enumerate((1, 3, 16)):
        x, _ = jagged(random_lengths(batch, 45, seed), seed=seed)
        ours = bshd_padding.preprocess_bshd(x, use_fp8_padding=fp8)
        theirs = verl_function("preprocess_bshd_engine")(x, use_fp8_padding=fp8)
        assert ours is not None and ours[0].shape[1] % tp == 0
        assert_same_padding(ours, theirs)


def test_padding_passes_gradients_as_verls_does(parallel):
    lengths = random_lengths(4, 20, seed=5)
    grads = []
    for pad in (bshd_padding.preprocess_bshd, verl_function("preprocess_bshd_engine")):
        x, rows = jagged(lengths, dtype=torch.float32, seed=5, requires_grad=True)
        padded = pad(x)[0]
        (padded * torch.arange(padded.numel(), dtype=padded.dtype).view_as(padded)).sum().backward()
        grads.append([row.grad for row in rows])
    assert all(torch.equal(a, b) for a, b in zip(*grads, strict=True))


def assert_same_nested(ours: torch.Tensor, theirs: torch.Tensor) -> None:
    assert ours.is_nested and ours.layout == theirs.layout == torch.jagged
    assert ours.dtype == theirs.dtype and ours.shape[0] == theirs.shape[0] and ours.dim() == theirs.dim()
    assert torch.equal(ours.offsets(), theirs.offsets()) and ours.offsets().dtype == theirs.offsets().dtype
    assert torch.equal(ours.values(), theirs.values())
    assert (ours._min_seqlen, ours._max_seqlen) == (theirs._min_seqlen, theirs._max_seqlen)
    assert ours.requires_grad == theirs.requires_grad


@pytest.mark.parametrize(("lengths", "dense", "dtype"), BATCHES, ids=IDS)
def test_unpadding_equals_verls_and_round_trips(parallel, lengths, dense, dtype):
    x, _ = jagged(lengths, dense, dtype, seed=7)
    padded, valid, _ = bshd_padding.preprocess_bshd(x)
    ours = bshd_padding.postprocess_bshd(padded, valid)
    assert ours is not None
    assert_same_nested(ours, verl_function("postprocess_bshd_engine")(padded, valid))
    assert_same_nested(ours, x)  # pad then unpad gives the rows back
    # a per-position output of the forward (log-probs: (b, S) float, entropy) unpads like verl's
    out = torch.randn(padded.shape[:2], generator=torch.Generator().manual_seed(8))
    assert_same_nested(bshd_padding.postprocess_bshd(out, valid), verl_function("postprocess_bshd_engine")(out, valid))


def test_unpadding_passes_gradients_as_verls_does(parallel):
    x, _ = jagged(random_lengths(4, 30, seed=9), seed=9)
    _, valid, _ = bshd_padding.preprocess_bshd(x)
    grads = []
    for unpad in (bshd_padding.postprocess_bshd, verl_function("postprocess_bshd_engine")):
        out = torch.randn(valid.shape, generator=torch.Generator().manual_seed(10)).requires_grad_()
        nested = unpad(out, valid)
        assert nested.requires_grad
        (nested.values() * torch.arange(nested.values().numel(), dtype=out.dtype)).sum().backward()
        grads.append(out.grad)
    assert torch.equal(*grads) and grads[0][~valid].abs().sum() == 0


def test_cases_not_covered_go_to_verls_function(parallel):
    x, _ = jagged([3, 5, 2])
    assert bshd_padding.preprocess_bshd(x, forced_max_seqlen=4) is None  # shorter than a row: verl raises there
    assert bshd_padding.postprocess_bshd(torch.zeros(3, 5), torch.ones(3, 1, 5, 5, dtype=torch.bool)) is None  # 4-D
    holes = torch.nested.narrow(torch.arange(12).view(3, 4), 1, torch.tensor([0, 1, 0]), torch.tensor([2, 3, 1]),
                                layout=torch.jagged)
    assert holes.lengths() is not None and bshd_padding.preprocess_bshd(holes) is None
    parallel(cp=2)  # context parallel: verl's zig-zag split and all-gather
    assert bshd_padding.preprocess_bshd(x) is None
    assert bshd_padding.postprocess_bshd(torch.zeros(3, 5), torch.ones(3, 5, dtype=torch.bool)) is None
    # post_process=False returns the output unchanged, as verl's does
    out = torch.zeros(3, 5)
    assert bshd_padding.postprocess_bshd(out, torch.ones(3, 5), post_process=False) is out


def test_the_shim_replaces_verls_functions_under_the_attention_mask_shim(parallel, monkeypatch):
    """Applied in VERL_SHIMS order on verl's own functions: verl's forward (model_forward) and util both call the
    vectorised padding, and bshd_attention_mask (applied next) wraps it; its 4-D mask is built on equal tensors."""
    from verl.models.mcore import model_forward, util

    from rlec.cpu import padded_forward

    for module in (util, model_forward):  # restored after the test, whatever this process had applied before
        for name in ("preprocess_bshd_engine", "postprocess_bshd_engine"):
            monkeypatch.setattr(module, name, verl_function(name))
    names = [shim.name for shim in cpu.VERL_SHIMS]
    assert names.index("bshd_padding_vectorized") < names.index("bshd_attention_mask")
    assert cpu.SHIM_TRIGGERS["bshd_padding_vectorized"] == cpu.SHIM_TRIGGERS["bshd_attention_mask"]
    bshd_padding.BSHD_PADDING_VECTORIZED.apply()
    padded_forward.BSHD_ATTENTION_MASK.apply()
    assert is_patched(util.preprocess_bshd_engine, "bshd_padding_vectorized")
    assert is_patched(model_forward.preprocess_bshd_engine, "bshd_attention_mask")
    assert is_patched(model_forward.preprocess_bshd_engine.__wrapped__, "bshd_padding_vectorized")
    x, _ = jagged(random_lengths(4, 40, seed=11), seed=11)
    ids, mask, positions = model_forward.preprocess_bshd_engine(x, pre_process=True)
    ids0, valid0, positions0 = verl_function("preprocess_bshd_engine")(x, pre_process=True)
    assert torch.equal(ids, ids0) and torch.equal(positions, positions0)
    assert torch.equal(mask, padded_forward.causal_padding_mask(valid0))
    assert_same_nested(model_forward.postprocess_bshd_engine(ids, mask),
                       verl_function("postprocess_bshd_engine")(ids0, valid0))
    parallel(cp=2)  # an uncovered case goes to verl's function: its zig-zag split, its all-gather (no group here)
    assert_same_padding(util.preprocess_bshd_engine(x), verl_function("preprocess_bshd_engine")(x))
    with pytest.raises(Exception) as ours:
        util.postprocess_bshd_engine(ids0, valid0)
    with pytest.raises(Exception) as theirs:
        verl_function("postprocess_bshd_engine")(ids0, valid0)
    assert type(ours.value) is type(theirs.value) and str(ours.value) == str(theirs.value)


def test_the_shim_refuses_to_go_under_an_attention_mask_shim_applied_first(monkeypatch):
    from verl.models.mcore import model_forward, util

    from rlec.cpu import padded_forward

    for module in (util, model_forward):
        for name in ("preprocess_bshd_engine", "postprocess_bshd_engine"):
            monkeypatch.setattr(module, name, verl_function(name))
    padded_forward.BSHD_ATTENTION_MASK.apply()
    with pytest.raises(RuntimeError, match="before bshd_attention_mask"):
        bshd_padding.BSHD_PADDING_VECTORIZED.apply()


def test_drift_verls_padding_functions_are_the_ones_checked_equal():
    """The equality above was checked against verl 0.9.1's source of the two functions. A verl release that changes
    either (a new alignment rule, another mask) fails here: re-check the vectorised version against it, then update
    the hash. The probe (the row loop the shim removes) is run by tests/verl_plugin/test_cpu.py."""
    for name, digest in VERL_SOURCE_SHA256.items():
        source = inspect.getsource(verl_function(name))
        assert hashlib.sha256(source.encode()).hexdigest() == digest, f"verl's {name} changed"
    assert bshd_padding.BSHD_PADDING_VECTORIZED.needed()
