"""Prompt lengths in tokens, chat template applied, counted the way verl's length filter counts.

The length of a rendered prompt ``render(build_messages(task, p))`` is needed for every training
row (questions x repeats, ~150k rows with the defaults), but rows of one question differ only
in the instruction sentence. With byte-level BPE tokenizers whose pre-tokenizer starts a new
piece at a letter after a newline (Qwen2/3, Llama 3, GPT-4 style), the count is additive::

    tokens(prompt) = C + tokens(task + "\\n\\n") + tokens(instruction(p))

(the chat template's own tokens C are constant). So each task text is tokenised once, in
batches with the fast tokenizer, and each distinct instruction once. The decomposition is an
optimisation, not an assumption: :class:`PromptLengthCounter` checks it against the exact count
(render + tokenise) on evenly spaced rows and falls back to exact counting of every row if any
row disagrees, e.g. for a tokenizer whose pre-tokenizer merges across those boundaries.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
from tqdm.auto import tqdm

from rlec.prompts import CHAT_TEMPLATE_KWARGS, build_messages, instruction, render

log = logging.getLogger(__name__)
ADDITIVE, EXACT = "additive", "exact"


class PromptLengthCounter:
    """Count prompt tokens for (task_text, target_p) pairs.

    Args:
        tokenizer: a Hugging Face tokenizer with a chat template.
        chat_template_kwargs: overrides of :data:`rlec.prompts.CHAT_TEMPLATE_KWARGS` (must match
            verl's ``data.apply_chat_template_kwargs`` for the counts to agree with verl's filter).
        check_rows: how many evenly spaced rows per call are counted exactly to verify the
            additive decomposition.
        batch_size: texts per tokenizer call.
        progress: show a tqdm bar while tokenising.

    Attributes:
        method: "additive" or "exact": how the last call counted.
        checked_rows: rows counted exactly to verify the last additive call.
    """

    def __init__(
        self,
        tokenizer: Any,
        chat_template_kwargs: dict[str, Any] | None = None,
        *,
        check_rows: int = 64,
        batch_size: int = 512,
        progress: bool = True,
    ):
        self.tokenizer = tokenizer
        self.kwargs = {**CHAT_TEMPLATE_KWARGS, **(chat_template_kwargs or {})}
        self.check_rows, self.batch_size, self.progress = check_rows, batch_size, progress
        self._instr: dict[float | None, int] = {}
        self._constant: int | None = None
        self.method, self.checked_rows = ADDITIVE, 0

    def _count(self, texts: Sequence[str], desc: str) -> np.ndarray:
        out = np.empty(len(texts), dtype=np.int64)
        bar = tqdm(total=len(texts), desc=desc, unit="prompt", disable=None if (self.progress and desc and texts) else True, leave=False)  # None: off when not a terminal
        # A fast tokenizer's Rust backend counts without building Python id lists (the costly
        # part of tokenizer.__call__ here); the same tokens either way.
        backend = getattr(self.tokenizer, "backend_tokenizer", None) if getattr(self.tokenizer, "is_fast", False) else None
        for start in range(0, len(texts), self.batch_size):
            batch = list(texts[start : start + self.batch_size])
            if backend is not None:
                encode = getattr(backend, "encode_batch_fast", backend.encode_batch)  # _fast: tokenizers >= 0.21
                out[start : start + len(batch)] = [len(e) for e in encode(batch, add_special_tokens=False)]
            else:
                ids = self.tokenizer(batch, add_special_tokens=False, return_attention_mask=False)["input_ids"]
                out[start : start + len(batch)] = [len(x) for x in ids]
            bar.update(len(batch))
        bar.close()
        return out

    def exact(self, task_text: str, target_p: float | None) -> int:
        """The exact count of one prompt: render with the chat template, then tokenise."""
        text = render(self.tokenizer, build_messages(task_text, target_p), **self.kwargs)
        return len(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def instruction_length(self, target_p: float | None) -> int:
        """Tokens of the instruction sentence for ``target_p`` (None: binary), cached."""
        if target_p not in self._instr:
            self._instr[target_p] = int(self._count([instruction(target_p)], "")[0])
        return self._instr[target_p]

    def _additive(self, tasks: Sequence[str], targets: Sequence[float | None]) -> np.ndarray:
        uniq = list(dict.fromkeys(tasks))
        pos = {t: i for i, t in enumerate(uniq)}
        task_len = self._count([f"{t.strip()}\n\n" for t in uniq], "tokenising prompts")
        instr = np.array([self.instruction_length(p) for p in targets], dtype=np.int64)
        parts = task_len[np.fromiter((pos[t] for t in tasks), dtype=np.int64, count=len(tasks))] + instr
        if self._constant is None:
            self._constant = self.exact(tasks[0], targets[0]) - int(parts[0])
        return parts + self._constant

    def __call__(self, tasks: Sequence[str], targets: Sequence[float | None]) -> np.ndarray:
        """Token counts of ``render(build_messages(tasks[i], targets[i]))``.

        Args:
            tasks: N task texts (:func:`rlec.prompts.math_task` / :func:`~rlec.prompts.qa_task`).
            targets: N targets p in [0, 1), or None for the binary prompt.

        Returns:
            int64 array of shape (N,), in tokens.

        Raises:
            ValueError: lengths differ, or a target is out of range.
        """
        if len(tasks) != len(targets):
            raise ValueError(f"{len(tasks)} tasks but {len(targets)} targets")
        if not tasks:
            return np.zeros(0, dtype=np.int64)
        lengths = self._additive(tasks, targets)
        check = np.unique(np.linspace(0, len(tasks) - 1, min(self.check_rows, len(tasks))).astype(np.int64))
        bad = [int(i) for i in check if self.exact(tasks[i], targets[i]) != lengths[i]]
        self.checked_rows = len(check)
        if not bad:
            self.method = ADDITIVE
            return lengths
        log.warning("additive prompt-length counting disagrees with the exact count on %d of %d checked rows; counting every row exactly", len(bad), len(check))
        self.method = EXACT
        texts = [render(self.tokenizer, build_messages(t, p), **self.kwargs) for t, p in zip(tasks, targets)]
        return self._count(texts, "tokenising prompts (exact)")

    def longest_target(self, grid: Sequence[float]) -> float:
        """The target on ``grid`` whose instruction has the most tokens (first one on ties)."""
        return max(grid, key=lambda p: (self.instruction_length(p), -p))


@dataclass(frozen=True)
class PromptLimit:
    """``data.max_prompt_length`` as verl's prompt filter applies it (``RLHFDataset.maybe_filter_out_long_prompts``:
    ``tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, **data.apply_chat_template_kwargs)``,
    rows longer than the limit dropped without a word).

    Attributes:
        tokenizer: the model's Hugging Face tokenizer (with its chat template).
        limit: ``data.max_prompt_length`` (tokens).
        chat_template_kwargs: ``data.apply_chat_template_kwargs``.
    """

    tokenizer: Any
    limit: int
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)

    def excess(self, messages: Sequence[dict[str, Any]]) -> int | None:
        """The prompt's length in tokens when it is over :attr:`limit`, else None.

        The rendered prompt is tokenised only when its UTF-8 bytes exceed the limit: a byte-level BPE or byte-fallback
        token covers at least one byte (special tokens several), so a prompt of at most ``limit`` bytes fits.

        Raises:
            Exception: whatever the chat template raises on ``messages`` (verl's filter drops such a row too).
        """
        text = self.tokenizer.apply_chat_template(list(messages), add_generation_prompt=True, tokenize=False,
                                                  **self.chat_template_kwargs)
        if len(text.encode("utf-8")) <= self.limit:
            return None
        tokens = len(self.tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"])
        return tokens if tokens > self.limit else None
