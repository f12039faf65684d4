"""verl's Megatron forward on the CPU layout's padded (BSHD) batches: three shims of :data:`rlec.cpu.verl_shims.VERL_SHIMS`.

Without Transformer Engine the CPU layout trains padded (BSHD) micro-batches through Megatron's local attention, where
verl 0.9.1 assumes TE's packed (THD) rows. Each shim here names the error or cost it answers and has a probe on the
unpatched library (``tests/verl_plugin/test_cpu.py``); :mod:`rlec.cpu.verl_shims` registers them with the others:

- ``bshd_attention_mask``: the ``(batch, 1, seq, seq)`` causal padding mask Megatron's local attention reads
  (:func:`causal_padding_mask`);
- ``response_only_logits``: the LM head computes the positions that predict response tokens only
  (:func:`response_logit_index`), equal to verl's full computation (``docs/cpu.md``: a behaviour shim, for speed);
- ``router_replay_bshd``: routing replay (R2 / R3) records and replays routes in the padded order Megatron's router
  sees (:func:`bshd_routes`).
"""

from __future__ import annotations

import functools
import inspect
import os
from typing import Any, Optional

import torch

from rlec.megatron.compat import Shim, is_patched, mark_patched

__all__ = ["BSHD_ATTENTION_MASK", "RESPONSE_ONLY_LOGITS", "ROUTER_REPLAY_BSHD", "ROUTER_REPLAY_LOG_ENV", "bshd_routes",
           "causal_padding_mask", "response_logit_index"]


# --- 5. the padded-batch (BSHD) attention mask for Megatron's local attention ------------------
def _bshd_mask_needed() -> bool:
    from verl.models.mcore import model_forward

    return "attention_mask = attention_mask_bshd" in inspect.getsource(model_forward.gptmodel_forward_model_engine)


def causal_padding_mask(valid: torch.Tensor) -> torch.Tensor:
    """Megatron's local-attention mask from a right-padded validity mask.

    Args:
        valid: (batch, seq) bool, True on real tokens (verl's ``preprocess_bshd_engine``).

    Returns:
        (batch, 1, seq, seq) bool, True where attention is masked out: key after the query
        (causal) or a padding key. Megatron's ``DotProductAttention`` fills those with -10000.
    """
    seq = valid.shape[1]
    causal = torch.ones(seq, seq, dtype=torch.bool, device=valid.device).tril_()
    allowed = causal[None, None, :, :] & valid[:, None, None, :].bool()
    return ~allowed


def _bshd_mask_apply() -> None:
    from verl.models.mcore import model_forward

    preprocess = model_forward.preprocess_bshd_engine
    if is_patched(preprocess, "bshd_attention_mask"):
        return

    @functools.wraps(preprocess)
    def preprocess_bshd_engine(*args: Any, **kwargs: Any) -> Any:
        ids, mask, positions = preprocess(*args, **kwargs)
        if mask is not None and mask.dim() == 2:
            mask = causal_padding_mask(mask)
        return ids, mask, positions

    postprocess = model_forward.postprocess_bshd_engine

    @functools.wraps(postprocess)
    def postprocess_bshd_engine(output: Any, attention_mask: Any, *args: Any, **kwargs: Any) -> Any:
        if attention_mask is not None and attention_mask.dim() == 4:
            attention_mask = ~attention_mask[:, 0, -1, :]  # the last query sees every valid key
        return postprocess(output, attention_mask, *args, **kwargs)

    model_forward.preprocess_bshd_engine = mark_patched(preprocess_bshd_engine, "bshd_attention_mask")
    model_forward.postprocess_bshd_engine = postprocess_bshd_engine


# --- 7. response-only logits in verl's Megatron LM-head forward --------------------------------
def _response_logits_needed() -> bool:
    from verl.workers.engine.megatron.transformer_impl import MegatronEngineWithLMHead

    # verl projects every position onto the vocabulary and takes log-probs / entropy there
    processor = inspect.getsource(MegatronEngineWithLMHead._lm_head_logits_processor)
    step = inspect.getsource(MegatronEngineWithLMHead.forward_step)
    return "assert logits.shape[:2] == label.shape[:2]" in processor and "self._lm_head_logits_processor" in step


def response_logit_index(batch: Any, window: int | None = None) -> Optional[torch.Tensor]:
    """Positions whose logits predict each row's last ``window`` tokens, in verl's padded (BSHD) layout.

    verl's BSHD forward right-pads row i's ``L_i`` tokens to the batch's longest; the log-prob of
    token t comes from the logits at t - 1, and verl keeps (``no_padding_2_padding``,
    ``response_from_nested``) only those of the response. The window is the response's longest
    length (``loss_mask``: nested per-sample response masks, or padded ``(b, R)``).

    Args:
        batch: verl's micro-batch (``input_ids`` nested, ``loss_mask``).
        window: K; default the longest response.

    Returns:
        ``(b, K)`` long (:func:`rlec.megatron.logprobs.window_index`; -1 marks unused slots), or
        None when ``input_ids`` is not a nested tensor (the layout is then not known).
    """
    from rlec.megatron.logprobs import window_index

    input_ids = batch["input_ids"]
    if not getattr(input_ids, "is_nested", False):
        return None
    lengths = input_ids.offsets().diff().to(torch.long)
    if window is None:
        mask = batch["loss_mask"]
        window = int(mask.offsets().diff().max()) if getattr(mask, "is_nested", False) else int(mask.shape[-1])
    window = max(1, min(int(window), int(lengths.max())))
    valid = torch.arange(int(lengths.max()))[None, :] < lengths[:, None].cpu()
    return window_index(valid, window)


def _window_applies(engine: Any, batch: Any) -> bool:
    """Whether the response-only window is exact for this forward (else verl's full logits run)."""
    from verl.utils import tensordict_utils as tu

    cfg = engine.engine_config
    # sequence parallel (TP > 1) is covered: windowed_output gathers the sequence before the window
    return not (
        cfg.use_remove_padding  # packed (THD) rows: positions are not per-row
        or cfg.use_fused_kernels
        or getattr(cfg, "dynamic_context_parallel", False)
        or int(getattr(cfg, "context_parallel_size", 1) or 1) > 1  # each rank holds a slice of every row
        or engine.model_config.mtp.enable
        or hasattr(engine.model_config.hf_config, "vision_config")
        or tu.get_non_tensor_data(batch, key="distillation_use_topk", default=False)  # reads every position
    )


def _scatter_window(value: torch.Tensor, index: torch.Tensor, seq: int) -> torch.Tensor:
    """``(b, K)`` per-slot values -> ``(b, seq)``, at ``index`` (0 elsewhere and for unused slots)."""
    used = (index >= 0).to(value.device)
    slot = index.clamp(min=0).to(value.device)
    picked = torch.where(used, value, torch.zeros_like(value))
    out = torch.zeros((value.shape[0], seq), dtype=value.dtype, device=value.device)
    return out.scatter_add(1, slot, picked)  # unused slots add 0; used positions are distinct


def _response_logits_apply() -> None:
    from verl.workers.engine.megatron.transformer_impl import MegatronEngineWithLMHead

    from rlec.megatron.logprobs import windowed_output

    forward_step = MegatronEngineWithLMHead.forward_step
    if is_patched(forward_step, "response_only_logits"):
        return
    processor = MegatronEngineWithLMHead._lm_head_logits_processor

    @functools.wraps(forward_step)
    def windowed_forward_step(self: Any, batch_iter: Any, model: Any, logits_processor_func: Any,
                              postprocess_micro_batch_func: Any) -> Any:
        batch = next(batch_iter)
        index = response_logit_index(batch) if _window_applies(self, batch) else None
        if index is None:
            return forward_step(self, iter([batch]), model, logits_processor_func, postprocess_micro_batch_func)
        self._rlec_logit_index = index
        try:
            with windowed_output(model, index):
                return forward_step(self, iter([batch]), model, logits_processor_func, postprocess_micro_batch_func)
        finally:
            self._rlec_logit_index = None

    @functools.wraps(processor)
    def windowed_processor(self: Any, logits: torch.Tensor, label: torch.Tensor, temperature: torch.Tensor,
                           **kwargs: Any) -> dict[str, torch.Tensor]:
        index = getattr(self, "_rlec_logit_index", None)
        if index is None:
            return processor(self, logits, label, temperature, **kwargs)
        if logits.shape[1] != index.shape[1]:
            raise RuntimeError(f"response-only logits: {logits.shape[1]} positions from the output layer, "
                               f"{index.shape[1]} expected (is another hook on the output layer?)")
        slot = index.clamp(min=0).to(label.device)
        out = processor(self, logits, torch.gather(label, 1, slot), torch.gather(temperature, 1, slot), **kwargs)
        return {k: _scatter_window(v, index, label.shape[1]) if torch.is_tensor(v) and v.dim() == 2 else v
                for k, v in out.items()}

    MegatronEngineWithLMHead.forward_step = mark_patched(windowed_forward_step, "response_only_logits")
    MegatronEngineWithLMHead._lm_head_logits_processor = windowed_processor


# --- 8. routing replay (R2 / R3) on padded (BSHD) batches ----------------------------------------
ROUTER_REPLAY_LOG_ENV = "RLEC_ROUTER_REPLAY_LOG"


def _router_replay_bshd_needed() -> bool:
    from verl.utils.megatron import router_replay_utils

    # verl packs the recorded / replayed routes as THD rows (no padding) whatever the forward's layout
    record = inspect.getsource(router_replay_utils.merge_router_topk_indices)
    replay = inspect.getsource(router_replay_utils.set_router_replay_data)
    return "preprocess_thd_engine(" in record and "preprocess_thd_engine(" in replay and "bshd" not in replay


def _model_routers(model: Any) -> list[tuple[int, Any]]:
    from verl.utils.megatron.router_replay_utils import iter_model_routers

    routers = sorted(iter_model_routers(model), key=lambda item: item[0])
    if len({number for number, _ in routers}) != len(routers):
        raise RuntimeError(f"router replay: duplicate layer numbers in the forwarded model: {[n for n, _ in routers]}")
    return routers


def bshd_routes(routes: torch.Tensor, replay_mask: Optional[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-sample routes -> the order Megatron's router sees a padded (BSHD) micro-batch in.

    Megatron's router flattens its ``(seq, batch, experts)`` logits to ``seq * batch`` rows (row
    ``s * b + i`` is token ``s`` of sample ``i``); verl's BSHD forward right-pads every sample to the
    micro-batch's longest (``preprocess_bshd_engine``, TP-aligned), the same function used here.

    Args:
        routes: nested ``(batch, j, layers, topk)`` expert indices (a sample's rows are its tokens).
        replay_mask: nested ``(batch, j)`` bool (True: replay; False: the router's own choice), or None
            (replay every real token).

    Returns:
        ``(seq * batch, layers, topk)`` routes (0 at padding) and the ``(seq * batch,)`` bool replay
        mask, False at every padding position so padding keeps its native routes.
    """
    from verl.models.mcore.util import preprocess_bshd_engine

    padded, valid, _ = preprocess_bshd_engine(routes, pre_process=True)  # (b, S, L, k), (b, S)
    mask = valid.bool()
    if replay_mask is not None:
        padded_mask, _, _ = preprocess_bshd_engine(replay_mask.to(torch.long), pre_process=True)
        mask = mask & padded_mask.bool()
    b, seq = mask.shape
    return (padded.permute(1, 0, 2, 3).reshape(seq * b, *padded.shape[2:]).contiguous(),
            mask.t().reshape(seq * b).contiguous())


def _replay_log(record: dict[str, Any]) -> None:
    """One JSON line per router call into ``$RLEC_ROUTER_REPLAY_LOG`` (the end-to-end test's evidence)."""
    path = os.environ.get(ROUTER_REPLAY_LOG_ENV)
    if not path:
        return
    import json

    with open(f"{path}.{os.getpid()}", "a", encoding="utf-8") as f:
        f.write(json.dumps(record) + "\n")


def _router_replay_bshd_apply() -> None:
    from verl.utils.megatron import router_replay_patch
    from verl.workers.engine.megatron import transformer_impl

    from rlec.megatron.parallel import sequence_parallel_gather, sequence_parallel_slice

    replay_data = transformer_impl.set_router_replay_data
    if is_patched(replay_data, "router_replay_bshd"):
        return
    merge = transformer_impl.merge_router_topk_indices

    @functools.wraps(replay_data)
    def set_router_replay_data(layers_topk_idx: Any, attention_mask: Any, tf_config: Any, vp_rank: Any = None,
                               replay_mask: Any = None, local_cp_size: Any = None, model: Any = None) -> None:
        if layers_topk_idx is None or not getattr(layers_topk_idx, "is_nested", False) or model is None:
            return replay_data(layers_topk_idx, attention_mask, tf_config, vp_rank, replay_mask=replay_mask,
                               local_cp_size=local_cp_size, model=model)
        with torch.no_grad():
            routes, mask = bshd_routes(layers_topk_idx, replay_mask)
            if tf_config.sequence_parallel:  # each TP rank routes its slice of the sequence
                routes, mask = sequence_parallel_slice(routes), sequence_parallel_slice(mask)
            by_layer = routes.shape[1] == tf_config.num_layers  # R3: every layer; R2: the MoE layers
            routers = _model_routers(model)
            if not routers:
                raise RuntimeError("router_replay REPLAY found no routers in the forwarded model.")
            for ordinal, (number, router) in enumerate(routers):
                idx = number - 1 if by_layer else ordinal
                if not 0 <= idx < routes.shape[1]:
                    raise RuntimeError(f"router_replay REPLAY data has {routes.shape[1]} layers; layer {number} missing")
                router.set_target_indices(routes[:, idx].to(torch.int64), replay_mask=mask)

    @functools.wraps(merge)
    def merge_router_topk_indices(attention_mask: Any, input_ids: Any, mini_layer_topk_idx_list: list, tf_config: Any,
                                  vp_rank: Any = None, local_cp_size: Any = None, model: Any = None) -> None:
        routers = _model_routers(model) if model is not None else []
        if not getattr(input_ids, "is_nested", False) or not routers:
            return merge(attention_mask, input_ids, mini_layer_topk_idx_list, tf_config, vp_rank,
                         local_cp_size=local_cp_size, model=model)
        with torch.no_grad():
            missing = [number for number, router in routers if router.recorded_topk_idx is None]
            if missing:
                raise RuntimeError(f"router replay RECORD did not capture the routers of layers {missing}")
            rows = torch.stack([router.recorded_topk_idx for _, router in routers]).permute(1, 0, 2)  # (S*b, L, k)
            if tf_config.sequence_parallel:
                rows = sequence_parallel_gather(rows)
            lengths = input_ids.offsets().diff().tolist()
            b = len(lengths)
            padded = rows.reshape(rows.shape[0] // b, b, *rows.shape[1:]).permute(1, 0, 2, 3)  # (b, S, L, k)
            parts = [padded[i, :n].to(torch.int16).cpu() for i, n in enumerate(lengths)]
            mini_layer_topk_idx_list.append(torch.nested.as_nested_tensor(parts, layout=torch.jagged))

    get_replay_topk = router_replay_patch.RouterReplay.get_replay_topk

    @functools.wraps(get_replay_topk)
    def logged_get_replay_topk(self: Any, scores: torch.Tensor, topk: int, num_groups: Any = None, group_topk: Any = None,
                               default_compute_topk: Any = None) -> Any:
        action = self.router_replay_action
        target, mask = self.target_topk_idx, self.target_replay_mask
        probs, indices = get_replay_topk(self, scores, topk, num_groups=num_groups, group_topk=group_topk,
                                         default_compute_topk=default_compute_topk)
        if os.environ.get(ROUTER_REPLAY_LOG_ENV) and action is not None:
            record: dict[str, Any] = {"action": getattr(action, "name", str(action)), "rows": int(indices.shape[0]),
                                      "grad": torch.is_grad_enabled()}
            if action == router_replay_patch.RouterReplayAction.REPLAY_FORWARD and target is not None:
                _, native = default_compute_topk(scores, topk, num_groups=num_groups, group_topk=group_topk)
                chosen = mask.bool().to(indices.device) if mask is not None else torch.ones(indices.shape[0], dtype=torch.bool)
                same = lambda a, b: (a.sort(-1).values == b.sort(-1).values).all(-1)  # noqa: E731
                record.update(replayed=int(chosen.sum()),
                              replayed_equal_target=int((same(indices, target.to(indices.device)) & chosen).sum()),
                              native_differs=int((~same(native, target.to(indices.device)) & chosen).sum()))
            _replay_log(record)
        return probs, indices

    transformer_impl.set_router_replay_data = mark_patched(set_router_replay_data, "router_replay_bshd")
    transformer_impl.merge_router_topk_indices = merge_router_topk_indices
    router_replay_patch.RouterReplay.get_replay_topk = logged_get_replay_topk


# the three shims, each beside its code; :data:`rlec.cpu.verl_shims.VERL_SHIMS` lists them with the others
BSHD_ATTENTION_MASK = Shim(
    "bshd_attention_mask", "RuntimeError: The size of tensor a (S) must match the size of tensor b (B) at non-singleton "
    "dimension 2 (verl passes a (batch, seq) padding mask that only TE attention reads; Megatron's local "
    "DotProductAttention needs (batch, 1, seq, seq))", _bshd_mask_needed, _bshd_mask_apply)
RESPONSE_ONLY_LOGITS = Shim(
    "response_only_logits", "74-90 s per step: verl's Megatron LM head projects every prompt and response position "
    "onto the 151,936-token vocabulary and takes log-probs / entropy there, though only the response's are used "
    "(response positions only, rlec.megatron.logprobs.windowed_output)", _response_logits_needed, _response_logits_apply)
ROUTER_REPLAY_BSHD = Shim(
    "router_replay_bshd", "RuntimeError: Router replay tensors are not aligned: scores=(1972, 8), targets=(1215, 2) "
    "(verl 0.9.1 records and replays routes as packed THD rows; the CPU layout's Megatron forward routes every "
    "position of a padded BSHD micro-batch)", _router_replay_bshd_needed, _router_replay_bshd_apply)
