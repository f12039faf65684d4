"""Generation engines for evaluation: transformers ``generate`` (CPU or one GPU) and vLLM (GPUs).

Both take already rendered prompt strings (``rlec.prompts.render``), tokenise them without adding
special tokens (the chat template already has them), and return one :class:`Generation` per
prompt. Which engine runs is decided once by :func:`make_engine`:

- ``"vllm"``: vLLM's offline ``LLM`` with tensor parallelism; per-request seeds, so a sample is
  reproducible whatever batch it lands in. GPU-only: it is imported only here, only when chosen.
- ``"hf"``: ``transformers`` ``generate``, batched with left padding. One seed per batch
  (``generate`` has no per-row generator), so sampled text depends on the batch composition.
- ``"auto"``: vLLM when it is importable and a CUDA GPU is present, else transformers.

The model's own ``generation_config`` sampling defaults (e.g. Qwen3's top_k = 20) are overridden:
exactly the settings in :class:`SamplingSettings` apply, and every record states them.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
from dataclasses import asdict, dataclass
from typing import Any, Protocol, Sequence


@dataclass(frozen=True)
class SamplingSettings:
    """Sampling settings recorded with every sample.

    Attributes:
        temperature: softmax temperature, >= 0; 0 means greedy decoding.
        top_p: nucleus-sampling mass in (0, 1].
        max_new_tokens: response length limit in tokens, >= 1.
        seed: base seed of the run (per-sample seeds derive from it).
    """

    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 2048
    seed: int = 0

    def __post_init__(self) -> None:
        if not self.temperature >= 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature!r}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p!r}")
        if int(self.max_new_tokens) < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens!r}")

    def to_dict(self) -> dict[str, Any]:
        """Plain dict for the records."""
        return asdict(self)


@dataclass(frozen=True)
class Generation:
    """One generated response.

    Attributes:
        text: decoded response, special tokens removed.
        prompt_tokens: prompt length in tokens.
        response_tokens: generated tokens, the stop token included.
        finish_reason: "stop" (end-of-sequence token) or "length" (hit ``max_new_tokens``).
        sample_seed: the seed the sampler used for this response.
    """

    text: str
    prompt_tokens: int
    response_tokens: int
    finish_reason: str
    sample_seed: int


class Engine(Protocol):
    """What the evaluator needs from an engine."""

    name: str
    version: str
    default_batch_size: int

    def generate(self, prompts: Sequence[str], seeds: Sequence[int]) -> list[Generation]:
        """One :class:`Generation` per prompt, in order; ``seeds`` are per-prompt seeds."""
        ...


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


class HFEngine:
    """transformers ``generate``: batched, left padding; on CUDA when present (bf16, spread over the
    visible GPUs) else CPU (fp32).

    Args:
        model_path: a Hugging Face model folder.
        tokenizer: the tokenizer used to render the prompts.
        sampling: the sampling settings.
        device: "cpu", "cuda" or None (CUDA when available).
    """

    name = "transformers"
    default_batch_size = 32

    def __init__(self, model_path: str, tokenizer: Any, sampling: SamplingSettings, device: str | None = None) -> None:
        import torch
        from transformers import AutoModelForCausalLM, GenerationConfig

        self.version = _version("transformers")
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        dtype = torch.bfloat16 if self.device == "cuda" else torch.float32
        if self.device == "cuda":  # spread a large model over the visible GPUs (accelerate)
            self.model = AutoModelForCausalLM.from_pretrained(model_path, dtype=dtype, device_map="auto").eval()
        else:
            self.model = AutoModelForCausalLM.from_pretrained(model_path, dtype=dtype).to(self.device).eval()
        self.tokenizer = tokenizer
        self.tokenizer.padding_side = "left"
        pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        eos = self.model.generation_config.eos_token_id
        eos_ids = set(eos if isinstance(eos, list) else [eos] if eos is not None else [])
        if tokenizer.eos_token_id is not None:
            eos_ids.add(tokenizer.eos_token_id)
        self.eos_ids = sorted(eos_ids)
        greedy = sampling.temperature == 0
        # Every sampling knob is set explicitly so the model's generation_config defaults do not leak in.
        self.generation_config = GenerationConfig(
            do_sample=not greedy,
            temperature=1.0 if greedy else float(sampling.temperature),
            top_p=1.0 if greedy else float(sampling.top_p),
            top_k=None if greedy else 0,  # 0 = off when sampling; None when greedy (transformers warns on any value)
            max_new_tokens=int(sampling.max_new_tokens),
            eos_token_id=self.eos_ids,
            pad_token_id=pad_id,
        )
        self._torch = torch

    def generate(self, prompts: Sequence[str], seeds: Sequence[int]) -> list[Generation]:
        """Generate for one batch; the whole batch is sampled under ``seeds[0]``."""
        torch = self._torch
        enc = self.tokenizer(list(prompts), return_tensors="pt", padding=True, add_special_tokens=False).to(self.model.device)
        torch.manual_seed(int(seeds[0]))
        with torch.inference_mode():
            out = self.model.generate(**enc, generation_config=self.generation_config)
        new = out[:, enc["input_ids"].shape[1] :].cpu()
        prompt_lens = enc["attention_mask"].sum(dim=1).tolist()
        is_eos = torch.isin(new, torch.tensor(self.eos_ids))
        results = []
        for row, plen in zip(range(new.shape[0]), prompt_lens):
            hits = is_eos[row].nonzero()
            n = int(hits[0, 0]) + 1 if len(hits) else new.shape[1]
            text = self.tokenizer.decode(new[row, :n], skip_special_tokens=True)
            results.append(Generation(text, int(plen), n, "stop" if len(hits) else "length", int(seeds[0])))
        return results


class VLLMEngine:
    """vLLM offline inference (GPU only) with tensor parallelism and per-request seeds.

    Args:
        model_path: a Hugging Face model folder (or a Megatron checkpoint exported to HF).
        tokenizer: the tokenizer used to render the prompts (prompts are passed as token ids).
        sampling: the sampling settings.
        tensor_parallel_size: GPUs per model replica.
        gpu_memory_utilization: fraction of GPU memory vLLM may take.
        max_model_len: context length (prompt + response); None = the model's.

    Raises:
        ImportError: vLLM is not installed.
    """

    name = "vllm"
    default_batch_size = 1024

    def __init__(
        self,
        model_path: str,
        tokenizer: Any,
        sampling: SamplingSettings,
        tensor_parallel_size: int = 1,
        gpu_memory_utilization: float = 0.9,
        max_model_len: int | None = None,
    ) -> None:
        from vllm import LLM, SamplingParams

        self.version = _version("vllm")
        self.tokenizer = tokenizer
        self.sampling = sampling
        self._params = SamplingParams
        # generation_config="vllm": ignore the model's sampling defaults, use exactly ours.
        self.llm = LLM(
            model=model_path,
            tensor_parallel_size=tensor_parallel_size,
            gpu_memory_utilization=gpu_memory_utilization,
            max_model_len=max_model_len,
            seed=sampling.seed,
            generation_config="vllm",
        )

    def generate(self, prompts: Sequence[str], seeds: Sequence[int]) -> list[Generation]:
        """Generate for one batch; each prompt is sampled under its own seed."""
        s = self.sampling
        params = [
            self._params(temperature=float(s.temperature), top_p=float(s.top_p), max_tokens=int(s.max_new_tokens), seed=int(seed))
            for seed in seeds
        ]
        inputs = [{"prompt_token_ids": self.tokenizer(p, add_special_tokens=False)["input_ids"]} for p in prompts]
        outputs = self.llm.generate(inputs, params, use_tqdm=False)
        results = []
        for out, seed in zip(outputs, seeds):
            o = out.outputs[0]
            reason = "length" if o.finish_reason == "length" else "stop"
            results.append(Generation(o.text, len(out.prompt_token_ids), len(o.token_ids), reason, int(seed)))
        return results


def vllm_available() -> bool:
    """vLLM is importable and a CUDA GPU is present."""
    if importlib.util.find_spec("vllm") is None:
        return False
    import torch

    return torch.cuda.is_available()


def make_engine(kind: str, model_path: str, tokenizer: Any, sampling: SamplingSettings, **vllm_kwargs: Any) -> Engine:
    """Build the engine ``kind`` ("auto", "hf" or "vllm").

    Args:
        vllm_kwargs: ``tensor_parallel_size``, ``gpu_memory_utilization``, ``max_model_len``
            (used by vLLM only).

    Raises:
        ValueError: unknown kind.
        RuntimeError: "vllm" requested without vLLM or without a GPU.
    """
    if kind not in ("auto", "hf", "vllm"):
        raise ValueError(f"engine must be 'auto', 'hf' or 'vllm', got {kind!r}")
    if kind == "vllm" and not vllm_available():
        raise RuntimeError("--engine vllm needs vLLM installed (requirements-gpu.txt) and a CUDA GPU; use --engine hf on CPU")
    if kind == "vllm" or (kind == "auto" and vllm_available()):
        return VLLMEngine(model_path, tokenizer, sampling, **vllm_kwargs)
    return HFEngine(model_path, tokenizer, sampling)
