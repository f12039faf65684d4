"""Warm start of the local RLEC demo: a short supervised pass that makes a tiny Qwen3 half-master addition.

RLEC needs a starting model that is right on some problems and wrong on others. This module
builds one: a tiny Qwen3 (the real architecture and the real 151,936-token vocabulary of the
bundled Qwen3 tokenizer) trained for a few hundred steps on procedurally generated additions
("What is 482 + 37?"), prompted with rlec's one template (:func:`rlec.prompts.build_messages`)
at targets drawn as in the training data (10% binary, else p uniform on 0.01 ... 0.90). The
difficulty is the operand digit count; a short pass masters small sums and only partly masters
longer ones. A share ``idk_rate`` of the targets is ``\\boxed{I don't know}``, drawn by a coin
that ignores the target and the problem, so any link between target, difficulty and abstention
is learned later by RLEC, not copied from this data.

Why it is cheap. Prompts use a few dozen distinct tokens (the template, digits, the target), and
answers a few more. Training runs on a *compact* model whose vocabulary is exactly those tokens
(:func:`compact_vocabulary`). The full model it stands for has the same body and zero
embedding / output rows for every other token, so each of those ~151,850 tokens has logit 0 and
the full softmax's normaliser is ``logsumexp([compact logits, log(V - |C|)])``: the loss below is
the exact full-vocabulary cross-entropy of the full model (a test checks it against the expanded
model), at 1/1,800th of the output-layer cost. :func:`expand` writes that full model as an HF
Qwen3 folder; RLEC then trains all 151,936 rows.

Generator: the problems are those of the ``addition`` environment
(:mod:`rlec.environments.addition`: its phrasing :data:`QUESTION` and operand draw): a d-digit sum here is that environment's difficulty d - 1, so RLVE's experiment
(``python -m rlec.experiments rlve``) starts from this warm start on prompts in the phrasing it learnt.

CLI: ``python -m rlec.demo.warm_start --out outputs/demo/warm_start`` (``--help``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import random
import sys
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

from rlec.data.mix import draw_targets
from rlec.environments.addition import QUESTION, draw_operands
from rlec.grading.extract import CANONICAL_ABSTAIN
from rlec.prompts import build_messages, math_task, render

FULL_VOCAB_SIZE = 151_936  # Qwen3's embedding rows (the tokenizer has 151,669 tokens incl. added ones)
MANIFEST = "warm_start.json"
COMPACT_FILE = "compact_model.safetensors"  # the compact model itself (what the model folder is written from)
# where a built folder keeps the compact weights and their manifest: a subfolder, so the model folder's own
# *.safetensors are the model's only (verl's checks and mbridge read every *.safetensors at its top)
COMPACT_DIR = "compact"
# Bump when the training code changes what a setting produces (response forms, seeding, schedules):
# cached and shipped warm starts of older code then no longer match any configuration.
RECIPE_VERSION = 1
# The shipped warm start of the default settings: compact weights + manifest (python -m rlec.demo.warm_start --ship)
SHIPPED_DIR = Path(__file__).with_name("assets")
IDK_RESPONSE = f"\\boxed{{{CANONICAL_ABSTAIN}}}"


@dataclass(frozen=True)
class AdditionProblem:
    """One addition problem.

    Attributes:
        question: e.g. ``"What is 482 + 37?"`` (the task of :func:`rlec.prompts.math_task`).
        answer: the exact sum as a decimal string.
        digits: operand digit count (the difficulty).
    """

    question: str
    answer: str
    digits: int


def addition_problem(rng: random.Random, digits: int) -> AdditionProblem:
    """Two uniformly drawn ``digits``-digit operands (0-9 for one digit) and their sum.

    The draw and the phrasing are the ``addition`` environment's (:func:`rlec.environments.addition.draw_operands`).

    Raises:
        ValueError: ``digits < 1``.
    """
    a, b = draw_operands(rng, digits)
    return AdditionProblem(QUESTION.format(a=a, b=b), str(a + b), digits)


HELD_OUT_PERCENT = 10
ALWAYS_SEEN_DIGITS = 1  # one-digit sums: too few (100) to hold any out; every one may be trained on


def is_held_out(problem: AdditionProblem) -> bool:
    """True for the ~10% of multi-digit problems reserved for evaluation (a hash of the question).

    The warm start and the RLEC training rows skip them (``rlec.demo.data``).
    """
    if problem.digits <= ALWAYS_SEEN_DIGITS:
        return False
    return hashlib.sha256(problem.question.encode()).digest()[0] * 100 // 256 < HELD_OUT_PERCENT


def training_problem(rng: random.Random, digit_counts: Sequence[int]) -> AdditionProblem:
    """A problem that is not held out, digit count uniform over ``digit_counts``."""
    while True:
        problem = addition_problem(rng, rng.choice(list(digit_counts)))
        if not is_held_out(problem):
            return problem


@dataclass(frozen=True)
class WarmStartConfig:
    """Every setting of the warm start (the cache key is a hash of all of them).

    Data: operand digit counts drawn uniformly from ``digits``; targets: ``binary_fraction`` binary
    prompts, else p uniform on the 0.01 grid of [``target_min``, ``target_max``] (as
    ``rlec.data.prepare``); ``idk_rate`` of the answers are ``I don't know`` (independent coin).
    ``lr_schedule="constant"`` keeps the rate after the warm-up, so a run of k steps is exactly
    the first k steps of a longer one (a snapshot can be chosen by its accuracy and rebuilt).
    Model: a dense Qwen3 (``model_type="qwen3"``) or Qwen3-MoE (``"qwen3_moe"``) of the given
    width. Optimiser: AdamW, linear warm-up then cosine decay to 0, gradient clipping at 1. Loss:
    :func:`sft_loss` (``prompt_loss_weight`` > 0 adds language modelling of the prompt).

    Stages. The base pass (the settings above; ``restate_target`` its response form) is followed by
    the ``finetune`` stages, each a short supervised pass continuing the weights: ``steps`` at
    ``lr`` (AdamW, cosine decay to 0, no warm-up), problems with the stage's digit counts (a count
    listed twice is drawn twice as often), the stage's response form (:func:`response_text`) and
    torch threads. The default is the demo's warm start: 1,500 base steps on 1-3 digits, then
    restating the target (answers first, then abstentions in words) and more 2-digit sums, 3,500
    steps in all. Why: RLEC can only tie abstention to the target on questions whose accuracy lies
    between the targets (2-digit sums here, sampled accuracy ~0.65), and a 2-layer model carries
    the target only weakly from the prompt to the answer (probe R^2 0.37-0.48) unless it restates
    it (tools/demo/FINDINGS.md). No stage links abstention to target or problem: the
    ``I don't know`` coin (``idk_rate``) is drawn independently in every stage.
    """

    seed: int = 0
    digits: tuple[int, ...] = (1, 2, 3)
    idk_rate: float = 0.25
    binary_fraction: float = 0.1
    target_min: float = 0.01
    target_max: float = 0.90
    steps: int = 1500
    batch_size: int = 64
    lr: float = 3e-3
    warmup_steps: int = 20
    weight_decay: float = 0.0
    prompt_loss_weight: float = 0.0
    lr_schedule: str = "cosine"
    restate_target: str = "none"
    # fine-tuning stages after the base pass: (steps, digit counts, lr, restate mode, torch threads)
    finetune: tuple[tuple[int, str, float, str, int], ...] = (
        (300, "1,2,3", 1e-3, "answers", 2), (600, "1,2", 1e-3, "answers", 2),
        (300, "1,2,3", 1e-3, "all", 2), (800, "1,2,2", 1e-3, "all", 1))
    # the many-answer task of Pass@k's experiment (rlec.environments.pair_sum): this share of the examples, in every
    # stage, are "Which two numbers from 0 to m add up to n?" with m of pair_sum_digits digits, answered by one right
    # pair drawn uniformly (so the data shows every right answer); 0 = additions only (the demo's warm start)
    pair_sum_share: float = 0.0
    pair_sum_digits: tuple[int, ...] = (1, 2)
    model_type: str = "qwen3"
    hidden_size: int = 64
    intermediate_size: int = 256
    num_layers: int = 2
    num_heads: int = 4
    num_kv_heads: int = 2
    num_experts: int = 4
    num_experts_per_tok: int = 2
    moe_intermediate_size: int = 128
    threads: int = 1

    def __post_init__(self) -> None:
        for stage in self.finetune:
            if len(stage) != 5 or stage[0] < 1 or stage[2] <= 0 or stage[3] not in RESTATE_MODES or stage[4] < 1:
                raise ValueError(f"finetune stage {stage!r}: expected (steps >= 1, 'digit,counts', lr > 0, "
                                 f"one of {RESTATE_MODES}, threads >= 1)")
            _digit_counts(stage[1])
        if self.restate_target not in RESTATE_MODES:
            raise ValueError(f"restate_target must be one of {RESTATE_MODES}, got {self.restate_target!r}")
        if not self.digits or min(self.digits) < 1:
            raise ValueError(f"digits must be a non-empty list of counts >= 1, got {self.digits}")
        if not 0.0 <= self.idk_rate < 1.0 or not 0.0 <= self.binary_fraction <= 1.0:
            raise ValueError(f"idk_rate must be in [0, 1) and binary_fraction in [0, 1], got {self.idk_rate}, {self.binary_fraction}")
        if not 0.0 < self.target_min <= self.target_max < 1.0:
            raise ValueError(f"targets must satisfy 0 < target_min <= target_max < 1, got {self.target_min}, {self.target_max}")
        if min(self.steps, self.batch_size, self.hidden_size, self.num_layers, self.num_heads) < 1 or self.lr <= 0:
            raise ValueError("steps, batch_size, hidden_size, num_layers, num_heads must be >= 1 and lr > 0")
        if self.hidden_size % self.num_heads or self.num_heads % self.num_kv_heads:
            raise ValueError(f"hidden_size {self.hidden_size} must divide into num_heads {self.num_heads}, "
                             f"and num_heads into num_kv_heads {self.num_kv_heads}")
        if self.lr_schedule not in ("cosine", "constant"):
            raise ValueError(f"lr_schedule must be 'cosine' or 'constant', got {self.lr_schedule!r}")
        if self.model_type not in ("qwen3", "qwen3_moe"):
            raise ValueError(f"model_type must be 'qwen3' or 'qwen3_moe', got {self.model_type!r}")
        if not 0.0 <= self.pair_sum_share < 1.0 or not self.pair_sum_digits or min(self.pair_sum_digits) < 1:
            raise ValueError(f"pair_sum_share must be in [0, 1) and pair_sum_digits a non-empty list of counts >= 1, "
                             f"got {self.pair_sum_share}, {self.pair_sum_digits}")

    def key(self) -> str:
        """A short hash of every setting and :data:`RECIPE_VERSION` (what the cache and the shipped copy compare).

        Settings added after the shipped warm start (:data:`_ADDED_SETTINGS`) enter the hash only when they differ
        from their defaults, so the demo's key (and its shipped copy) stays what it was.
        """
        defaults = WarmStartConfig.__dataclass_fields__
        payload = {"recipe": RECIPE_VERSION, **{k: v for k, v in asdict(self).items()
                                                if k not in _ADDED_SETTINGS or v != defaults[k].default}}
        return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]

    def hf_config(self, vocab_size: int, special_ids: dict[str, int] | None = None) -> dict[str, Any]:
        """The ``config.json`` dict of the model with ``vocab_size`` rows.

        ``special_ids``: ``bos_token_id`` / ``eos_token_id`` / ``pad_token_id`` of its tokenizer (Qwen3's for
        :data:`FULL_VOCAB_SIZE` rows; the training-time compact model has none).
        """
        cfg: dict[str, Any] = {
            "vocab_size": vocab_size, "hidden_size": self.hidden_size, "intermediate_size": self.intermediate_size,
            "num_hidden_layers": self.num_layers, "num_attention_heads": self.num_heads,
            "num_key_value_heads": self.num_kv_heads, "head_dim": self.hidden_size // self.num_heads,
            "hidden_act": "silu", "max_position_embeddings": 4096, "rms_norm_eps": 1e-6, "rope_theta": 1_000_000.0,
            "tie_word_embeddings": False, "attention_bias": False, "attention_dropout": 0.0, "initializer_range": 0.02,
            "model_type": self.model_type,
        }  # fmt: skip
        if vocab_size == FULL_VOCAB_SIZE:  # Qwen3's special ids (the compact model has none of its own)
            cfg.update(bos_token_id=151643, eos_token_id=151645, pad_token_id=151643)
        cfg.update(special_ids or {})
        if self.model_type == "qwen3_moe":
            cfg.update(architectures=["Qwen3MoeForCausalLM"], num_experts=self.num_experts,
                       num_experts_per_tok=self.num_experts_per_tok, moe_intermediate_size=self.moe_intermediate_size,
                       norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[], router_aux_loss_coef=0.001,
                       output_router_logits=False)  # fmt: skip
        else:
            cfg["architectures"] = ["Qwen3ForCausalLM"]
        return cfg


_ADDED_SETTINGS = ("pair_sum_share", "pair_sum_digits")  # hashed only when not at their defaults (WarmStartConfig.key)


def pair_sum_problem(rng: random.Random, digits: int) -> AdditionProblem:
    """A ``pair_sum`` problem (:mod:`rlec.environments.pair_sum`) with numbers of up to ``digits`` digits, n drawn as
    that environment draws it, answered by one right ordered pair drawn uniformly (``"a + b"``)."""
    from rlec.environments.pair_sum import QUESTION as PAIR_QUESTION, answer_text

    x, y = draw_operands(rng, digits)
    n, m = x + y, 10**digits - 1
    a = rng.randint(max(0, n - m), min(n, m))
    return AdditionProblem(PAIR_QUESTION.format(m=m, n=n), answer_text(a, n - a), digits)


def draw_target(rng: random.Random, cfg: WarmStartConfig) -> float | None:
    """A target as in the training data: None (binary) with ``binary_fraction``, else p drawn by the training data's
    one draw (:func:`rlec.data.mix.draw_targets`: uniform on the 0.01 grid of [``target_min``, ``target_max``])."""
    if rng.random() < cfg.binary_fraction:
        return None
    return draw_targets(rng, cfg.target_min, cfg.target_max)


def sft_examples(rng: random.Random, cfg: WarmStartConfig, count: int) -> list[tuple[AdditionProblem, float | None, bool]]:
    """``count`` supervised examples ``(problem, target, abstain)``.

    The problem (not held out, digits uniform over ``cfg.digits``), the target
    (:func:`draw_target`) and the abstention coin (``idk_rate``) are three independent draws, so
    the share of ``I don't know`` targets is the same for every target and every problem.
    """
    out = []
    for _ in range(count):
        if cfg.pair_sum_share > 0 and rng.random() < cfg.pair_sum_share:  # no draw at 0: the demo's stream is unchanged
            problem = pair_sum_problem(rng, rng.choice(list(cfg.pair_sum_digits)))
        else:
            problem = training_problem(rng, cfg.digits)
        target = draw_target(rng, cfg)
        out.append((problem, target, rng.random() < cfg.idk_rate))
    return out


RESTATE_MODES = ("none", "answers", "all")


def response_text(problem: AdditionProblem, abstain: bool, target: float | None = None, restate: str = "none") -> str:
    """The supervised response: ``\\boxed{<sum>}`` or ``\\boxed{I don't know}``, restating the target or not.

    ``restate``: ``"none"``; ``"answers"``: a target prompt's response begins with the target as the
    prompt prints it (``"0.80 \\boxed{68}"``, ``"0.80 \\boxed{I don't know}"``); ``"all"``: the same, and
    an abstention is said in words before its box (``"0.80 I don't know \\boxed{I don't know}"``), so
    the answer-or-abstain choice is the first token after the target's digits. Binary prompts (no
    target) get no restatement.

    Raises:
        ValueError: an unknown ``restate`` mode.
    """
    if restate not in RESTATE_MODES:
        raise ValueError(f"restate must be one of {RESTATE_MODES}, got {restate!r}")
    if abstain:
        text = f"{CANONICAL_ABSTAIN} {IDK_RESPONSE}" if restate == "all" else IDK_RESPONSE
    else:
        text = f"\\boxed{{{problem.answer}}}"
    return f"{target:.2f} {text}" if restate != "none" and target is not None else text


def task_questions(cfg: WarmStartConfig | None = None) -> list[str]:
    """Questions holding every word and digit the warm start of ``cfg`` prompts with: an addition, and the
    ``pair_sum`` question when ``cfg`` trains on it (the Qwen3 pre-tokeniser splits numbers into single digits)."""
    questions = [QUESTION.format(a=1234567890, b=9876543210)]
    if cfg is not None and cfg.pair_sum_share > 0:
        from rlec.environments.pair_sum import QUESTION as PAIR_QUESTION

        questions.append(PAIR_QUESTION.format(m=1234567890, n=9876543210))
    return questions


def compact_vocabulary(tokenizer: Any, cfg: WarmStartConfig | None = None) -> list[int]:
    """The token ids the prompts and answers of the warm start of ``cfg`` (default: the demo's) can contain, sorted.

    Rendered from the template at every target 0.00 ... 0.99 and the binary prompt, with the
    questions of :func:`task_questions`, plus both answer forms (and ``a + b``) and the end-of-turn token.
    The Qwen3 tokenizer splits numbers into single digits, so any addition renders within this set
    (:func:`encode` checks it).
    """
    ids: set[int] = set()
    for question in task_questions(cfg):
        for p in [None] + [k / 100 for k in range(100)]:
            ids.update(tokenizer(render(tokenizer, build_messages(math_task(question), p)), add_special_tokens=False)["input_ids"])
    ids.update(tokenizer(IDK_RESPONSE + "\\boxed{0123456789}", add_special_tokens=False)["input_ids"])
    ids.add(tokenizer.convert_tokens_to_ids("<|im_end|>"))
    return sorted(ids)


def toy_corpus(tokenizer: Any, cfg: WarmStartConfig | None = None) -> list[str]:
    """Every kind of text the toy tasks show the model, for the compact tokenizer (:mod:`rlec.compact_vocab`).

    Prompts: rlec's template around an addition (the demo's and the ``addition`` environment's
    phrasing, a question holding every digit in every position) at every target 0.00 ... 0.99 and
    the binary objective, rendered by the chat template with and without the empty thinking block.
    Responses, each followed by ``<|im_end|>``: every form of :func:`response_text` (answers of every
    digit, ``\\boxed{I don't know}``, the restated target, the abstention in words). The Qwen3
    pre-tokeniser splits numbers into single digits, so every addition and target renders within
    this corpus's tokens. With ``cfg`` training on ``pair_sum`` (``pair_sum_share`` > 0), its question too, and the
    ``a + b`` answer.
    """
    questions = [*task_questions(cfg), QUESTION.format(a=5, b=7)]
    texts = []
    for question in questions:
        for p in [None] + [k / 100 for k in range(100)]:
            messages = build_messages(math_task(question), p)
            texts += [render(tokenizer, messages), render(tokenizer, messages, enable_thinking=True)]
    problem = AdditionProblem(questions[0], "0123456789", 10)
    for target in (None, 0.05, 0.8):
        for abstain in (False, True):
            for restate in RESTATE_MODES:
                texts.append(response_text(problem, abstain, target, restate) + "<|im_end|>")
    if cfg is not None and cfg.pair_sum_share > 0:
        texts.append(response_text(AdditionProblem("", "0123456789 + 9876543210", 10), False) + "<|im_end|>")
    return texts + [IDK_RESPONSE + "<|im_end|>", "<|endoftext|>"]


class Encoder:
    """Prompt and response token ids in the compact vocabulary (see the module docstring)."""

    def __init__(self, tokenizer: Any, vocab: Sequence[int]) -> None:
        self.tokenizer, self.vocab = tokenizer, list(vocab)
        self.index = {t: i for i, t in enumerate(self.vocab)}
        self.im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
        self._prompts: dict[tuple[str, float | None], list[int]] = {}

    def compact(self, ids: Sequence[int], what: str) -> list[int]:
        """Map full ids to compact ids.

        Raises:
            ValueError: a token outside the compact vocabulary (the message names ``what``).
        """
        try:
            return [self.index[t] for t in ids]
        except KeyError as exc:
            raise ValueError(f"{what}: token {exc.args[0]} ({self.tokenizer.decode([exc.args[0]])!r}) is outside the "
                             "compact vocabulary") from None

    def prompt(self, question: str, target_p: float | None) -> list[int]:
        """Compact ids of the rendered prompt (rlec's template + chat template)."""
        key = (question, target_p)
        if key not in self._prompts:
            text = render(self.tokenizer, build_messages(math_task(question), target_p))
            self._prompts[key] = self.compact(self.tokenizer(text, add_special_tokens=False)["input_ids"], "prompt")
        return self._prompts[key]

    def response(self, text: str) -> list[int]:
        """Compact ids of a response followed by ``<|im_end|>``."""
        return self.compact(self.tokenizer(text, add_special_tokens=False)["input_ids"] + [self.im_end], "response")

    def decode(self, compact_ids: Sequence[int]) -> str:
        """Text of compact ids (special tokens removed)."""
        return self.tokenizer.decode([self.vocab[i] for i in compact_ids], skip_special_tokens=True)


def full_vocab_logits(hidden: torch.Tensor, lm_head: torch.nn.Module, unused: int) -> torch.Tensor:
    """Compact logits with one extra column standing for the ``unused`` zero-row tokens.

    Every token outside the compact vocabulary has logit exactly 0 in the full model, so their
    joint log-mass is ``log(unused)``: a softmax over this (N, |C| + 1) matrix gives the full
    model's probabilities of the compact tokens, and its last column the total probability of all
    other tokens.
    """
    return full_vocab_logits_from(lm_head(hidden), unused)


def full_vocab_logits_from(logits: torch.Tensor, unused: int) -> torch.Tensor:
    """(..., |C|) compact logits -> (..., |C| + 1) with the ``log(unused)`` column (see :func:`full_vocab_logits`)."""
    return torch.cat([logits, logits.new_full((*logits.shape[:-1], 1), math.log(unused))], dim=-1)


def pad_left(rows: Sequence[Sequence[int]], pad: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-padded ``(ids, attention_mask)``, both (B, max length) int64."""
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, r in enumerate(rows):
        ids[i, width - len(r):] = torch.tensor(r, dtype=torch.long)
        mask[i, width - len(r):] = 1
    return ids, mask


def sft_loss(
    model: Any, enc: Encoder, prompts: Sequence[list[int]], responses: Sequence[list[int]], prompt_weight: float = 0.0
) -> torch.Tensor:
    """Full-vocabulary cross-entropy: mean over response tokens + ``prompt_weight`` x mean over prompt tokens.

    The prompt term is ordinary language modelling of the prompt (every token after the first):
    it is what makes a pretrained model read its prompt, here the stated target among the rest;
    the response term is the supervised answer. ``prompt_weight = 0`` scores the response only.
    """
    ids, mask = pad_left([p + r for p, r in zip(prompts, responses)])
    width = ids.shape[1]
    is_response = torch.zeros_like(ids, dtype=torch.bool)
    for i, r in enumerate(responses):
        is_response[i, width - len(r):] = True
    hidden = model.model(input_ids=ids, attention_mask=mask).last_hidden_state[:, :-1]
    target, valid = ids[:, 1:], (mask[:, 1:] == 1) & (mask[:, :-1] == 1)
    unused = FULL_VOCAB_SIZE - len(enc.vocab)
    resp = valid & is_response[:, 1:]
    loss = torch.nn.functional.cross_entropy(full_vocab_logits(hidden[resp], model.lm_head, unused), target[resp])
    if prompt_weight > 0:
        prompt = valid & ~is_response[:, 1:]
        lm = torch.nn.functional.cross_entropy(full_vocab_logits(hidden[prompt], model.lm_head, unused), target[prompt])
        loss = loss + prompt_weight * lm
    return loss


def build_compact_model(cfg: WarmStartConfig, vocab_size: int) -> Any:
    """A randomly initialised (``torch.manual_seed(cfg.seed)``) Qwen3 with ``vocab_size`` rows."""
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(cfg.seed)
    return AutoModelForCausalLM.from_config(AutoConfig.for_model(**cfg.hf_config(vocab_size)), dtype=torch.float32)


def train(
    cfg: WarmStartConfig, tokenizer: Any, *, progress: bool = True, on_step: Callable[[int, Any], None] | None = None
) -> tuple[Any, Encoder, list[dict[str, float]]]:
    """The supervised pass on the compact model.

    Deterministic given ``cfg`` (seeded data, initialisation and ``cfg.threads`` torch threads).
    ``on_step(step, model)`` is called after every optimizer step (e.g. to keep snapshots).

    Returns:
        ``(compact model, encoder, history)``; history holds ``{"step", "loss", "lr"}`` every 25 steps.
    """
    from tqdm import tqdm

    threads = torch.get_num_threads()
    torch.set_num_threads(cfg.threads)
    try:
        enc = Encoder(tokenizer, compact_vocabulary(tokenizer, cfg))
        model = build_compact_model(cfg, len(enc.vocab))
        model.train()
        rng = random.Random(cfg.seed)
        opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, betas=(0.9, 0.98), weight_decay=cfg.weight_decay)
        warm = max(1, cfg.warmup_steps)
        def factor(s: int) -> float:  # linear warm-up, then cosine decay to 0 or constant
            if cfg.lr_schedule == "constant":
                return min(1.0, (s + 1) / warm)
            return min(1.0, (s + 1) / warm) * 0.5 * (1 + math.cos(math.pi * min(s, cfg.steps) / cfg.steps))

        sched = torch.optim.lr_scheduler.LambdaLR(opt, factor)
        history: list[dict[str, float]] = []
        bar = tqdm(range(cfg.steps), desc="warm start", disable=not progress, mininterval=2)
        for step in bar:
            prompts, responses = [], []
            for problem, target, abstain in sft_examples(rng, cfg, cfg.batch_size):
                prompts.append(enc.prompt(problem.question, target))
                responses.append(enc.response(response_text(problem, abstain, target, cfg.restate_target)))
            loss = sft_loss(model, enc, prompts, responses, cfg.prompt_loss_weight)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            if on_step is not None:
                on_step(step + 1, model)
            if step % 25 == 0 or step == cfg.steps - 1:
                history.append({"step": step, "loss": float(loss.detach()), "lr": opt.param_groups[0]["lr"]})
                bar.set_postfix(loss=f"{float(loss.detach()):.3f}")
        done = cfg.steps
        for k, stage in enumerate(cfg.finetune, start=1):
            history += _finetune(model, enc, cfg, stage, f"fine-tune {k}/{len(cfg.finetune)}", done, progress, on_step)
            done += stage[0]
        model.eval()
        return model, enc, history
    finally:
        torch.set_num_threads(threads)


def _digit_counts(spec: str) -> tuple[int, ...]:
    try:
        counts = tuple(int(x) for x in spec.split(","))
    except ValueError:
        counts = ()
    if not counts or min(counts) < 1:
        raise ValueError(f"digit counts must be comma-separated integers >= 1, got {spec!r}")
    return counts


def _finetune(model: Any, enc: Encoder, cfg: WarmStartConfig, stage: tuple[int, str, float, str, int], desc: str,
              offset: int, progress: bool, on_step: Callable[[int, Any], None] | None) -> list[dict[str, float]]:
    """One fine-tuning stage of :class:`WarmStartConfig` ``finetune`` (in place); returns its loss history."""
    from dataclasses import replace

    from tqdm import tqdm

    steps, digits, lr, restate, threads = stage
    torch.set_num_threads(threads)
    stage_cfg = replace(cfg, digits=_digit_counts(digits))
    rng = random.Random(cfg.seed + 1)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.98), weight_decay=0.0)
    history: list[dict[str, float]] = []
    for step in tqdm(range(steps), desc=desc, disable=not progress, mininterval=2):
        for group in opt.param_groups:  # cosine decay to 0, no warm-up
            group["lr"] = lr * 0.5 * (1 + math.cos(math.pi * step / steps))
        prompts, responses = [], []
        for problem, target, abstain in sft_examples(rng, stage_cfg, cfg.batch_size):
            prompts.append(enc.prompt(problem.question, target))
            responses.append(enc.response(response_text(problem, abstain, target, restate)))
        loss = sft_loss(model, enc, prompts, responses, 0.0)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if on_step is not None:
            on_step(offset + step + 1, model)
        if step % 25 == 0 or step == steps - 1:
            history.append({"step": offset + step, "loss": float(loss.detach()), "lr": opt.param_groups[0]["lr"]})
    return history


@torch.no_grad()
def expand(compact: Any, vocab: Sequence[int], cfg: WarmStartConfig) -> Any:
    """The full-vocabulary Qwen3 the compact model stands for.

    Same body; embedding and output rows copied to the compact tokens' ids; every other row 0.

    Returns:
        A ``transformers`` model with :data:`FULL_VOCAB_SIZE` rows.
    """
    from transformers import AutoConfig, AutoModelForCausalLM

    full = AutoModelForCausalLM.from_config(AutoConfig.for_model(**cfg.hf_config(FULL_VOCAB_SIZE)), dtype=torch.float32)
    state = compact.state_dict()
    ids = torch.tensor(list(vocab))
    out = {}
    for name, tensor in full.state_dict().items():
        if name in ("model.embed_tokens.weight", "lm_head.weight"):
            big = torch.zeros_like(tensor)
            big[ids] = state[name]
            out[name] = big
        else:
            out[name] = state[name].clone()
    full.load_state_dict(out)
    return full.eval()


@torch.no_grad()
def remap(compact: Any, vocab: Sequence[int], cfg: WarmStartConfig, tokenizer: Any, tokens: Sequence[str]) -> Any:
    """The compact model with its embedding and output rows in the compact tokenizer's order.

    Row ``j`` of the result is the compact model's row of token ``tokens[j]`` (the compact tokenizer's
    token of id ``j``, :func:`rlec.compact_vocab.build_compact_tokenizer`); a token the compact model
    has no row for (an intermediate of a BPE merge, never a final token of the toy texts, or a special
    token) gets a zero row, so its logit is 0 (the full model gave all its 151,851 other tokens logit 0). A
    compact row whose token is not in ``tokens`` is dropped (``}\\``: only the training-time vocabulary's
    own probe string ever made it). The body is copied.

    Args:
        vocab: the compact model's rows as Qwen3 token ids (:func:`compact_vocabulary`).
        tokenizer: the bundled Qwen3 tokenizer (maps ``vocab`` to token strings).

    Returns:
        A ``transformers`` Qwen3 with ``len(tokens)`` rows and the compact tokenizer's special ids.
    """
    from transformers import AutoConfig, AutoModelForCausalLM

    index = {tok: i for i, tok in enumerate(tokenizer.convert_ids_to_tokens(list(vocab)))}
    ids = {tok: j for j, tok in enumerate(tokens)}
    special = {"bos_token_id": ids["<|endoftext|>"], "eos_token_id": ids["<|im_end|>"], "pad_token_id": ids["<|endoftext|>"]}
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model(**cfg.hf_config(len(tokens), special)), dtype=torch.float32)
    state = compact.state_dict()
    rows = [(j, index[tok]) for j, tok in enumerate(tokens) if tok in index]
    new_rows, old_rows = torch.tensor([j for j, _ in rows]), torch.tensor([i for _, i in rows])
    out = {}
    for name, tensor in model.state_dict().items():
        if name in ("model.embed_tokens.weight", "lm_head.weight"):
            table = torch.zeros_like(tensor)
            table[new_rows] = state[name][old_rows]
            out[name] = table
        else:
            out[name] = state[name].clone()
    model.load_state_dict(out)
    return model.eval()


# What build writes: 1 = the model expanded to Qwen3's 151,936 rows with Qwen3's tokenizer (retired: its 151,851 rows
# of logit 0 needed top-k sampling), 2 = the compact tokenizer's rows (rlec.compact_vocab). A folder of another format
# is rebuilt, and the demo's and the experiments' folders name it (folder_key), so no run mixes the two.
MODEL_FORMAT = 2


def folder_key(cfg: WarmStartConfig, experts: int = 0) -> str:
    """What a built warm-start folder holds: the settings' key, :data:`MODEL_FORMAT`, and the upcycled experts (0: dense)."""
    return f"{cfg.key()}-format{MODEL_FORMAT}" + (f"-moe{experts}" if experts else "")


def build(out_dir: str | Path, cfg: WarmStartConfig, *, experts: int = 0, force: bool = False, progress: bool = True) -> Path:
    """Train (or reuse) the warm start and write it as a Hugging Face folder with its compact tokenizer.

    The folder holds the model with the compact tokenizer's rows (:func:`remap`; safetensors), that
    tokenizer (:func:`rlec.compact_vocab.build_compact_tokenizer` of :func:`toy_corpus`), the compact
    weights in :data:`COMPACT_DIR` and ``warm_start.json`` (settings, cache key, compact vocabulary, loss
    history, the report of :func:`measure`, ``folder_key``). With ``experts`` > 0 the model is the Qwen3-MoE upcycled from
    the dense one (:func:`rlec.models.upcycle_to_moe`: same function, ``experts`` copies of each MLP,
    top-2 routing). A folder with the same :func:`folder_key` is reused unless ``force``; the shipped
    compact weights (:data:`SHIPPED_DIR`) of these settings replace training.

    Returns:
        ``Path(out_dir)``.
    """
    from rlec.compact_vocab import build_compact_tokenizer
    from rlec.io import atomic_dir
    from rlec.models import load_tokenizer, upcycle_to_moe

    out = Path(out_dir)
    if not force and cached(out, cfg, experts=experts):
        return out
    tokenizer = load_tokenizer()
    shipped = None if force else load_shipped(cfg, tokenizer)
    if shipped is not None:  # the repository's copy of these settings: convert only
        compact, enc, manifest = shipped
    else:
        t0 = time.perf_counter()
        compact, enc, history = train(cfg, tokenizer, progress=progress)
        seconds = time.perf_counter() - t0
        manifest = {"key": cfg.key(), "config": asdict(cfg), "compact_vocab": enc.vocab, "train_seconds": round(seconds, 1),
                    "history": history, "report": measure(compact, enc, cfg, progress=progress)}
    with atomic_dir(out) as tmp:
        tokens = build_compact_tokenizer(tmp, toy_corpus(tokenizer, cfg))
        model = remap(compact, enc.vocab, cfg, tokenizer, tokens)
        if experts:
            model = upcycle_to_moe(model, num_experts=experts, experts_per_token=min(2, experts), seed=cfg.seed)
        model.save_pretrained(tmp, safe_serialization=True)
        manifest = {**manifest, "folder_key": folder_key(cfg, experts)}
        save_compact(compact, manifest, tmp / COMPACT_DIR)
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    return out


def save_compact(compact: Any, manifest: dict[str, Any], folder: str | Path) -> None:
    """Write the compact weights (:data:`COMPACT_FILE`, safetensors) and :data:`MANIFEST` into ``folder`` (created)."""
    from safetensors.torch import save_file

    Path(folder).mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in compact.state_dict().items()}, str(Path(folder) / COMPACT_FILE))
    (Path(folder) / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")


def load_compact(folder: str | Path, tokenizer: Any) -> tuple[Any, Encoder, dict[str, Any]]:
    """The compact model saved by :func:`save_compact` in ``folder`` (the shipped copy), or in a built warm start's
    :data:`COMPACT_DIR` when ``folder`` is one.

    Returns:
        ``(compact model in eval mode, encoder, manifest)``.

    Raises:
        ValueError: the manifest or weights are missing or unreadable (the message names the file).
    """
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    if (Path(folder) / COMPACT_DIR / COMPACT_FILE).is_file():
        folder = Path(folder) / COMPACT_DIR
    path = Path(folder) / MANIFEST
    try:
        manifest = json.loads(path.read_text())
        cfg = config_from_dict(manifest["config"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{path}: not a warm-start manifest ({exc})") from None
    enc = Encoder(tokenizer, manifest["compact_vocab"])
    compact = build_compact_model(cfg, len(enc.vocab))
    try:
        compact.load_state_dict(load_file(str(Path(folder) / COMPACT_FILE)))
    except (OSError, RuntimeError, SafetensorError) as exc:
        raise ValueError(f"{Path(folder) / COMPACT_FILE}: unreadable compact weights ({exc})") from None
    return compact.eval(), enc, manifest


def load_shipped(cfg: WarmStartConfig, tokenizer: Any, folder: str | Path | None = None) -> tuple[Any, Encoder, dict[str, Any]] | None:
    """The compact model shipped in ``folder`` (default :data:`SHIPPED_DIR`) when it was built with exactly ``cfg``, else None.

    Returns:
        ``(compact model, encoder, manifest)`` or None (no shipped copy, or other settings).

    Raises:
        ValueError: the shipped manifest or weights are unreadable (the message names the file).
    """
    folder = SHIPPED_DIR if folder is None else Path(folder)
    path = folder / MANIFEST
    if not path.is_file():
        return None
    try:
        key = json.loads(path.read_text()).get("key")
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: not a warm-start manifest ({exc})") from None
    return load_compact(folder, tokenizer) if key == cfg.key() else None


def cached(out_dir: str | Path, cfg: WarmStartConfig, *, experts: int = 0) -> bool:
    """True when ``out_dir`` holds a complete warm start built with exactly ``cfg`` as :func:`build` writes it now
    (:func:`folder_key`: the same format and experts)."""
    path = Path(out_dir) / MANIFEST
    if not path.is_file() or not (Path(out_dir) / "model.safetensors").is_file():
        return False
    try:
        return json.loads(path.read_text()).get("folder_key") == folder_key(cfg, experts)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return False


@torch.no_grad()
def generate_compact(
    model: Any, enc: Encoder, prompts: Sequence[list[int]], *, max_new_tokens: int = 24, temperature: float = 0.0,
    generator: torch.Generator | None = None, return_tokens: bool = False,
) -> Any:
    """Responses of the full model, computed on the compact one (KV cache, left padding).

    The extra "unused" column (:func:`full_vocab_logits`) stands for every other token: drawing it
    ends the response with the marker ``<unused>`` appended (graded as a wrong answer).

    Args:
        temperature: 0 = greedy, else sampling at that temperature.

    Returns:
        One decoded response per prompt (up to ``<|im_end|>``); with ``return_tokens``, also the
        compact ids drawn for each (up to and including the stop token or the "unused" column).
    """
    ids, mask = pad_left(prompts)
    unused_col = len(enc.vocab)
    stop = enc.index[enc.im_end]
    out = model(input_ids=ids, attention_mask=mask, use_cache=True)
    cache, hidden_logits = out.past_key_values, out.logits[:, -1]
    done = torch.zeros(len(prompts), dtype=torch.bool)
    unused = torch.zeros(len(prompts), dtype=torch.bool)
    tokens: list[torch.Tensor] = []
    for _ in range(max_new_tokens):
        if temperature > 0:  # the extra column holds the joint mass of all zero-logit tokens
            logits = full_vocab_logits_from(hidden_logits / temperature, FULL_VOCAB_SIZE - unused_col)
            nxt = torch.multinomial(torch.softmax(logits, -1), 1, generator=generator).squeeze(1)
        else:  # greedy compares single tokens: each other token has logit 0
            nxt = torch.cat([hidden_logits, hidden_logits.new_zeros((len(prompts), 1))], -1).argmax(-1)
        unused |= ~done & (nxt == unused_col)
        nxt = torch.where(done | (nxt == unused_col), torch.full_like(nxt, stop), nxt)
        tokens.append(nxt)
        done |= nxt == stop
        if bool(done.all()):
            break
        mask = torch.cat([mask, torch.ones(len(prompts), 1, dtype=mask.dtype)], 1)
        out = model(input_ids=nxt[:, None], attention_mask=mask, past_key_values=cache, use_cache=True)
        cache, hidden_logits = out.past_key_values, out.logits[:, -1]
    rows = torch.stack(tokens, 1).tolist()
    texts, drawn = [], []
    for row, bad in zip(rows, unused.tolist()):
        end = row.index(stop) if stop in row else len(row)
        texts.append(enc.decode(row[:end]) + ("<unused>" if bad else ""))
        drawn.append(row[:end] + ([unused_col] if bad else [stop] if end < len(row) else []))
    return (texts, drawn) if return_tokens else texts


def grade_text(text: str, answer: str) -> str:
    """``"correct"``, ``"incorrect"`` or ``"abstain"`` with rlec's grader (math task)."""
    from rlec.grading import grade

    return grade(text, answer, "math").outcome.value


def measure(
    model: Any, enc: Encoder, cfg: WarmStartConfig, *, per_cell: int = 24, seed: int = 12345,
    targets: Sequence[float | None] = (None, 0.1, 0.3, 0.5, 0.7, 0.9), progress: bool = False,
) -> dict[str, Any]:
    """Accuracy by difficulty and abstention by target of the (compact) model, greedy and sampled.

    ``per_cell`` fresh problems (seeded by ``seed``, not the training seed) for every digit count
    of ``cfg.digits`` plus one more, each asked at every target of ``targets``.

    Returns:
        ``{"greedy"|"sampled": {"by_digits": {d: {"accuracy", "selective_accuracy", "abstain_rate"}},
        "by_target": {label: {"abstain_rate", "accuracy"}}}}`` (rates in [0, 1]).
    """
    rng = random.Random(seed)
    digit_counts = sorted(set(cfg.digits)) + [max(cfg.digits) + 1]
    cells = [(d, t, addition_problem(rng, d)) for d in digit_counts for _ in range(per_cell) for t in targets]
    report: dict[str, Any] = {}
    gen = torch.Generator().manual_seed(seed)
    for mode, temperature in (("greedy", 0.0), ("sampled", 1.0)):
        outcomes: list[str] = []
        for start in range(0, len(cells), 128):
            chunk = cells[start:start + 128]
            texts = generate_compact(model, enc, [enc.prompt(pr.question, t) for _, t, pr in chunk],
                                     temperature=temperature, generator=gen)
            outcomes += [grade_text(x, pr.answer) for x, (_, _, pr) in zip(texts, chunk)]
        report[mode] = {"by_digits": _rates(cells, outcomes, lambda c: str(c[0])),
                        "by_target": _rates(cells, outcomes, lambda c: "binary" if c[1] is None else f"{c[1]:.1f}")}
    return report


def _rates(cells: Sequence[tuple[Any, ...]], outcomes: Sequence[str], key: Any) -> dict[str, dict[str, float]]:
    groups: dict[str, list[str]] = {}
    for cell, outcome in zip(cells, outcomes):
        groups.setdefault(key(cell), []).append(outcome)
    out = {}
    for name, got in groups.items():
        n, correct, abstain = len(got), got.count("correct"), got.count("abstain")
        out[name] = {"accuracy": correct / n, "abstain_rate": abstain / n,
                     "selective_accuracy": correct / (n - abstain) if n > abstain else float("nan"), "n": n}
    return out


def format_report(report: dict[str, Any]) -> str:
    """Two Markdown tables: by operand digits, by target (greedy | sampled at temperature 1)."""
    lines = ["| digits | accuracy (greedy) | abstain (greedy) | accuracy (sampled) | selective acc. (sampled) | abstain (sampled) |",
             "|---|---|---|---|---|---|"]
    g, s = report["greedy"]["by_digits"], report["sampled"]["by_digits"]
    for d in sorted(g, key=int):
        lines.append(f"| {d} | {g[d]['accuracy']:.2f} | {g[d]['abstain_rate']:.2f} | {s[d]['accuracy']:.2f} | "
                     f"{s[d]['selective_accuracy']:.2f} | {s[d]['abstain_rate']:.2f} |")
    lines += ["", "| target | abstain (greedy) | abstain (sampled) | accuracy (sampled) |", "|---|---|---|---|"]
    g, s = report["greedy"]["by_target"], report["sampled"]["by_target"]
    for t in g:
        lines.append(f"| {t} | {g[t]['abstain_rate']:.2f} | {s[t]['abstain_rate']:.2f} | {s[t]['accuracy']:.2f} |")
    return "\n".join(lines)


def folder_size(path: str | Path) -> int:
    """Total bytes of the files in ``path``."""
    return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file())


def build_parser() -> argparse.ArgumentParser:
    """The command-line interface (every :class:`WarmStartConfig` field is an option)."""
    p = argparse.ArgumentParser(prog="python -m rlec.demo.warm_start", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--out", default="outputs/demo/warm_start", help="output model folder (reused when built with the same settings)")
    p.add_argument("--force", action="store_true", help="rebuild even when the folder holds these settings")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.add_argument("--ship", action="store_true", help=f"also copy the compact weights and manifest into {SHIPPED_DIR} "
                   "(the repository's copy, used instead of training when the settings match)")
    defaults = WarmStartConfig()
    for f in fields(WarmStartConfig):
        value = getattr(defaults, f.name)
        if f.name == "finetune":
            p.add_argument("--finetune", default=json.dumps(value), help="JSON list of fine-tuning stages "
                           "[steps, \"digit,counts\", lr, restate mode, threads] after the base pass ([] = none)")
        elif isinstance(value, tuple):
            p.add_argument(f"--{f.name.replace('_', '-')}", default=",".join(map(str, value)), help="comma-separated")
        else:
            p.add_argument(f"--{f.name.replace('_', '-')}", type=type(value), default=value)
    return p


def config_from_args(args: argparse.Namespace) -> WarmStartConfig:
    """The :class:`WarmStartConfig` of parsed arguments.

    Raises:
        ValueError: a bad value (the message names the setting).
    """
    values: dict[str, Any] = {}
    for f in fields(WarmStartConfig):
        value = getattr(args, f.name)
        if f.name in ("digits", "pair_sum_digits"):
            value = tuple(int(x) for x in str(value).split(",") if x.strip())
        elif f.name == "finetune":
            try:
                value = tuple(tuple(stage) for stage in json.loads(value))
            except (ValueError, TypeError):
                raise ValueError(f"--finetune must be a JSON list of stages, got {value!r}") from None
        values[f.name] = value
    return config_from_dict(values)


def config_from_dict(values: dict[str, Any]) -> WarmStartConfig:
    """A :class:`WarmStartConfig` from a dict such as a manifest's ``config`` (JSON lists become tuples).

    Raises:
        ValueError: a bad value; TypeError: an unknown key.
    """
    fixed = dict(values)
    for name in ("digits", "pair_sum_digits"):
        if name in fixed:
            fixed[name] = tuple(fixed[name])
    if "finetune" in fixed:
        fixed["finetune"] = tuple(tuple(stage) for stage in fixed["finetune"])
    return WarmStartConfig(**fixed)


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point; returns the exit status."""
    args = build_parser().parse_args(argv)
    try:
        cfg = config_from_args(args)
    except ValueError as exc:
        print(f"rlec.demo.warm_start: error: {exc}", file=sys.stderr)
        return 2
    out = Path(args.out)
    reused = not args.force and cached(out, cfg)
    build(out, cfg, force=args.force, progress=not args.quiet)
    manifest = json.loads((out / MANIFEST).read_text())
    if reused:
        verb = "reused"
    elif manifest.get("train_seconds") is None:
        verb = "converted from the shipped copy"
    else:
        verb = f"built in {manifest['train_seconds']:.0f} s"
    if args.ship:
        from rlec.io import atomic_dir

        with atomic_dir(SHIPPED_DIR) as tmp:
            for name in (COMPACT_FILE, MANIFEST):
                (tmp / name).write_bytes((out / COMPACT_DIR / name).read_bytes())
        print(f"shipped: {SHIPPED_DIR} ({folder_size(SHIPPED_DIR) / 2**20:.2f} MiB)")
    print(f"warm start {verb}: {out} ({folder_size(out) / 2**20:.1f} MiB; key {cfg.key()}; "
          f"compact vocabulary {len(manifest['compact_vocab'])} tokens)")
    print(format_report(manifest["report"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
