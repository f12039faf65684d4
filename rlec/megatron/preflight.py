"""Checks on a conversion's inputs that run before any heavy work (no Megatron import).

:func:`check_conversion` reads ``config.json`` and only the *headers* of the safetensors files,
and raises :class:`ConversionInputError` naming the file, key and expectation for: an unsupported
model type, missing or corrupt weight files, weights that disagree with the config (missing,
unexpected or mis-shaped tensors), parallel sizes that do not divide the model or do not match the
launched world size, and an output folder that exists without ``--overwrite``.

The expected tensor list below serves validation only; the weight *mapping* comes from mbridge.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlec.layout import ParallelLayout
from rlec.models import SUPPORTED_MODEL_TYPES, read_model_config

MAX_LISTED = 5
# how the converter's command line names each layout size (rlec.layout rules word their errors with these)
CLI_NAMES = {"tp": "--tp", "ep": "--ep", "etp": "--etp", "pp": "--pp", "world_size": "world size (torchrun --nproc_per_node)"}


class ConversionInputError(ValueError):
    """Bad input to a conversion, found before any heavy work."""


@dataclass(frozen=True)
class ConversionPlan:
    """Validated inputs of one conversion.

    Attributes:
        hf_path: the Hugging Face folder.
        config: ``config.json`` as a dict.
        layout: the parallel sizes, world size resolved.
        output: the destination folder.
        files: the safetensors files.
        n_tensors: tensors in the source.
        n_bytes: bytes of the safetensors files.
    """

    hf_path: Path
    config: dict[str, Any]
    layout: ParallelLayout
    output: Path
    files: tuple[Path, ...]
    n_tensors: int
    n_bytes: int


def _listed(items: list[str]) -> str:
    more = f" (and {len(items) - MAX_LISTED} more)" if len(items) > MAX_LISTED else ""
    return ", ".join(items[:MAX_LISTED]) + more


def read_config(hf_path: Path) -> dict[str, Any]:
    """``config.json`` as a dict, with the model type checked (:func:`rlec.models.read_model_config`).

    Raises:
        ConversionInputError: folder or file missing, invalid JSON, unsupported model type, or a
            Qwen3-MoE with dense layers (mbridge 0.15.1 does not map them).
    """
    try:
        cfg = read_model_config(hf_path, label="--hf-model-path", model_types=SUPPORTED_MODEL_TYPES)
    except (OSError, ValueError) as exc:
        raise ConversionInputError(str(exc)) from None
    cfg_file = Path(hf_path) / "config.json"
    model_type = cfg["model_type"]
    if model_type == "qwen3_moe" and (cfg.get("mlp_only_layers") or cfg.get("decoder_sparse_step", 1) != 1):
        raise ConversionInputError(
            f"{cfg_file}: mixed dense/MoE layers (mlp_only_layers={cfg.get('mlp_only_layers')}, "
            f"decoder_sparse_step={cfg.get('decoder_sparse_step')}) are not supported by mbridge 0.15.1"
        )
    return cfg


def hf_config_object(hf_path: Path) -> Any:
    """The folder's ``transformers`` config (resolves aliases such as ``num_local_experts``).

    Raises:
        ConversionInputError: transformers cannot build a config from ``config.json``.
    """
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(str(hf_path), local_files_only=True)
    except (ValueError, OSError, TypeError) as exc:
        raise ConversionInputError(f"{hf_path / 'config.json'}: transformers cannot read it ({exc})") from exc


def expected_hf_shapes(config: Any) -> dict[str, tuple[int, ...]]:
    """Hub-layout tensor names and shapes a Qwen3 / Qwen3-MoE config implies.

    Args:
        config: a ``transformers`` config (attributes, aliases resolved).

    Raises:
        ConversionInputError: a value needed to derive the shapes is missing.
    """
    try:
        hidden, vocab, layers = config.hidden_size, config.vocab_size, config.num_hidden_layers
        heads = config.num_attention_heads
        kv_heads = getattr(config, "num_key_value_heads", None) or heads
        head_dim = getattr(config, "head_dim", None) or hidden // heads
        moe = config.model_type == "qwen3_moe"
        experts, moe_width = (config.num_experts, config.moe_intermediate_size) if moe else (0, 0)
        width = getattr(config, "intermediate_size", None)
    except AttributeError as exc:
        raise ConversionInputError(f"config.json: {exc}") from exc
    cfg = {"tie_word_embeddings": getattr(config, "tie_word_embeddings", False), "attention_bias": getattr(config, "attention_bias", False)}
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (vocab, hidden), "model.norm.weight": (hidden,)}
    if not cfg.get("tie_word_embeddings", False):
        shapes["lm_head.weight"] = (vocab, hidden)
    for i in range(layers):
        p = f"model.layers.{i}."
        shapes.update({
            p + "input_layernorm.weight": (hidden,),
            p + "post_attention_layernorm.weight": (hidden,),
            p + "self_attn.q_proj.weight": (heads * head_dim, hidden),
            p + "self_attn.k_proj.weight": (kv_heads * head_dim, hidden),
            p + "self_attn.v_proj.weight": (kv_heads * head_dim, hidden),
            p + "self_attn.o_proj.weight": (hidden, heads * head_dim),
            p + "self_attn.q_norm.weight": (head_dim,),
            p + "self_attn.k_norm.weight": (head_dim,),
        })
        if cfg.get("attention_bias", False):
            shapes.update({p + "self_attn.q_proj.bias": (heads * head_dim,), p + "self_attn.k_proj.bias": (kv_heads * head_dim,),
                           p + "self_attn.v_proj.bias": (kv_heads * head_dim,)})
        if moe:
            shapes[p + "mlp.gate.weight"] = (experts, hidden)
            for e in range(experts):
                q = f"{p}mlp.experts.{e}."
                shapes.update({q + "gate_proj.weight": (moe_width, hidden), q + "up_proj.weight": (moe_width, hidden),
                               q + "down_proj.weight": (hidden, moe_width)})
        else:
            shapes.update({p + "mlp.gate_proj.weight": (width, hidden), p + "mlp.up_proj.weight": (width, hidden),
                           p + "mlp.down_proj.weight": (hidden, width)})
    return shapes


def read_safetensors_shapes(hf_path: Path) -> tuple[dict[str, tuple[tuple[int, ...], Path]], tuple[Path, ...]]:
    """Tensor shapes from the safetensors headers (no tensor data is read).

    Returns:
        ``({name: (shape, file)}, files)``.

    Raises:
        ConversionInputError: no weights, a file named by ``model.safetensors.index.json`` is
            missing, a file is not readable safetensors or is shorter than its header says, or
            the index and the files disagree.
    """
    from safetensors import safe_open

    index_file = hf_path / "model.safetensors.index.json"
    if index_file.is_file():
        try:
            weight_map = json.loads(index_file.read_text())["weight_map"]
        except (json.JSONDecodeError, KeyError) as exc:
            raise ConversionInputError(f"{index_file}: not a valid safetensors index ({exc})") from exc
        files = tuple(sorted({hf_path / f for f in weight_map.values()}))
        missing = [f.name for f in files if not f.is_file()]
        if missing:
            raise ConversionInputError(f"{index_file}: weight files missing: {_listed(missing)}")
    else:
        weight_map = None
        files = tuple(sorted(hf_path.glob("*.safetensors")))
    if not files:
        raise ConversionInputError(f"{hf_path}: no *.safetensors weights found")
    shapes: dict[str, tuple[tuple[int, ...], Path]] = {}
    for file in files:
        try:
            with safe_open(str(file), framework="pt") as f:
                end = 0
                for key in f.keys():
                    sl = f.get_slice(key)
                    shapes[key] = (tuple(sl.get_shape()), file)
                    end += _nbytes(sl)
        except Exception as exc:  # noqa: BLE001 - safetensors raises its own error types
            raise ConversionInputError(f"{file}: not a readable safetensors file ({type(exc).__name__}: {exc})") from exc
        with open(file, "rb") as fh:
            header_len = int.from_bytes(fh.read(8), "little")
        if file.stat().st_size < 8 + header_len + end:
            raise ConversionInputError(f"{file}: truncated ({file.stat().st_size} bytes, header promises {8 + header_len + end})")
    if weight_map is not None:
        stray = [k for k, f in weight_map.items() if k not in shapes or shapes[k][1].name != f]
        if stray:
            raise ConversionInputError(f"{index_file}: entries not found in the file they name: {_listed(stray)}")
    return shapes, files


def _nbytes(sl: Any) -> int:
    size = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1,
            "F8_E4M3": 1, "F8_E5M2": 1}.get(sl.get_dtype(), 0)
    n = 1
    for d in sl.get_shape():
        n *= d
    return n * size


def check_conversion(
    hf_path: str | os.PathLike[str], output: str | os.PathLike[str], layout: ParallelLayout, *, overwrite: bool = False
) -> ConversionPlan:
    """Validate everything a conversion needs, cheaply, before any heavy work.

    Args:
        hf_path: Hugging Face model folder.
        output: destination of the dist checkpoint.
        layout: parallel sizes; ``world_size`` must be the launched one.
        overwrite: allow an existing ``output`` to be replaced.

    Returns:
        The :class:`ConversionPlan`.

    Raises:
        ConversionInputError: see the module docstring.
    """
    hf_path, output = Path(hf_path), Path(output)
    cfg = read_config(hf_path)
    config, found, files = check_hf_weights(hf_path)
    try:
        layout.check_model(config, source=str(hf_path / "config.json"), names=CLI_NAMES)
    except ValueError as exc:
        hint = "" if layout.world > 1 else " (several processes: launch with `torchrun --nproc_per_node N`)"
        raise ConversionInputError(f"{exc}{hint}") from exc
    if output.exists() and not overwrite:
        raise ConversionInputError(f"{output}: exists (pass --overwrite to replace it)")
    if output.exists() and not output.is_dir():
        raise ConversionInputError(f"{output}: exists and is not a folder")
    n_bytes = sum(f.stat().st_size for f in files)
    return ConversionPlan(hf_path, cfg, layout, output, files, len(found), n_bytes)


def check_hf_weights(hf_path: str | os.PathLike[str]) -> tuple[Any, dict[str, tuple[tuple[int, ...], Path]], tuple[Path, ...]]:
    """Check that a Hugging Face folder's safetensors hold exactly the tensors its config implies.

    The one full check of a model folder's weights (the converter and the evaluation): every file
    readable and complete, no tensor missing or unexpected, every shape as ``config.json`` says.

    Returns:
        ``(transformers config, {name: (shape, file)}, safetensors files)``.

    Raises:
        ConversionInputError: unreadable or truncated files, missing / unexpected tensors, or
            shapes that disagree with ``config.json`` (all named).
    """
    hf_path = Path(hf_path)
    read_config(hf_path)
    config = hf_config_object(hf_path)
    expected = expected_hf_shapes(config)
    found, files = read_safetensors_shapes(hf_path)
    missing = sorted(k for k in expected if k not in found)
    unexpected = sorted(k for k in found if k not in expected)
    wrong = [f"{k} in {found[k][1].name}: {list(found[k][0])} (config.json implies {list(s)})"
             for k, s in expected.items() if k in found and found[k][0] != s]
    problems = []
    if missing:
        problems.append(f"tensors missing from the safetensors: {_listed(missing)}")
    if unexpected:
        problems.append(f"tensors config.json does not describe: {_listed(unexpected)}")
    if wrong:
        problems.append(f"shapes disagree with config.json: {_listed(wrong)}")
    if problems:
        raise ConversionInputError(f"{hf_path}: config and weights disagree: " + "; ".join(problems))
    return config, found, files
