"""What a cluster run reads and writes, checked before it starts (``DRY_RUN=1``, and every launch).

A verl job that starts with a missing model folder, a parquet file in the wrong schema or a
read-only checkpoint folder fails minutes later inside a Ray worker. :func:`path_findings`
checks, without writing anything:

- the model folder (``actor_rollout_ref.model.path``): ``config.json`` of a supported model
  type, tokenizer files, and ``*.safetensors`` weights holding every tensor ``config.json`` implies,
  with its shape, in complete files (:func:`rlec.megatron.preflight.check_hf_weights`, safetensors
  headers only; the retired local loop checked this, verl's path found it inside a Ray worker) unless a
  dist checkpoint is loaded instead (``actor.megatron.use_dist_checkpointing``: then its ``dist_checkpointing_path``
  must hold a Megatron dist checkpoint, ``metadata.json``);
- the train and validation parquet files (``data.train_files``, ``data.val_files``; a path or
  a list): present, readable by pyarrow, at least one row, and every row satisfies the data
  contract (:func:`rlec.data.contract.check_parquet`): a bad row deep in the file would otherwise stop the run at the step
  that reads it; and, with the model's tokenizer, every prompt fits ``data.max_prompt_length`` as verl's prompt
  filter counts it (:class:`rlec.data.lengths.PromptLimit`), which would drop a longer row without a word;
- with a compact-vocabulary tokenizer in the model folder (:mod:`rlec.compact_vocab`: the toy tasks'
  tokens only), every prompt of those files encodable: a character outside its vocabulary would
  otherwise be dropped silently by the tokenizer; the error names the file, the row and the character;
- the checkpoint folder (``trainer.default_local_dir``): writable, or creatable under a
  writable parent (:func:`checkpoint_folder_findings`, also what the launcher checks before it builds the
  tiny model and the sample data there);
- the step count: verl's loop ends after ``trainer.total_epochs`` passes over the train files
  whatever ``trainer.total_training_steps`` says (an e3_budget run of 20 steps over 4 steps of
  data stopped at step 4, its LR schedule planned for 20), so more steps than the epochs hold
  are refused (:func:`steps_findings`).

On a login node the paths may exist only on the cluster: ``--skip-path-checks``
(``SKIP_PATH_CHECKS=1``) skips these checks and the report says so.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

from rlec.algorithms import registry
from rlec.layout import Finding
from rlec.run_config import VerlKeys
from rlec.run_config import RunConfig

# verl's keys of the fields these checks read (what a finding names)
MODEL_KEY = VerlKeys.key_of("model_path")
DIST_KEY = VerlKeys.key_of("dist_checkpointing_path")
CHECKPOINT_KEY = VerlKeys.key_of("default_local_dir")

__all__ = ["checkpoint_folder_findings", "path_findings", "steps_findings"]


def _as_list(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, (str, os.PathLike)):
        return [str(value)]
    return [str(v) for v in value]


def _model(k: VerlKeys) -> tuple[list[Finding], str | None]:
    from rlec.models import SUPPORTED_MODEL_TYPES, TOKENIZER_FILES, read_model_config

    folder = Path(os.path.expanduser(str(k.model_path)))
    hint = "; download it (docs/cluster.md section 2), or set SKIP_PATH_CHECKS=1 where it exists only on the cluster"
    try:
        read_model_config(folder, label="model folder", model_types=SUPPORTED_MODEL_TYPES)
    except (OSError, ValueError) as exc:
        return [Finding("error", MODEL_KEY, f"{exc}{hint}")], None
    out: list[Finding] = []
    if not any((folder / name).is_file() for name in TOKENIZER_FILES):
        out.append(Finding("error", MODEL_KEY, f"model folder {folder}: no tokenizer file ({' or '.join(TOKENIZER_FILES)})"))
    use_dist = bool(k.use_dist_checkpointing)
    weights = sorted(folder.glob("*.safetensors"))
    if use_dist:
        dist = Path(os.path.expanduser(str(k.dist_checkpointing_path or "")))
        if not (dist / "metadata.json").is_file():
            out.append(Finding("error", DIST_KEY, f"{dist}: not a Megatron dist checkpoint (no metadata.json; write one "
                               "with tools/convert_hf_to_mcore.py)"))
    elif not weights:
        out.append(Finding("error", MODEL_KEY, f"model folder {folder}: no *.safetensors weights"))
    else:  # the weights verl's bridge loads inside a Ray worker: every tensor config.json implies, shapes, complete files
        from rlec.megatron.preflight import ConversionInputError, check_hf_weights  # header reads only: no model built

        try:
            check_hf_weights(folder)
        except ConversionInputError as exc:
            out.append(Finding("error", MODEL_KEY, str(exc)))
    summary = f"model {folder} ({len(weights)} safetensors{', dist checkpoint' if use_dist else ''})"
    return out, summary if not out else None


def _prompt_limit(k: VerlKeys) -> tuple[list[Finding], Any]:
    """The prompt-length rule verl applies to the data (:class:`rlec.data.lengths.PromptLimit`, the model folder's
    tokenizer), or None where verl applies none (``data.filter_overlong_prompts`` off with a truncation other than
    ``error``: the user chose to truncate) or where a check should not load the tokenizer (``data.trust_remote_code``)."""
    if not k.filter_overlong_prompts and k.truncation != "error":
        return [], None
    limit = k.max_prompt_length
    if not isinstance(limit, int) or isinstance(limit, bool) or k.trust_remote_code:
        return [], None  # the number rules refuse a bad limit; a tokenizer of remote code is not run by a check
    from rlec.data.lengths import PromptLimit
    from rlec.io import held_back_console
    from rlec.models import load_tokenizer

    folder = os.path.expanduser(str(k.model_path))
    try:
        with held_back_console():
            tokenizer = load_tokenizer(folder)
    except Exception as exc:  # a tokenizer file transformers cannot read: what verl's workers would fail on
        return [Finding("error", MODEL_KEY, f"model folder {folder}: its tokenizer does not load ({type(exc).__name__}: "
                        f"{str(exc)[:200]})")], None
    from rlec.settings import plain

    return [], PromptLimit(tokenizer, limit, dict(plain(k.apply_chat_template_kwargs or {})))


def _parquet(key: str, path_text: str, prompt_limit: Any = None) -> tuple[list[Finding], str | None, int]:
    from rlec.data.contract import ContractError, check_parquet

    try:
        rows = check_parquet(path_text, prompt_limit)
    except FileNotFoundError as exc:
        return [Finding("error", key, str(exc))], None, 0
    except ContractError as exc:
        return [Finding("error", key, f"{exc} (the data contract: docs/data.md)")], None, 0
    except ValueError as exc:
        return [Finding("error", key, str(exc))], None, 0
    return [], f"{Path(path_text).name} {rows:,} rows", rows


def _encodable(k: VerlKeys) -> list[Finding]:
    """An error for the first prompt of the data files the model folder's tokenizer cannot encode.

    Only a compact-vocabulary tokenizer (:class:`rlec.compact_vocab.Coverage` not complete) can fail:
    a full byte-level one encodes any text, and is not read past its alphabet.
    """
    from rlec.compact_vocab import TOKENIZER_JSON, Coverage, check_texts

    tok = Path(os.path.expanduser(str(k.model_path))) / TOKENIZER_JSON
    if not tok.is_file():
        return []
    try:
        cov = Coverage(tok)
    except ValueError as exc:
        return [Finding("error", MODEL_KEY, str(exc))]
    if cov.complete:
        return []
    import pyarrow.parquet as pq

    for key, name in (("data.train_files", "train_files"), ("data.val_files", "val_files")):
        for path in _as_list(getattr(k, name)):
            prompts = pq.read_table(path, columns=["prompt"]).column("prompt").to_pylist()
            rows = ((f"{path} row {i} (prompt message {j})", str(m.get("content") or ""))
                    for i, messages in enumerate(prompts) for j, m in enumerate(messages or []))
            try:
                check_texts(cov, rows, name=str(tok.parent))
            except ValueError as exc:
                return [Finding("error", key, str(exc))]
    return []


def steps_findings(run: RunConfig, rows: int) -> list[Finding]:
    """Refuse a step count the train files cannot give: verl ends its loop after ``trainer.total_epochs``.

    verl's train loader drops the last partial batch (``drop_last=True``), so an epoch is
    ``rows // batch`` steps, ``batch`` = ``data.gen_batch_size`` or ``data.train_batch_size``;
    prompts over ``data.max_prompt_length`` that verl filters out make it fewer still, so this is
    a bound, not the exact count. An algorithm that serves its own prompts (RLVE) is not checked.

    Args:
        run: the composed trainer config, converted once by the caller.
        rows: the train files' rows, together.

    Returns:
        An error naming ``trainer.total_training_steps``, the steps the data holds and the
        ``trainer.total_epochs`` that would hold them (nothing when they fit or no step count is
        set), or one naming ``data.train_batch_size`` when the files hold less than one batch.
    """
    if registry.serves_prompts(run):
        return []
    return _steps(run.keys, rows)


def _steps(k: VerlKeys, rows: int) -> list[Finding]:
    """:func:`steps_findings` of a config whose algorithms serve no prompts of their own."""
    steps, epochs = k.total_training_steps, k.total_epochs
    batch = k.gen_batch_size or k.train_batch_size
    if not batch:
        return []
    batch, epochs = int(batch), int(epochs)
    per_epoch = rows // batch
    if per_epoch == 0:
        return [Finding("error", "data.train_batch_size", f"{batch} prompts a step, but data.train_files hold {rows:,} rows: "
                        "verl's loader drops a partial batch, so no step would run")]
    if steps in (None, "", "null") or int(steps) <= per_epoch * epochs:
        return []
    steps = int(steps)
    need = -(-steps // per_epoch)
    return [Finding("error", "trainer.total_training_steps", f"{steps} steps, but trainer.total_epochs={epochs} pass(es) over "
                    f"data.train_files give {per_epoch * epochs} ({rows:,} rows / {batch} prompts a step = {per_epoch} a pass, "
                    f"the last partial batch dropped) and verl's loop ends after its epochs, its LR schedule planned for "
                    f"{steps}: set trainer.total_epochs={need} (TOTAL_EPOCHS={need}) or at most {per_epoch * epochs} steps")]


def checkpoint_folder_findings(run: RunConfig) -> tuple[list[Finding], str | None]:
    """Check that the checkpoint folder (``trainer.default_local_dir``) can be written, or created, without writing.

    The nearest existing folder at or above it must be a folder in which a file can be created: probed with
    a temporary file (removed at once), so it also holds for root, whom permission bits do not stop, and for
    a read-only mount.

    Returns:
        ``([], summary)`` when it can be written; ``([error naming the key, the folder and why], None)`` when
        it or a folder above it is a file, or it cannot be written.
    """
    return _checkpoint_folder(run.keys)


def _checkpoint_folder(k: VerlKeys) -> tuple[list[Finding], str | None]:
    """:func:`checkpoint_folder_findings` of the config's keys."""
    folder = Path(os.path.expanduser(str(k.default_local_dir or "")))
    probe = folder
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir():
        return [Finding("error", CHECKPOINT_KEY, f"{folder}: {probe} is not a folder")], None
    try:
        with tempfile.TemporaryFile(dir=probe):
            pass
    except OSError as exc:
        what = "is not writable" if probe == folder else f"cannot be created: {probe} is not writable"
        return [Finding("error", CHECKPOINT_KEY, f"{folder}: {what} ({exc.strerror or exc})")], None
    return [], f"checkpoints {folder} ({'writable' if probe == folder else 'will be created'})"


def path_findings(run: RunConfig) -> tuple[list[Finding], list[str]]:
    """Check the model folder, the parquet files and the checkpoint folder of a composed config.

    Args:
        run: the composed trainer config, converted once by the caller.

    Returns:
        ``(findings, summaries)``: an error per problem, naming the key, the path and what was
        expected; a short description of each path that passed. Never writes anything.
    """
    findings: list[Finding] = []
    summaries: list[str] = []
    k, serves = run.keys, registry.serves_prompts(run)  # once
    checks = [_model(k)]
    limit_findings, prompt_limit = _prompt_limit(k) if not checks[0][0] else ([], None)
    checks.append((limit_findings, None))
    for key, name in (("data.train_files", "train_files"), ("data.val_files", "val_files")):
        files = _as_list(getattr(k, name))
        # an algorithm with prompts of its own (RLVE's environment rows) may train on those alone
        if not files and not (key == "data.train_files" and serves):
            checks.append(([Finding("error", key, "no file given")], None))
        parquets = [_parquet(key, f, prompt_limit) for f in files]
        checks += [(found, summary) for found, summary, _ in parquets]
        if key == "data.train_files" and files and not any(found for found, *_ in parquets):
            checks.append(([] if serves else _steps(k, sum(rows for *_, rows in parquets)), None))
    if not any(found for found, _ in checks):  # the model and the files passed: every prompt encodable
        checks.append((_encodable(k), None))
    checks.append(_checkpoint_folder(k))
    for found, summary in checks:
        findings += found
        if summary:
            summaries.append(summary)
    return findings, summaries
