"""The shape of a Qwen3 / Qwen3-MoE decoder: what sets parameter counts, memory and layout limits.

Read from a Hugging Face ``config.json`` (a dict, a ``transformers`` config object, or
``megatron_configs/model/<name>.json`` when the model folder is not on this machine). Pure
arithmetic; used by the layout rules (:mod:`rlec.layout`), the memory model
(:mod:`rlec.rules.memory`) and the cost model (:mod:`rlec.cluster.cost_model`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

__all__ = ["ModelShape"]


@dataclass(frozen=True)
class ModelShape:
    """The shape of a Qwen3 (dense) or Qwen3-MoE decoder, as in its Hugging Face ``config.json``."""

    vocab_size: int
    hidden_size: int
    num_layers: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    num_experts: int = 0
    experts_per_token: int = 0
    moe_intermediate_size: int = 0
    moe_layers: int = 0
    tie_word_embeddings: bool = False
    qk_norm: bool = True
    model_type: str = "qwen3_moe"

    @classmethod
    def from_hf_config(cls, cfg: Mapping[str, Any], source: str = "config.json") -> "ModelShape":
        """Read a Hugging Face ``config.json`` dict (keys starting with ``_`` are ignored).

        Raises:
            ValueError: a required key is missing or not a positive integer (names ``source``).
        """

        def need(key: str) -> int:
            value = cfg.get(key)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"{source}: {key!r} must be a positive integer, got {value!r}")
            return value

        hidden, heads, layers = need("hidden_size"), need("num_attention_heads"), need("num_hidden_layers")
        # transformers 5 saves Qwen3-MoE's expert count as num_local_experts (hub files: num_experts)
        experts = int(cfg.get("num_experts") or cfg.get("num_local_experts") or 0)
        model_type = str(cfg.get("model_type", ""))
        if model_type and not model_type.endswith("_moe"):
            experts = 0  # a dense model type (qwen3) ignores stray expert keys, as transformers does
        moe_layers = 0
        if experts:
            dense_only = set(cfg.get("mlp_only_layers") or [])
            step = int(cfg.get("decoder_sparse_step") or 1)
            moe_layers = sum(1 for i in range(layers) if i not in dense_only and (i + 1) % step == 0)
        return cls(
            vocab_size=need("vocab_size"),
            hidden_size=hidden,
            num_layers=layers,
            num_attention_heads=heads,
            num_kv_heads=int(cfg.get("num_key_value_heads") or heads),
            head_dim=int(cfg.get("head_dim") or hidden // heads),
            intermediate_size=need("intermediate_size"),
            num_experts=experts,
            experts_per_token=int(cfg.get("num_experts_per_tok") or 0) if experts else 0,
            moe_intermediate_size=int(cfg.get("moe_intermediate_size") or 0) if experts else 0,
            moe_layers=moe_layers,
            tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
            qk_norm=model_type.startswith("qwen3"),
            model_type=model_type,
        )

    @classmethod
    def of(cls, model: Any, source: str = "config.json") -> "ModelShape":
        """A :class:`ModelShape` from a shape, a ``config.json`` dict or a ``transformers`` config.

        Raises:
            ValueError: a required key is missing or not a positive integer (names ``source``).
        """
        if isinstance(model, cls):
            return model
        if isinstance(model, Mapping):
            return cls.from_hf_config(model, source)
        as_dict = model.to_dict() if hasattr(model, "to_dict") else vars(model)
        return cls.from_hf_config(as_dict, source)

    @property
    def query_width(self) -> int:
        """Query projection width, ``num_attention_heads * head_dim``."""
        return self.num_attention_heads * self.head_dim

    @property
    def attention_params(self) -> int:
        """Q, K, V, O weights of one layer (split by tensor parallel)."""
        q, kv = self.num_attention_heads * self.head_dim, self.num_kv_heads * self.head_dim
        return 2 * self.hidden_size * q + 2 * self.hidden_size * kv

    @property
    def replicated_layer_params(self) -> int:
        """Norms (input, post-attention, QK) and the router of one layer (not split by TP)."""
        norms = 2 * self.hidden_size + (2 * self.head_dim if self.qk_norm else 0)
        return norms + (self.hidden_size * self.num_experts if self.num_experts else 0)

    @property
    def expert_params(self) -> int:
        """One expert's gate, up and down projections."""
        return 3 * self.hidden_size * self.moe_intermediate_size

    @property
    def dense_mlp_params(self) -> int:
        """One dense (non-MoE) layer's gate, up and down projections."""
        return 3 * self.hidden_size * self.intermediate_size

    @property
    def embedding_params(self) -> int:
        """Input embedding (the output layer has as many unless tied)."""
        return self.vocab_size * self.hidden_size

    def total_params(self) -> int:
        """All parameters (Qwen3-30B-A3B: about 30.5e9)."""
        dense_layers = self.num_layers - self.moe_layers
        per_layer = self.attention_params + self.replicated_layer_params
        return (
            self.num_layers * per_layer
            + self.moe_layers * self.num_experts * self.expert_params
            + dense_layers * self.dense_mlp_params
            + self.embedding_params * (1 if self.tie_word_embeddings else 2)
            + self.hidden_size
        )

    def active_params(self) -> int:
        """Parameters used per token: top-k experts only (Qwen3-30B-A3B: about 3.3e9)."""
        inactive = self.moe_layers * (self.num_experts - self.experts_per_token) * self.expert_params
        return self.total_params() - inactive
