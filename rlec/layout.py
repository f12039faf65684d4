"""The one parallel layout of a run and the one set of rules it must satisfy.

A value type below both sides that use it: the pre-launch planner (:mod:`rlec.cluster`) and the Megatron
side (:mod:`rlec.megatron`) import it, it imports neither (an import-linter contract in pyproject.toml).

:class:`ParallelLayout` holds every size the Megatron update and the vLLM rollout are split by
(verl's keys ``actor_rollout_ref.actor.megatron.*`` and ``actor_rollout_ref.rollout.*``), plus
the offload flags the memory model needs. The rules are plain functions returning
:class:`Finding` s, so each caller words the setting its own way (``names``) and decides what a
finding means:

- ``rlec.cluster.config_check`` (``DRY_RUN=1``) reports them under verl's keys;
- the Megatron side (:meth:`ParallelLayout.check`, :meth:`ParallelLayout.check_model`, used by
  the converter and ``rlec.megatron.model.build_model``) raises ``ValueError``.

Limits, with the component that imposes them:

- world size is a multiple of TP x PP x CP and of EP x ETP x PP (megatron-core
  ``initialize_model_parallel``);
- TP divides the attention heads, the KV heads (Megatron does not replicate KV heads), the
  vocabulary and, for dense models, the MLP width; EP divides the experts, ETP the expert
  intermediate size; PP divides the layers unless the first/last stage sizes are set, VPP the
  layers of a stage (Megatron);
- vLLM rollout: TP divides the attention heads, TP and the KV heads divide one another (vLLM
  replicates KV heads when TP is larger), expert parallel is 1 or TP x DP (verl
  ``workers/config/rollout.py``), EP divides the experts;
- FP8 rollout (``rollout.quantization=fp8``): verl asks vLLM for 128 x 128 weight blocks
  (``weight_block_size: [128, 128]`` in ``vllm_async_server.py``), and vLLM 0.24 refuses, at
  start-up, any quantized weight whose per-GPU slice is not a whole number of blocks
  (``validate_fp8_block_shape`` for attention and dense MLP; ``Fp8MoEMethod.create_weights``
  for experts: "output_size of gate's and up's weight = 192 is not divisible by weight
  quantization block_n = 128" for Qwen3-30B-A3B at rollout TP 4, EP 1). The slices checked:
  query heads x head_dim / TP, KV heads per GPU x head_dim, dense intermediate / TP, and the
  expert intermediate / TP with rollout EP 1 (whole experts with rollout EP > 1).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Mapping

from rlec.model_shape import ModelShape
from rlec.config import Finding

FP8_BLOCK = 128  # verl's FP8 rollout: weight_block_size [128, 128] (block_n = block_k = 128)

__all__ = ["FP8_BLOCK", "Finding", "ParallelLayout", "model_findings", "raise_errors", "rollout_findings", "size_findings"]


@dataclass(frozen=True)
class ParallelLayout:
    """Megatron and vLLM parallel sizes and offload flags of one run.

    Attributes:
        world_size: number of GPUs (processes); ``None`` means ``tp * pp * cp`` (no data parallel).
        tp, pp, cp: tensor-, pipeline- and context-parallel sizes of the Megatron update.
        ep: expert-parallel size (experts split over it).
        etp: expert-tensor-parallel size; ``None`` means ``tp`` (megatron-core's and verl's default).
        vpp: virtual pipeline stages per rank (``None``: no interleaving).
        first_stage_layers, last_stage_layers: uneven first/last pipeline stages (``None``: even).
        distributed_optimizer: Adam states sharded over data-parallel ranks.
        param_offload, optimizer_offload: verl moves parameters+gradients / optimizer states to
            the CPU during rollout.
        optimizer_cpu_fraction: share of Adam states kept on the CPU for the update too
            (Megatron's ``optimizer_cpu_offload`` x ``optimizer_offload_fraction``), in [0, 1].
        rollout_tp, rollout_dp, rollout_ep: vLLM tensor, data and expert parallel sizes.
        rollout_gpu_memory_utilization: vLLM's share of GPU memory, in (0, 1).
        rollout_quantization: ``None`` (bf16 weights) or ``"fp8"`` (128 x 128 blocks).
    """

    world_size: int | None = None
    tp: int = 1
    pp: int = 1
    cp: int = 1
    ep: int = 1
    etp: int | None = None
    vpp: int | None = None
    first_stage_layers: int | None = None
    last_stage_layers: int | None = None
    distributed_optimizer: bool = True
    param_offload: bool = False
    optimizer_offload: bool = False
    optimizer_cpu_fraction: float = 0.0
    rollout_tp: int = 1
    rollout_dp: int = 1
    rollout_ep: int = 1
    rollout_gpu_memory_utilization: float = 0.5
    rollout_quantization: str | None = None

    @property
    def expert_tp(self) -> int:
        """Expert-tensor-parallel size with the default resolved (``etp`` or ``tp``)."""
        return self.tp if self.etp is None else self.etp

    @property
    def world(self) -> int:
        """Number of GPUs with the default resolved."""
        return self.tp * self.pp * self.cp if self.world_size is None else self.world_size

    @property
    def dp(self) -> int:
        """Data-parallel size of the dense part: ``world / (tp * pp * cp)`` (floor)."""
        return self.world // (self.tp * self.pp * self.cp)

    @property
    def expert_dp(self) -> int:
        """Data-parallel size of the experts: ``world / (ep * etp * pp)`` (floor)."""
        return self.world // (self.ep * self.expert_tp * self.pp)

    @property
    def rollout_weight_bytes(self) -> float:
        """Bytes per quantizable rollout weight: 1 with FP8 rollout, else 2 (bf16)."""
        return 1.0 if self.rollout_quantization == "fp8" else 2.0

    def as_dict(self) -> dict[str, int]:
        """Resolved Megatron sizes as plain ints (metadata files and logs)."""
        return {"tp": self.tp, "ep": self.ep, "etp": self.expert_tp, "pp": self.pp, "world_size": self.world, "dp": self.dp}

    def check(self, names: Mapping[str, str] | None = None) -> None:
        """Raise on the first kind of error :func:`size_findings` reports.

        Args:
            names: how the caller's user names each size (``{"tp": "--tp"}``); default the field name.

        Raises:
            ValueError: every error, ``"<setting>: <rule with the values>"``, joined by ``"; "``.
        """
        raise_errors(size_findings(self, names))

    def check_model(self, model: object, source: str = "config.json", names: Mapping[str, str] | None = None) -> None:
        """Raise when the sizes do not fit together or do not divide the model.

        Args:
            model: a :class:`~rlec.model_shape.ModelShape`, a ``config.json`` dict or a
                ``transformers`` config object.
            source: the model's name in messages (e.g. its ``config.json`` path).
            names: as in :meth:`check`.

        Raises:
            ValueError: ``"<source>: <setting>: <rule with the values>; ..."`` for every error of
                :func:`size_findings` and :func:`model_findings`.
        """
        shape = ModelShape.of(model, source)
        raise_errors(size_findings(self, names) + model_findings(self, shape, names), prefix=f"{source}: ")


def _namer(names: Mapping[str, str] | None):
    names = dict(names or {})
    return lambda field_name: names.get(field_name, field_name)


def raise_errors(findings: list[Finding], prefix: str = "") -> None:
    """Raise ``ValueError`` listing the error findings (warnings are ignored).

    Raises:
        ValueError: ``prefix + "<key>: <message>; ..."`` when any finding is an error.
    """
    errors = [f"{f.key}: {f.message}" for f in findings if f.level == "error"]
    if errors:
        raise ValueError(prefix + "; ".join(errors))


def _type_findings(lay: ParallelLayout, key) -> list[Finding]:
    out: list[Finding] = []
    for f in fields(lay):
        value = getattr(lay, f.name)
        if f.name in ("etp", "vpp", "first_stage_layers", "last_stage_layers", "world_size") and value is None:
            continue
        if f.type in ("int", "int | None") and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            out.append(Finding("error", key(f.name), f"parallel size {f.name}={value!r}: expected an integer >= 1"))
    return out


def size_findings(lay: ParallelLayout, names: Mapping[str, str] | None = None) -> list[Finding]:
    """Sizes that are not integers >= 1, or a world size no Megatron grid fits (megatron-core).

    Returns:
        Error findings keyed by ``names[field]``; empty when the sizes fit together.
    """
    key = _namer(names)
    out = _type_findings(lay, key)
    if out:
        return out
    grid = lay.tp * lay.pp * lay.cp
    if lay.world % grid:
        out.append(Finding("error", key("world_size"), f"world size {lay.world} is not a multiple of TP x PP x CP = "
                           f"{lay.tp} x {lay.pp} x {lay.cp} = {grid}, so no data-parallel size fits"))
    expert_grid = lay.ep * lay.expert_tp * lay.pp
    if lay.world % expert_grid:
        out.append(Finding("error", key("ep"), f"EP x ETP = {lay.ep} x {lay.expert_tp} must divide the "
                           f"{lay.world // lay.pp if lay.world % lay.pp == 0 else lay.world / lay.pp:g} GPUs of a "
                           f"pipeline stage (world size {lay.world} is not a multiple of EP x ETP x PP = {expert_grid})"))
    if not 0.0 <= lay.optimizer_cpu_fraction <= 1.0:
        out.append(Finding("error", key("optimizer_cpu_fraction"),
                           f"optimizer_offload_fraction {lay.optimizer_cpu_fraction} must be in [0, 1]"))
    return out


def model_findings(lay: ParallelLayout, shape: ModelShape, names: Mapping[str, str] | None = None) -> list[Finding]:
    """Megatron sizes that do not divide the model (heads, vocabulary, experts, layers).

    Returns:
        Error findings keyed by ``names[field]``; empty when the layout fits the model (or when
        a size is not an integer >= 1, which :func:`size_findings` reports).
    """
    key = _namer(names)
    if _type_findings(lay, key):
        return []
    out: list[Finding] = []

    def need(field_name: str, size: int, what: str, value: int, note: str = "") -> None:
        if size > 1 and value % size:
            out.append(Finding("error", key(field_name), f"{field_name.upper()} {size} must divide the {value} {what}{note}"))

    need("tp", lay.tp, "attention heads (num_attention_heads)", shape.num_attention_heads)
    need("tp", lay.tp, "KV heads (num_key_value_heads)", shape.num_kv_heads, "; Megatron does not replicate KV heads")
    need("tp", lay.tp, "vocabulary entries (vocab_size)", shape.vocab_size)
    if shape.num_experts:
        need("ep", lay.ep, "experts (num_experts)", shape.num_experts)
        need("etp", lay.expert_tp, "expert intermediate size (moe_intermediate_size)", shape.moe_intermediate_size)
    elif lay.ep > 1:
        out.append(Finding("error", key("ep"), f"EP {lay.ep} > 1 but the model is dense (no num_experts)"))
    if shape.moe_layers < shape.num_layers:
        need("tp", lay.tp, "MLP intermediate size (intermediate_size)", shape.intermediate_size)
    if lay.first_stage_layers is None and lay.last_stage_layers is None:
        need("pp", lay.pp, "layers (num_hidden_layers)", shape.num_layers,
             " (or set num_layers_in_first/last_pipeline_stage)")
    if lay.vpp and lay.pp and (shape.num_layers // lay.pp) % int(lay.vpp):
        out.append(Finding("error", key("vpp"), f"VPP {lay.vpp} must divide the {shape.num_layers // lay.pp} layers "
                           "of a pipeline stage"))
    return out


def rollout_findings(
    lay: ParallelLayout, shape: ModelShape, names: Mapping[str, str] | None = None, gpus_per_node: int | None = None
) -> list[Finding]:
    """vLLM rollout sizes that vLLM or verl refuse for this model (see the module docstring).

    Args:
        lay: the layout (``rollout_*`` fields).
        shape: the model.
        names: as in :meth:`ParallelLayout.check`, keyed by ``rollout_tp``, ``rollout_ep``, ...
        gpus_per_node: when given, a replica larger than a node must span whole nodes.

    Returns:
        Error findings; empty when vLLM would start.
    """
    key = _namer(names)
    out: list[Finding] = []
    tp, dp, ep = lay.rollout_tp, lay.rollout_dp, lay.rollout_ep
    for name, value in (("rollout_tp", tp), ("rollout_dp", dp), ("rollout_ep", ep)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            out.append(Finding("error", key(name), f"{name}={value!r}: expected an integer >= 1"))
    if out:
        return out
    if shape.num_attention_heads % tp:
        out.append(Finding("error", key("rollout_tp"), f"rollout TP {tp} must divide the {shape.num_attention_heads} "
                           "attention heads (vLLM)"))
    if shape.num_kv_heads % tp and tp % shape.num_kv_heads:
        out.append(Finding("error", key("rollout_tp"), f"rollout TP {tp} and the {shape.num_kv_heads} KV heads must "
                           "divide one another (vLLM splits or replicates KV heads)"))
    if ep not in (1, tp * dp):
        out.append(Finding("error", key("rollout_ep"), f"rollout EP must be 1 or TP x DP = {tp} x {dp} = {tp * dp} "
                           f"(verl's RolloutConfig), got {ep}"))
    elif ep > 1 and not shape.num_experts:
        out.append(Finding("error", key("rollout_ep"), f"rollout EP {ep} > 1 but the model is dense (no num_experts)"))
    elif ep > 1 and shape.num_experts % ep:
        out.append(Finding("error", key("rollout_ep"), f"rollout EP {ep} must divide the {shape.num_experts} experts"))
    replica = tp * dp
    if lay.world % replica or (gpus_per_node and replica > gpus_per_node and replica % gpus_per_node):
        per_node = f" ({gpus_per_node} per node)" if gpus_per_node else ""
        out.append(Finding("error", key("rollout_tp"), f"a rollout replica of TP x DP = {replica} GPUs must tile the "
                           f"{lay.world} GPUs{per_node}"))
    if not 0.0 < lay.rollout_gpu_memory_utilization < 1.0:
        out.append(Finding("error", key("rollout_gpu_memory_utilization"),
                           f"must be in (0, 1), got {lay.rollout_gpu_memory_utilization}"))
    if lay.rollout_quantization == "fp8" and not out:
        out += _fp8_block_findings(lay, shape, key)
    return out


def _fp8_block_findings(lay: ParallelLayout, shape: ModelShape, key) -> list[Finding]:
    """vLLM's FP8 block rule on every quantized weight's per-GPU slice (module docstring)."""
    out: list[Finding] = []
    tp, block = lay.rollout_tp, FP8_BLOCK
    rule = f"FP8 rollout quantizes weights in {block} x {block} blocks and vLLM needs each GPU's slice of every " \
           f"quantized weight to be a multiple of {block}"
    kv_per_gpu = max(1, shape.num_kv_heads // tp)
    slices = [
        ("query projection", f"num_attention_heads x head_dim / rollout TP = {shape.num_attention_heads} x "
                             f"{shape.head_dim} / {tp}", shape.query_width // tp),
        ("key/value projections", f"KV heads per GPU x head_dim = {kv_per_gpu} x {shape.head_dim}",
         kv_per_gpu * shape.head_dim),
    ]
    if shape.moe_layers < shape.num_layers:
        slices.append(("dense MLP", f"intermediate_size / rollout TP = {shape.intermediate_size} / {tp}",
                       shape.intermediate_size // tp))
    for what, how, size in slices:
        if size % block:
            out.append(Finding("error", key("rollout_tp"), f"{rule}: {what} {how} = {size}; choose a rollout TP that "
                               f"leaves a multiple of {block}"))
    if shape.num_experts:
        m = shape.moe_intermediate_size
        if lay.rollout_ep > 1:
            if m % block:
                out.append(Finding("error", key("rollout_ep"), f"{rule}: expert intermediate size {m} (whole experts "
                                   f"with rollout EP {lay.rollout_ep}) is not; this model cannot use FP8 rollout"))
        elif (m // tp) % block or m % tp:
            fix = (f"set rollout expert parallel = TP x DP = {tp * lay.rollout_dp} (whole experts per GPU)"
                   if m % block == 0 else "this model's experts cannot use FP8 rollout (use precision=bf16)")
            out.append(Finding("error", key("rollout_ep"), f"{rule}: expert intermediate size / rollout TP = {m} / {tp} "
                               f"= {m / tp:g} with rollout EP 1 (vLLM: \"output_size of gate's and up's weight = "
                               f"{m // tp} is not divisible by weight quantization block_n = {block}\"); {fix}"))
    return out
