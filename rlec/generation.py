"""The one generation engine of rlec: the CPU rollout (``rlec_hf``) and evaluation, on CPU or GPU.

Two backends behind one interface, chosen by :func:`make_engine`:

- ``"hf"``: ``transformers`` ``generate``, batched with left padding, on CUDA when present (bf16)
  else CPU (fp32). Sampling is exact: :class:`RaceSampler` draws each token from
  ``softmax(logits / T)`` (after top-k / top-p) itself by an exponential race, because
  ``torch.multinomial`` was the CPU bottleneck (measured below). ``generate`` (evaluation) takes one
  seed per call, so its sampled text depends on the batch composition; ``sample(row_seeds=...)``
  (verl's CPU rollout) gives each row its own generator, so a row's tokens do not. The rollouts
  use this backend on a live model whose weights the policy refreshes after every update.
- ``"vllm"``: vLLM's offline ``LLM`` with tensor parallelism and per-request seeds (a sample is
  reproducible whatever batch it lands in). GPU-only: imported only here, only when chosen.
- ``"auto"``: vLLM when it is importable and a CUDA GPU is present, else transformers.

Both stop at the same tokens (:func:`stop_token_ids`: the model's end-of-sequence ids,
``<|im_end|>`` and ``<|endoftext|>``) and take already rendered prompts (``rlec.prompts.render``)
tokenised without special tokens (the chat template has them). The model's own
``generation_config`` sampling defaults (e.g. Qwen3's top_k = 20) never apply: exactly the
settings given here do, and every evaluation record states them.

Tensors of :class:`SampledBatch` follow verl's DataProto conventions: ``prompts`` left-padded
(B, P), ``responses`` right-padded (B, R), ``response_mask`` (B, R) from verl's
``get_response_mask`` (each response up to and including its stop token).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import math
import time
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
        top_k: sample among the k most likely tokens; -1 = all (verl's ``rollout.top_k``
            convention; the demo's rollout uses 5).
    """

    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 2048
    seed: int = 0
    top_k: int = -1

    def __post_init__(self) -> None:
        if not self.temperature >= 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature!r}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p!r}")
        if int(self.max_new_tokens) < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens!r}")
        if int(self.top_k) < -1 or int(self.top_k) == 0:
            raise ValueError(f"top_k must be -1 (off) or >= 1, got {self.top_k!r}")

    def to_dict(self) -> dict[str, Any]:
        """Plain dict for the records (``top_k`` only when set, so records written before it existed still resume)."""
        out = asdict(self)
        if out["top_k"] == -1:
            del out["top_k"]
        return out


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


def stop_token_ids(tokenizer: Any, model: Any = None) -> list[int]:
    """Token ids that end a response, for every engine.

    The union of the model's ``generation_config.eos_token_id`` and ``config.eos_token_id`` (when
    a model is given), the tokenizer's ``eos_token_id``, ``<|im_end|>`` and ``<|endoftext|>``
    (Qwen3's end of turn and end of text).

    Returns:
        Sorted, de-duplicated ids.
    """
    ids: set[int] = set()
    for source in (getattr(model, "generation_config", None), getattr(model, "config", None), tokenizer):
        eos = getattr(source, "eos_token_id", None)
        ids.update(eos if isinstance(eos, (list, tuple)) else ([eos] if eos is not None else []))
    for token in ("<|im_end|>", "<|endoftext|>"):
        tid = tokenizer.convert_tokens_to_ids(token)
        if isinstance(tid, int) and tid != tokenizer.unk_token_id:
            ids.add(tid)
    return sorted(int(i) for i in ids)


class RaceSampler:
    """A transformers logits processor that draws the next token itself by an exponential race.

    ``generate`` then runs greedy (``do_sample=False``) over the returned scores: 0 at the drawn
    token, -inf elsewhere. The draw is an exact sample from ``softmax(scores / temperature)``
    (after top-k filtering when ``top_k > 0``, then top-p when ``top_p < 1``, as transformers
    orders its warpers): token ``argmax_i p_i / E_i`` with ``E_i ~ Exp(1)`` wins with probability
    ``p_i`` (the Gumbel-max trick in its exponential form, vLLM's own sampler). Two levels keep it
    cheap: the V tokens split into blocks of ``K = ceil(sqrt(V))``; a race over the blocks' masses
    picks a block, a race inside it the token (``P(block) * P(token | block) = p_i``), so a row
    draws ``ceil(V / K) + K`` numbers a token (1,173 for Qwen3's 151,936), not V: 18 ms a draw over
    a 32 x 151,936 batch on 2 cores, against 23 ms for an inverse-CDF draw and 155-170 ms for
    ``torch.multinomial``.

    Why a race and not an inverse CDF: a row's logits change in their last bits with the batch
    shape it is computed in (measured: up to 6e-7 between a prompt alone and beside others). An
    inverse-CDF draw over a near-uniform distribution (a random-init model: 1.8e-5 at most per
    token) then lands on a neighbouring token about once in 4,000 draws, so a resumed run, whose
    rollout batches differ, drew other responses (CI of 2026-12-02); a race changes its winner only
    when its two best ratios are within that noise: over 4,096 such rows perturbed by 1e-5, 0-1
    flips against 4-7 for the inverse CDF; by 1e-4, 0 against 42-43.

    Called by ``generate`` with ``input_ids`` (B, L) and ``scores`` (B, V) in any float dtype;
    returns (B, V) float32 scores, 0 at the drawn token and -inf elsewhere. The draws use torch's
    global generator (seeded by the engine), or with ``generators`` one ``torch.Generator`` per row
    (per-request seeds: a row's tokens do not depend on the batch it is generated in).

    Args:
        temperature: > 0; applied before top-k and top-p, as transformers does.
        top_p: nucleus mass in (0, 1]; < 1 applies transformers' ``TopPLogitsWarper`` first.
        top_k: keep the k most likely tokens (transformers' ``TopKLogitsWarper``); -1 or 0 = off
            (verl's ``rollout.top_k`` convention).
        generators: one ``torch.Generator`` per row, or None for torch's global generator.

    Raises:
        ValueError: ``temperature <= 0``, ``top_p`` outside (0, 1] or ``top_k < -1``; at a call,
            a number of generators other than the batch's rows.
    """

    def __init__(self, temperature: float = 1.0, top_p: float = 1.0, top_k: int = -1, generators: Sequence[Any] | None = None) -> None:
        from transformers import TopKLogitsWarper, TopPLogitsWarper

        if not temperature > 0:
            raise ValueError(f"temperature must be > 0 for sampling, got {temperature}")
        if not 0 < top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {top_p}")
        if int(top_k) < -1:
            raise ValueError(f"top_k must be -1 (off), 0 (off) or >= 1, got {top_k}")
        self.temperature = float(temperature)
        self.top_k = TopKLogitsWarper(int(top_k)) if int(top_k) > 0 else None
        self.top_p = TopPLogitsWarper(top_p) if top_p < 1.0 else None
        self.generators = list(generators) if generators is not None else None

    def draws(self, rows: int, count: int) -> Any:
        """(rows, count) float32 Exp(1) numbers: row r from ``generators[r]``, or all from the global generator."""
        import torch

        if self.generators is None:
            return torch.empty(rows, count).exponential_()
        if len(self.generators) != rows:
            raise ValueError(f"{len(self.generators)} row generators for {rows} rows")
        # one generator per row: a row's draws do not depend on the rows beside it
        return torch.stack([torch.empty(count).exponential_(generator=g) for g in self.generators])

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        import torch

        scores = scores.float() / self.temperature
        if self.top_k is not None:
            scores = self.top_k(input_ids, scores)
        if self.top_p is not None:
            scores = self.top_p(input_ids, scores)
        rows, vocab = scores.shape
        width = math.isqrt(vocab - 1) + 1  # ceil(sqrt(V))
        blocks = -(-vocab // width)
        probs = torch.nn.functional.pad(torch.softmax(scores, dim=-1), (0, blocks * width - vocab)).view(rows, blocks, width)
        race = self.draws(rows, blocks + width).to(scores.device)
        # a ratio of a zero-mass block or token is -1: it never beats one with mass (E may be 0: ratio inf)
        mass = probs.sum(dim=-1)
        block = torch.where(mass > 0, mass / race[:, :blocks], -1.0).argmax(dim=-1)
        inside = probs[torch.arange(rows, device=scores.device), block]
        token = block * width + torch.where(inside > 0, inside / race[:, blocks:], -1.0).argmax(dim=-1)
        out = torch.full_like(scores, float("-inf"))
        return out.scatter_(1, token.unsqueeze(1), 0.0)


@dataclass
class SampledBatch:
    """Responses to B = prompts x n rows, the n samples of a prompt on consecutive rows.

    Attributes:
        prompts: (B, P) int64, left-padded prompt ids.
        prompt_mask: (B, P) int64, 1 on prompt tokens.
        responses: (B, R) int64, right-padded response ids (R = max_new_tokens; padding after the
            stop token).
        response_mask: (B, R) int64, 1 on response tokens up to and including the stop token.
        texts: B decoded responses (special tokens removed).
        finish_reasons: B values, "stop" (a stop token ended it) or "length".
        seconds: wall time of generation.
    """

    prompts: Any
    prompt_mask: Any
    responses: Any
    response_mask: Any
    texts: list[str]
    finish_reasons: list[str]
    seconds: float

    @property
    def response_tokens(self) -> int:
        """Generated tokens that count (sum of the response mask)."""
        return int(self.response_mask.sum().item())


class HFEngine:
    """transformers ``generate`` on a model folder or a live model (see the module docstring).

    Args:
        model: a Hugging Face model folder, or an already loaded causal LM (the CPU rollout's
            rollout model, whose weights the weight sync replaces in place).
        tokenizer: the tokenizer used to render the prompts.
        sampling: the settings :meth:`generate` uses (evaluation); :meth:`sample` takes its own.
        device: "cpu", "cuda" or None (CUDA when available); ignored for a live model.
    """

    name = "transformers"
    default_batch_size = 32

    def __init__(self, model: Any, tokenizer: Any, sampling: SamplingSettings | None = None, device: str | None = None) -> None:
        import torch

        self.version = _version("transformers")
        if isinstance(model, torch.nn.Module):
            self.model = model.eval()
        else:
            from transformers import AutoModelForCausalLM

            device = device or ("cuda" if torch.cuda.is_available() else "cpu")
            dtype = torch.bfloat16 if device == "cuda" else torch.float32
            if device == "cuda":  # spread a large model over the visible GPUs (accelerate)
                self.model = AutoModelForCausalLM.from_pretrained(model, dtype=dtype, device_map="auto").eval()
            else:
                self.model = AutoModelForCausalLM.from_pretrained(model, dtype=dtype).to(device).eval()
        self.device = str(self.model.device.type)  # "cpu" or "cuda"
        self.tokenizer = tokenizer
        self.sampling = sampling or SamplingSettings()
        self.stop_ids = stop_token_ids(tokenizer, self.model)
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.stop_ids[0]
        self._torch = torch

    def encode(self, prompts: Sequence[str]) -> list[list[int]]:
        """Token ids of rendered prompts (no special tokens added: the chat template has them)."""
        return [list(ids) for ids in self.tokenizer(list(prompts), add_special_tokens=False)["input_ids"]]

    def sample(
        self,
        prompt_ids: Sequence[Sequence[int]],
        *,
        n: int = 1,
        max_new_tokens: int,
        temperature: float = 1.0,
        top_p: float = 1.0,
        seed: int = 0,
        top_k: int = -1,
        row_seeds: Sequence[int] | None = None,
    ) -> SampledBatch:
        """Generate ``n`` responses for each prompt (rows ``i * n ... i * n + n - 1`` for prompt i).

        Args:
            prompt_ids: token ids of each rendered prompt (:meth:`encode`).
            n: responses per prompt, >= 1.
            max_new_tokens: response length limit, >= 1.
            temperature: > 0 samples exactly from softmax(logits / T); 0 decodes greedily.
            top_p: nucleus mass in (0, 1].
            top_k: sample among the k most likely tokens; -1 = all (:class:`RaceSampler`).
            seed: seeds torch's generator right before generating.
            row_seeds: one seed per row (``len(prompt_ids) * n``): each row samples from its own
                generator, so its tokens do not depend on the other rows (``seed`` is then unused).

        Returns:
            A :class:`SampledBatch` with ``len(prompt_ids) * n`` rows.

        Raises:
            ValueError: n < 1, max_new_tokens < 1, temperature < 0, top_p outside (0, 1], or no prompts.
        """
        torch = self._torch
        from transformers import GenerationConfig, LogitsProcessorList
        from verl.utils.torch_functional import get_response_mask

        if n < 1 or max_new_tokens < 1 or not temperature >= 0 or not 0 < top_p <= 1 or not prompt_ids:
            raise ValueError(f"need prompts, n>=1, max_new_tokens>=1, temperature>=0, top_p in (0, 1]; got "
                             f"{len(prompt_ids)} prompts, n={n}, max_new_tokens={max_new_tokens}, "
                             f"temperature={temperature}, top_p={top_p}")
        width = max(len(ids) for ids in prompt_ids)
        prompts = torch.full((len(prompt_ids), width), self.pad_id, dtype=torch.long)
        prompt_mask = torch.zeros((len(prompt_ids), width), dtype=torch.long)
        for i, ids in enumerate(prompt_ids):
            if ids:
                prompts[i, width - len(ids):] = torch.tensor(list(ids), dtype=torch.long)
                prompt_mask[i, width - len(ids):] = 1
        prompts, prompt_mask = prompts.repeat_interleave(n, dim=0), prompt_mask.repeat_interleave(n, dim=0)
        device = self.model.device
        # Every field that could change the distribution is set: transformers fills fields left None
        # from the model's generation_config, and sampling warpers do nothing without do_sample.
        config = GenerationConfig(
            do_sample=False, max_new_tokens=int(max_new_tokens), pad_token_id=self.pad_id, eos_token_id=self.stop_ids,
            repetition_penalty=1.0, no_repeat_ngram_size=0, top_k=None, top_p=None, temperature=None,
        )  # fmt: skip
        generators = None
        if row_seeds is not None:
            if len(row_seeds) != prompts.shape[0]:
                raise ValueError(f"row_seeds: {len(row_seeds)} seeds for {prompts.shape[0]} rows (prompts x n)")
            generators = [torch.Generator().manual_seed(int(s) % 2**63) for s in row_seeds]
        processors = LogitsProcessorList([RaceSampler(temperature, top_p, top_k, generators)] if temperature > 0 else [])
        torch.manual_seed(int(seed))
        start = time.perf_counter()
        with torch.inference_mode():
            out = self.model.generate(input_ids=prompts.to(device), attention_mask=prompt_mask.to(device),
                                      generation_config=config, logits_processor=processors)
        seconds = time.perf_counter() - start
        responses = out[:, width:].cpu()
        if responses.shape[1] < max_new_tokens:  # every row stopped early: pad to a fixed width
            fill = torch.full((responses.shape[0], max_new_tokens - responses.shape[1]), self.pad_id, dtype=responses.dtype)
            responses = torch.cat([responses, fill], dim=1)
        response_mask = get_response_mask(responses, eos_token=self.stop_ids)
        finished = torch.isin(responses, torch.tensor(self.stop_ids)) & response_mask.bool()
        finish = ["stop" if row.any() else "length" for row in finished]
        responses = torch.where(response_mask.bool(), responses, torch.full_like(responses, self.pad_id))
        texts = self.tokenizer.batch_decode(responses, skip_special_tokens=True)
        return SampledBatch(prompts, prompt_mask, responses, response_mask, texts, finish, seconds)

    def generate(self, prompts: Sequence[str], seeds: Sequence[int]) -> list[Generation]:
        """Evaluation: one response per rendered prompt with :attr:`sampling`; the batch is sampled under ``seeds[0]``."""
        s = self.sampling
        batch = self.sample(self.encode(prompts), n=1, max_new_tokens=int(s.max_new_tokens), temperature=float(s.temperature),
                            top_p=float(s.top_p), top_k=int(s.top_k), seed=int(seeds[0]))
        prompt_lens = batch.prompt_mask.sum(dim=1).tolist()
        lengths = batch.response_mask.sum(dim=1).tolist()
        return [Generation(text, int(plen), int(length), reason, int(seeds[0]))
                for text, plen, length, reason in zip(batch.texts, prompt_lens, lengths, batch.finish_reasons)]


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
        self.stop_ids = stop_token_ids(tokenizer)
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
            self._params(temperature=float(s.temperature), top_p=float(s.top_p), max_tokens=int(s.max_new_tokens), seed=int(seed),
                         stop_token_ids=self.stop_ids, **({"top_k": int(s.top_k)} if s.top_k > 0 else {}))
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
