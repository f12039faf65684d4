"""A compact-vocabulary tokenizer: Qwen3's byte-level BPE restricted to the tokens a toy corpus uses.

The toy tasks (the demo's additions, the ``addition`` environment) use about a hundred of Qwen3's
151,669 tokens, yet a model with Qwen3's vocabulary pays for all 151,936 rows of its output layer
in every softmax, and samples from rows it never learnt. :func:`build_compact_tokenizer` writes a
tokenizer folder (``tokenizer.json``, ``tokenizer_config.json`` with Qwen3's chat template;
``AutoTokenizer.from_pretrained(folder)`` loads it, no remote code) whose token ids are
``0 .. K - 1`` and which encodes every text of the corpus into **the same token strings** as the
bundled Qwen3 tokenizer (:func:`rlec.models.bundled_tokenizer_path`).

Construction (why the encodings are identical). Qwen3's normaliser (NFC), its pre-tokeniser (the
split regex, then the byte-to-character map) and its decoder are kept as they are, so both
tokenizers cut a text into the same words of byte characters. BPE then merges each word by
repeatedly applying, among the adjacent pairs that have a merge rule, the rule of lowest rank. The
vocabulary kept is every symbol that appears while Qwen3's BPE encodes the corpus (its final tokens
and every intermediate of their merge trees, found by running the merges here:
:func:`bpe_symbols`), plus the chat template's special tokens; the merges kept are exactly Qwen3's
rules ``(a, b)`` with ``a``, ``b`` and ``a + b`` all kept, in Qwen3's order. On a corpus word, by
induction over the merge steps: the two tokenizers hold the same symbols; the rule Qwen3 applies
has all three symbols in the vocabulary (they appeared), so it is kept, and it has the lowest rank
among the kept rules that apply (they are a subset of Qwen3's); the compact BPE applies it too.
Text outside the corpus may encode differently, and a character whose bytes are not in the
vocabulary cannot be encoded at all: BPE without an unknown token would drop it silently, so
:meth:`Coverage.unencodable` finds it and :func:`check_texts` refuses such text, naming the row and the
character (the launch's path check does it for the data files: :mod:`rlec.cluster.paths`).

The toy tasks' tokenizer is written into every warm-start folder (:func:`rlec.demo.warm_start.build`, corpus
:func:`rlec.demo.warm_start.toy_corpus`).
"""

from __future__ import annotations

import json
import re
import unicodedata
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable, Sequence

from rlec.io import read_json_object

TOKENIZER_JSON = "tokenizer.json"
TOKENIZER_CONFIG = "tokenizer_config.json"
# the chat template's special tokens (Qwen3's hybrid template: turns, and the empty thinking block of enable_thinking=False)
CHAT_SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>")


@lru_cache(maxsize=1)
def byte_to_char() -> dict[int, str]:
    """The byte-level pre-tokeniser's map from each byte to its printable character (GPT-2's ``bytes_to_unicode``)."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    chars = list(keep)
    extra = 0
    for b in range(256):
        if b not in keep:
            keep.append(b)
            chars.append(256 + extra)
            extra += 1
    return {b: chr(c) for b, c in zip(keep, chars)}


def _special_pattern(specials: Iterable[str]) -> re.Pattern[str] | None:
    names = sorted(set(specials), key=len, reverse=True)
    return re.compile("|".join(re.escape(s) for s in names)) if names else None


def _segments(text: str, specials: Iterable[str]) -> list[tuple[str, bool]]:
    """``text`` cut at the special tokens: ``(piece, is_special)`` in order."""
    pattern = _special_pattern(specials)
    if pattern is None:
        return [(text, False)] if text else []
    out, pos = [], 0
    for m in pattern.finditer(text):
        if m.start() > pos:
            out.append((text[pos:m.start()], False))
        out.append((m.group(), True))
        pos = m.end()
    if pos < len(text):
        out.append((text[pos:], False))
    return out


def bpe_symbols(word: str, ranks: dict[tuple[str, str], int]) -> tuple[list[str], set[str]]:
    """Byte-level BPE of one pre-tokenised ``word``: the final tokens and every symbol seen on the way.

    Applies, while any applies, the merge rule of lowest rank among the adjacent pairs (all
    occurrences of that pair, left to right), as Hugging Face ``tokenizers``' BPE does without dropout.

    Args:
        word: a word of byte characters (the pre-tokeniser's output).
        ranks: merge rule ``(a, b)`` -> rank (0 = applied first).

    Returns:
        ``(final tokens, every symbol: single characters, intermediates and final tokens)``.
    """
    symbols = list(word)
    seen = set(symbols)
    while len(symbols) > 1:
        best = min(((ranks.get((a, b)), i) for i, (a, b) in enumerate(zip(symbols, symbols[1:]))
                    if (a, b) in ranks), default=None)
        if best is None:
            break
        pair = (symbols[best[1]], symbols[best[1] + 1])
        merged, i = [], 0
        while i < len(symbols):
            if i + 1 < len(symbols) and (symbols[i], symbols[i + 1]) == pair:
                merged.append(pair[0] + pair[1])
                i += 2
            else:
                merged.append(symbols[i])
                i += 1
        symbols = merged
        seen.add(pair[0] + pair[1])
    return symbols, seen


def _merge_pair(rule: Any) -> tuple[str, str]:
    return (rule[0], rule[1]) if isinstance(rule, list) else tuple(rule.split(" ", 1))  # type: ignore[return-value]


def compact_tokenizer_json(base: dict[str, Any], texts: Iterable[str], specials: Sequence[str] = CHAT_SPECIALS) -> dict[str, Any]:
    """The ``tokenizer.json`` dict of the compact tokenizer of ``texts`` (see the module docstring).

    Args:
        base: Qwen3's ``tokenizer.json`` (a byte-level BPE with merge rules and added tokens).
        texts: the corpus, as the model sees it (chat template rendered, special tokens as text).
        specials: added tokens to keep (each must be one of ``base``'s); the others are dropped.

    Returns:
        The dict: ids ``0 .. K - 1``, ordinary tokens first in Qwen3's id order, then ``specials`` in Qwen3's id order.

    Raises:
        ValueError: ``base`` is not a BPE tokenizer, or a special is not one of its added tokens.
    """
    from tokenizers import Tokenizer

    model = base.get("model", {})
    if model.get("type") != "BPE" or "vocab" not in model or "merges" not in model:
        raise ValueError("base tokenizer: expected a BPE model with vocab and merges (Qwen3's tokenizer.json)")
    added = {t["content"]: t for t in base.get("added_tokens", [])}
    missing = [s for s in specials if s not in added]
    if missing:
        raise ValueError(f"base tokenizer: special token(s) {missing} are not among its added tokens")
    texts = list(texts)
    backend = Tokenizer.from_str(json.dumps(base))
    ranks = {_merge_pair(rule): k for k, rule in enumerate(model["merges"])}
    keep: set[str] = set()
    words: set[str] = set()
    for text in texts:
        for piece, special in _segments(text, added):
            if special:
                continue
            normalized = backend.normalizer.normalize_str(piece) if backend.normalizer else piece
            words.update(word for word, _ in backend.pre_tokenizer.pre_tokenize_str(normalized))
    for word in words:
        keep |= bpe_symbols(word, ranks)[1]
    vocab_ids: dict[str, int] = model["vocab"]
    unknown = sorted(keep - set(vocab_ids))
    if unknown:  # a symbol Qwen3's BPE would build must be one of its tokens
        raise ValueError(f"base tokenizer: merged symbols {unknown[:5]} are not in its vocabulary")
    ordinary = sorted(keep, key=vocab_ids.__getitem__)
    kept_specials = sorted(specials, key=lambda s: added[s]["id"])
    merges = [rule for rule in model["merges"] if (p := _merge_pair(rule))[0] in keep and p[1] in keep and p[0] + p[1] in keep]
    out = {**base, "model": {**model, "vocab": {tok: i for i, tok in enumerate(ordinary)}, "merges": merges},
           "added_tokens": [{**added[s], "id": len(ordinary) + k} for k, s in enumerate(kept_specials)]}
    compact = Tokenizer.from_str(json.dumps(out))
    for text in texts:  # the construction's promise, checked on the corpus itself
        want, got = backend.encode(text, add_special_tokens=False).tokens, compact.encode(text, add_special_tokens=False).tokens
        if want != got:
            raise RuntimeError(f"compact tokenizer: {text!r} encodes as {got} instead of Qwen3's {want}")
    return out


def build_compact_tokenizer(out_dir: str | Path, texts: Iterable[str], *, base_dir: str | Path | None = None,
                            specials: Sequence[str] = CHAT_SPECIALS) -> list[str]:
    """Write the compact tokenizer of ``texts`` into ``out_dir`` (created if needed; the two files replaced).

    ``tokenizer_config.json`` is Qwen3's (chat template, eos ``<|im_end|>``, pad ``<|endoftext|>``) with its
    special tokens restricted to ``specials`` at their compact ids.

    Args:
        base_dir: the Qwen3 tokenizer folder (default: the bundled one).

    Returns:
        The vocabulary: token string per compact id (``K`` entries).

    Raises:
        ValueError: see :func:`compact_tokenizer_json`; FileNotFoundError: no bundled tokenizer.
    """
    from rlec.io import atomic_write_text
    from rlec.models import bundled_tokenizer_path

    base_dir = Path(base_dir) if base_dir else bundled_tokenizer_path()
    tok_json = compact_tokenizer_json(read_json_object(base_dir / TOKENIZER_JSON, what="a tokenizer.json object"), texts,
                                      specials)
    config = read_json_object(base_dir / TOKENIZER_CONFIG, what="a tokenizer config object")
    special_ids = {t["content"]: t["id"] for t in tok_json["added_tokens"]}
    decoder = {str(special_ids[entry["content"]]): entry for entry in config.get("added_tokens_decoder", {}).values()
               if entry["content"] in special_ids}
    config["added_tokens_decoder"] = decoder
    config["additional_special_tokens"] = [s for s in config.get("additional_special_tokens", []) if s in special_ids]
    for key in ("eos_token", "pad_token", "bos_token", "unk_token"):
        if config.get(key) is not None and config[key] not in special_ids:
            raise ValueError(f"{base_dir / TOKENIZER_CONFIG}: {key} {config[key]!r} is not among the kept specials {list(specials)}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / TOKENIZER_JSON, json.dumps(tok_json, ensure_ascii=False) + "\n")
    atomic_write_text(out / TOKENIZER_CONFIG, json.dumps(config, indent=1, ensure_ascii=False) + "\n")
    vocab = sorted(tok_json["model"]["vocab"], key=tok_json["model"]["vocab"].__getitem__)
    return vocab + [t["content"] for t in tok_json["added_tokens"]]


class Coverage:
    """What a ``tokenizer.json`` can encode: its byte characters and its added tokens.

    Args:
        tokenizer_json: the tokenizer's ``tokenizer.json`` (a path or the loaded dict).
    """

    def __init__(self, tokenizer_json: str | Path | dict[str, Any]) -> None:
        data = tokenizer_json if isinstance(tokenizer_json, dict) else read_json_object(tokenizer_json, what="a tokenizer.json object")
        vocab = data.get("model", {}).get("vocab", {})
        self.chars = {c for c in byte_to_char().values() if c in vocab}
        self.specials = [t["content"] for t in data.get("added_tokens", [])]

    @property
    def complete(self) -> bool:
        """True when every byte is a token (any text encodes: Qwen3's own tokenizer)."""
        return len(self.chars) == 256

    def unencodable(self, text: str) -> tuple[int, str] | None:
        """The first character of ``text`` (outside its special tokens) that cannot be encoded, or None.

        Returns:
            ``(index in text, character)``: a character one of whose UTF-8 bytes (after NFC
            normalisation, the tokenizer's) is not a token.
        """
        if self.complete:
            return None
        mapping = byte_to_char()
        pos = 0
        for piece, special in _segments(text, self.specials):
            if not special:
                for k, ch in enumerate(piece):
                    if any(mapping[b] not in self.chars for b in unicodedata.normalize("NFC", ch).encode()):
                        return pos + k, ch
            pos += len(piece)
        return None


def check_texts(coverage: Coverage | str | Path | dict[str, Any], rows: Iterable[tuple[str, str]], *, name: str = "") -> None:
    """Refuse the first text the tokenizer cannot encode.

    Args:
        coverage: the tokenizer (a :class:`Coverage` or its ``tokenizer.json``).
        rows: ``(where, text)``; ``where`` names the row (e.g. ``"train.parquet row 12"``).
        name: how to name the tokenizer in the message (default: the path given).

    Raises:
        ValueError: ``"<where>: character 'é' (U+00E9) at position N cannot be encoded by the compact tokenizer <name> ..."``.
    """
    cov = coverage if isinstance(coverage, Coverage) else Coverage(coverage)
    if cov.complete:
        return
    name = name or ("" if isinstance(coverage, (Coverage, dict)) else str(coverage))
    for where, text in rows:
        bad = cov.unencodable(text)
        if bad is not None:
            pos, ch = bad
            raise ValueError(f"{where}: character {ch!r} (U+{ord(ch):04X}) at position {pos} cannot be encoded by the "
                             f"compact tokenizer {name} (its vocabulary holds the toy tasks' tokens only, "
                             "rlec.compact_vocab; it would drop the character silently)")
