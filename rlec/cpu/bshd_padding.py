"""verl's BSHD padding of a micro-batch without a Python loop over its rows: the CPU wing's ``bshd_padding_vectorized``.

verl 0.9.1's Megatron forward on padded (BSHD) batches (the CPU layout's, ``rlec.cpu.padded_forward``) pads each
micro-batch's nested (jagged) rows with ``verl.models.mcore.util.preprocess_bshd_engine`` (input ids, label,
temperature: three calls per micro-batch) and unpads the logits processor's outputs with ``postprocess_bshd_engine``
(log-probs, entropy). Both loop over the rows in Python, indexing a nested tensor per row: about 0.24 s of the e3
premise gate's 2.0 s ``old_log_prob`` phase, similar in ``update_actor`` (``docs/speed.md``, lever 3).

Here the same tensors come from one masked copy each way, for context-parallel size 1 (the CPU layout's). For
jagged rows of lengths ``L_i`` padded to ``S`` (the longest row, or ``forced_max_seqlen``, rounded up to the
tensor-parallel size, and for FP8 padding as verl does it):

- pre: ``valid[i, t] = t < L_i``; ``padded[valid] = values`` (row-major order is the rows' order in the jagged
  values); ``roll(-1)`` along the sequence for ``need_roll``; positions ``arange(S)`` expanded to ``(b, S)``;
- post: ``output[mask]`` is the concatenation of verl's per-row ``output[i][mask[i]]``, wrapped as a jagged nested
  tensor with the same offsets and min / max lengths ``torch.nested.as_nested_tensor`` gives the list.

Anything else (context parallel > 1, an NPU's 4-D mask, a nested tensor with holes or another ragged dimension, an
empty batch, ``forced_max_seqlen`` below the longest row) goes to verl's own function. The tensors are equal to
verl's, gradients included (``tests/verl_plugin/test_bshd_padding.py``, which also pins the source of the two verl
functions: a verl release that changes them fails there until the equality is checked again).
"""

from __future__ import annotations

import functools
import inspect
import math
from typing import Any, Callable, Optional

import torch

from rlec.megatron.compat import Shim, is_patched, mark_patched

__all__ = ["BSHD_PADDING_VECTORIZED", "postprocess_bshd", "preprocess_bshd"]


def _util() -> Any:
    from verl.models.mcore import util

    return util


def _dense_jagged(x: Any) -> bool:
    """A jagged nested tensor ``(b, j, ...)`` ragged in dim 1, without holes (``lengths`` unset).

    Reads torch's jagged ``NestedTensor`` attributes directly: its public ``layout`` / ``values()`` cost 20-100 us a
    call through ``__torch_function__``, more than the padding itself (torch is pinned; the tests assert this path is
    taken, so a torch that renames them fails there rather than silently running verl's loop).
    """
    from torch.nested._internal.nested_tensor import NestedTensor

    return isinstance(x, NestedTensor) and x._ragged_idx == 1 and x._lengths is None and x.dim() >= 2


def preprocess_bshd(input_ids: torch.Tensor, pre_process: bool = True, need_roll: bool = False,
                    use_fp8_padding: bool = False, forced_max_seqlen: Optional[int] = None
                    ) -> Optional[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """verl's ``preprocess_bshd_engine`` at context-parallel size 1, vectorised; None where it does not apply.

    Args:
        input_ids: jagged nested ``(b, j, *dense)`` (any dtype; ids, labels, temperatures, routes).
        pre_process: unused, as in verl.
        need_roll: shift every padded row left by one (labels: ``roll(-1)`` along the sequence, as verl).
        use_fp8_padding: round the padded length up for FP8 block quantization, as verl.
        forced_max_seqlen: pad to this raw length instead of the longest row (then aligned as verl aligns).

    Returns:
        ``(padded (b, S, *dense), valid (b, S) bool, positions (b, S) long)``, equal to verl's; None when the case is
        not covered (context parallel > 1, an NPU, an empty batch, a nested tensor with holes or ragged elsewhere,
        ``forced_max_seqlen`` shorter than a row): the caller then runs verl's function.
    """
    util = _util()
    mpu = util.mpu
    cp_size = mpu.get_context_parallel_world_size()  # 1, or 0 before Megatron's groups exist (verl reads both as 1)
    if util.is_npu_available or not _dense_jagged(input_ids) or cp_size > 1:
        return None
    batch_size = input_ids.shape[0]
    if batch_size == 0:
        return None
    offsets = input_ids.offsets()
    lengths = offsets.diff()
    longest = int(lengths.max())
    if forced_max_seqlen is not None and forced_max_seqlen < longest:
        return None  # verl's copy of the longer row fails: let it say so
    max_seqlen = forced_max_seqlen if forced_max_seqlen is not None else longest
    tp_size = mpu.get_tensor_model_parallel_world_size()
    if tp_size > 1:  # verl: align_size = tp_size at context-parallel size 1
        max_seqlen += (tp_size - max_seqlen % tp_size) % tp_size
    if use_fp8_padding:  # verl's arithmetic, its cp_size included
        fp8_total_align = 128 * tp_size * cp_size
        fp8_seq_align = math.lcm(fp8_total_align // math.gcd(batch_size, fp8_total_align), tp_size)
        max_seqlen = ((max_seqlen + fp8_seq_align - 1) // fp8_seq_align) * fp8_seq_align

    device = input_ids._values.device
    positions = torch.arange(max_seqlen, dtype=torch.long, device=device)
    valid = positions.unsqueeze(0) < lengths.unsqueeze(1)
    # the buffer itself unless autograd must see the nested tensor (a leaf made to require grad)
    values = input_ids.values() if input_ids.requires_grad else input_ids._values
    start, end = offsets[0].item(), offsets[-1].item()
    dense = tuple(values.shape[1:])
    padded = torch.zeros((batch_size, max_seqlen, *dense), dtype=values.dtype, device=device)
    where = valid.view(batch_size, max_seqlen, *(1,) * len(dense)).expand_as(padded)
    # row-major: row 0's tokens, then row 1's, ...: the order of the jagged values
    padded = padded.masked_scatter(where, values[start:end])
    if need_roll:
        padded = torch.roll(padded, shifts=-1, dims=1)
    return padded, valid, positions.unsqueeze(0).expand_as(valid)


def postprocess_bshd(output: torch.Tensor, attention_mask: torch.Tensor, post_process: bool = True
                     ) -> Optional[torch.Tensor]:
    """verl's ``postprocess_bshd_engine`` at context-parallel size 1, vectorised; None where it does not apply.

    Args:
        output: ``(b, S, ...)`` padded values (log-probs, entropy; may require grad).
        attention_mask: ``(b, S)``, True (or non-zero) on the positions to keep.
        post_process: False returns ``output`` unchanged, as verl.

    Returns:
        jagged nested ``(b, j, ...)``: row i is ``output[i][attention_mask[i]]``, with the offsets and min / max
        lengths ``torch.nested.as_nested_tensor`` gives verl's list of rows; None when not covered (context parallel
        > 1, an NPU, a mask of another shape, an empty batch).
    """
    if not post_process:
        return output
    util = _util()
    if (util.is_npu_available or attention_mask.dim() != 2 or tuple(output.shape[:2]) != tuple(attention_mask.shape)
            or output.shape[0] == 0 or util.mpu.get_context_parallel_world_size() > 1):
        return None
    mask = attention_mask.bool()
    values = output[mask]
    lengths = mask.sum(dim=1)
    offsets = torch.nn.functional.pad(lengths.cumsum(0), (1, 0)).to(device=values.device, dtype=torch.int64)
    return torch.nested.nested_tensor_from_jagged(values, offsets, min_seqlen=int(lengths.min()),
                                                  max_seqlen=int(lengths.max()))


# --- the shim -------------------------------------------------------------------------------------
def _loops_over_rows(func: Callable[..., Any]) -> bool:
    return "for i in range(batch_size):" in inspect.getsource(func)


def _vectorized_needed() -> bool:
    from verl.models.mcore import model_forward

    util = _util()
    pre, post = util.preprocess_bshd_engine, util.postprocess_bshd_engine
    if is_patched(pre, "bshd_padding_vectorized"):
        pre, post = pre.__wrapped__, post.__wrapped__
    engine = inspect.getsource(model_forward.gptmodel_forward_model_engine)
    # verl pads / unpads row by row, and its BSHD forward calls the two by the names model_forward imported
    return (_loops_over_rows(pre) and _loops_over_rows(post)
            and "preprocess_bshd_engine(" in engine and "postprocess_bshd_engine(" in engine)


def _vectorized_apply() -> None:
    from verl.models.mcore import model_forward

    util = _util()
    if is_patched(util.preprocess_bshd_engine, "bshd_padding_vectorized"):
        return
    if is_patched(model_forward.preprocess_bshd_engine, "bshd_attention_mask"):
        # that shim wraps the function it finds: applied first, it would keep verl's loop (VERL_SHIMS order)
        raise RuntimeError("bshd_padding_vectorized must be applied before bshd_attention_mask")
    pre, post = util.preprocess_bshd_engine, util.postprocess_bshd_engine

    @functools.wraps(pre)
    def preprocess_bshd_engine(input_ids: torch.Tensor, pre_process: bool = True, need_roll: bool = False,
                               use_fp8_padding: bool = False, forced_max_seqlen: Optional[int] = None) -> Any:
        out = preprocess_bshd(input_ids, pre_process, need_roll, use_fp8_padding, forced_max_seqlen)
        return out if out is not None else pre(input_ids, pre_process, need_roll, use_fp8_padding, forced_max_seqlen)

    @functools.wraps(post)
    def postprocess_bshd_engine(output: torch.Tensor, attention_mask: torch.Tensor, post_process: bool = True) -> Any:
        out = postprocess_bshd(output, attention_mask, post_process)
        return out if out is not None else post(output, attention_mask, post_process)

    mark_patched(preprocess_bshd_engine, "bshd_padding_vectorized")
    mark_patched(postprocess_bshd_engine, "bshd_padding_vectorized")
    # verl's forward imported both names from util; rlec's route padding (padded_forward.bshd_routes) reads util's
    for module in (util, model_forward):
        module.preprocess_bshd_engine = preprocess_bshd_engine
        module.postprocess_bshd_engine = postprocess_bshd_engine


BSHD_PADDING_VECTORIZED = Shim(
    "bshd_padding_vectorized", "~0.24 s a step of old_log_prob's ~1.0 s in the worker, similar in update_actor "
    "(docs/speed.md, lever 3): verl's preprocess_bshd_engine / postprocess_bshd_engine pad and unpad every "
    "micro-batch with a Python loop over its rows of nested tensors (one masked copy each way here, the same tensors)",
    _vectorized_needed, _vectorized_apply)
