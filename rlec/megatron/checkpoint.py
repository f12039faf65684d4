"""Megatron dist checkpoints that verl's Megatron engine loads, plus optimizer state for resume.

Layout (what verl 0.9.1 reads with ``use_dist_checkpointing=True, dist_checkpointing_path=DIR``):
``DIR`` itself is a ``megatron.core.dist_checkpointing`` folder (``metadata.json``, ``common.pt``,
``.metadata``, ``__*_*.distcp``) whose top-level sharded keys are the model's own
``sharded_state_dict(prefix="")``: verl calls
``dist_checkpointing.load(unwrap_model(model).sharded_state_dict(prefix=""), DIR,
strict=StrictHandling.ASSUME_OK_UNEXPECTED)`` (``verl/utils/model.py:load_mcore_dist_weights``),
exactly what verl's own ``scripts/converter_hf_to_mcore.py`` writes with
``dist_checkpointing.save(model.sharded_state_dict(), DIR)``.

Sharded keys are layout-free (``decoder.layers.self_attention.linear_qkv.weight`` with the layer
and expert index as sharding axes), so a checkpoint written at one TP/EP/PP loads at another.

Written on CPU (local layer spec), the checkpoint also carries what a TE model asks for and the
local model lacks: ``_extra_state`` entries (``None``, i.e. no FP8 metadata) of TE's separate
norms (``q_layernorm``, ``k_layernorm``, the MoE ``pre_mlp_layernorm``, ``final_layernorm``).
Without them ``dist_checkpointing.load`` on verl's TE model fails with ``Missing key in
checkpoint state_dict``. Keys the loading model does not ask for are ignored, so the same folder
loads into both specs. A resume checkpoint adds ``optimizer`` and ``rlec`` (step, user state)
keys beside the model's, so it is still a valid ``dist_checkpointing_path`` for verl.

Interrupted writes. A checkpoint is written into a hidden ``.<name>.tmp-*`` folder, held under a
lock (:func:`rlec.io.claim_temp_dir`), and renamed when complete. Megatron's writer
(``FileSystemWriterAsync.write_preloaded_data_multiproc``) forks one process per write bucket and
waits for them; killed with ``kill -9`` the parent took no child with it, and the children lived
on (issue 18 measured 0.5-1.4 GB each, never exiting) beside the partial folder. Here every
process forked during a write is tied to its parent (:func:`writers_die_with_parent`: Linux
``PR_SET_PDEATHSIG``, plus an explicit kill when the write raises, e.g. on Ctrl-C), and each save
first removes the partial folders of killed writers next to its destination
(:func:`remove_stale_partials`; also callable at a job's start).

Damaged checkpoints. Once every file is written, rank 0 records each file's size and SHA-256
in ``rlec_manifest.json`` (:func:`rlec.io.write_manifest`), before the folder is renamed into
place and before any "latest" tracker names it; :func:`load_dist_checkpoint` checks it first
(:func:`rlec.io.verify_manifest`), so a shard damaged on disk (issue 26: 1 MiB overwritten in
``__0_0.distcp`` resumed silently and trained on NaN) is refused instead of read.
"""

from __future__ import annotations

import json
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator


from rlec.io import (MANIFEST_FILE, previous_checkpoint_bytes, ManifestError, claim_temp_dir, free_bytes, no_space_error, remove_stale_temps, replace_dir, verify_manifest,
                     write_manifest)
from rlec.megatron.compat import in_process_checkpoint_results, writers_die_with_parent
from rlec.megatron.model import MegatronModel
from rlec.megatron.parallel import barrier, broadcast_object, rank

METADATA_FILE = "rlec_checkpoint.json"
_TE_SEPARATE_NORMS = ("self_attention.q_layernorm.weight", "self_attention.k_layernorm.weight", "pre_mlp_layernorm.weight")


def model_sharded_state_dict(policy: MegatronModel, *, te_extras: bool = True) -> dict[str, Any]:
    """The model's sharded state dict in the layout verl's TE model loads (see module doc).

    Args:
        policy: the model.
        te_extras: on the CPU (local-spec) path, add the ``_extra_state`` entries a TE model
            asks for (saving); ``False`` gives exactly what the local model holds (loading).

    Raises:
        NotImplementedError: virtual pipeline stages (more than one model chunk).
    """
    from megatron.core.dist_checkpointing.mapping import ShardedObject, ShardedTensor

    if len(policy.chunks) != 1:
        raise NotImplementedError("dist checkpoints of virtual-pipeline models (several chunks) are not supported")
    state = policy.unwrapped()[0].sharded_state_dict(prefix="")
    if policy.use_te or not te_extras:
        return state
    extra = {}
    for name, sh in state.items():
        if not isinstance(sh, ShardedTensor):
            continue
        if any(sh.key.endswith(suffix) for suffix in _TE_SEPARATE_NORMS) or sh.key == "decoder.final_layernorm.weight":
            key = sh.key[: -len("weight")] + "_extra_state"
            n = sh.prepend_axis_num
            shape, offset = (sh.global_shape[:n], sh.global_offset[:n]) if n else ((1,), (0,))
            extra[name[: -len("weight")] + "_extra_state"] = ShardedObject(key, None, shape, offset, replica_id=sh.replica_id)
    state.update(extra)
    return state


def remove_stale_partials(folder: str | Path) -> tuple[list[Path], list[Path]]:
    """Remove the partial checkpoint folders (``.<name>.tmp-*``) that killed writers left in ``folder``.

    Only folders whose writer is gone are removed (their lock can be taken); a write in progress
    is left alone; a partial folder without a lock file (an older rlec) is reported with the
    command to remove it. Rank 0 only; every save calls it for its destination's folder, and a
    job may call it at start on its checkpoint folder.

    Returns:
        (removed folders, reported folders); both empty on ranks other than 0.
    """
    if rank() != 0:
        return [], []
    return remove_stale_temps(folder)


@contextmanager
def atomic_output(path: str | Path, *, overwrite: bool = False) -> Iterator[Path]:
    """Collective context: yields a fresh ``.<name>.tmp-*`` folder, renamed to ``path`` on success.

    On an exception the temporary folder is removed and ``path`` is left untouched, so no
    half-written checkpoint is ever visible under ``path``. Rank 0 first removes partial folders
    that killed writers left next to ``path`` (:func:`remove_stale_partials`), and holds the new
    folder's lock until it is renamed or removed, so a later start can tell it from a live write.

    Raises:
        FileExistsError: ``path`` exists and ``overwrite`` is false (checked before writing).
    """
    path = Path(path)
    if path.exists() and not overwrite:
        raise FileExistsError(f"{path} exists (pass overwrite=True / --overwrite to replace it)")
    lock, name = None, ""
    if rank() == 0:
        path.parent.mkdir(parents=True, exist_ok=True)
        remove_stale_partials(path.parent)
        tmp, lock = claim_temp_dir(path)
        name = str(tmp)
    tmp = Path(broadcast_object(name))
    barrier()
    try:
        yield tmp
        barrier()
        if rank() == 0:
            replace_dir(tmp, path)  # the old checkpoint goes only once the new one is in place
        barrier()
    finally:
        if lock is not None:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
            lock.release()



def write_dist_checkpoint(
    policy: MegatronModel, folder: str | Path, *, optimizer: Any = None, step: int | None = None, user_state: dict[str, Any] | None = None
) -> None:
    """Write the model (and optimizer) sharded state into an existing empty ``folder`` (collective).

    Prefer :func:`save_dist_checkpoint`, which makes the write atomic.
    """
    from megatron.core import dist_checkpointing

    state = model_sharded_state_dict(policy)
    if optimizer is not None:
        state["optimizer"] = optimizer.sharded_state_dict(state)
    state["rlec"] = {"step": step, "user_state": user_state or {}}
    with in_process_checkpoint_results(), writers_die_with_parent():
        dist_checkpointing.save(state, str(folder))


def write_metadata(folder: str | Path, metadata: dict[str, Any]) -> None:
    """Write ``rlec_checkpoint.json`` (rank 0): JSON, sorted keys, non-JSON values as strings."""
    if rank() == 0:
        (Path(folder) / METADATA_FILE).write_text(json.dumps(metadata, indent=2, sort_keys=True, default=str) + "\n")


def checkpoint_bytes(policy: Any, optimizer: Any, path: str | Path) -> int | None:
    """A lower bound of the bytes a checkpoint at ``path`` needs: the newest sibling ``global_step_<N>``'s
    size (the same model and optimizer), else this rank's parameters (x 3 with an optimizer: Adam's two
    moments); None when neither can be told."""
    previous = previous_checkpoint_bytes(path)
    if previous is not None:
        return previous
    try:
        params = sum(int(p.numel()) * int(p.element_size()) for p in policy.parameters())
    except Exception:  # noqa: BLE001 - an estimate only
        return None
    return params * (3 if optimizer is not None else 1)


def save_dist_checkpoint(
    policy: MegatronModel,
    path: str | Path,
    *,
    optimizer: Any = None,
    step: int | None = None,
    user_state: dict[str, Any] | None = None,
    metadata: dict[str, Any] | None = None,
    overwrite: bool = False,
) -> Path:
    """Write a dist checkpoint atomically: into ``.<name>.tmp-*``, renamed when complete.

    Every rank calls this. The folder is a valid verl ``dist_checkpointing_path``. Killing the
    job at any moment leaves no writer process behind, and the partial folder is removed by the
    next save into the same folder (or by :func:`remove_stale_partials` at the next start): see
    the module docstring.

    Args:
        policy: the model.
        path: destination folder (on a file system every rank sees).
        optimizer: a Megatron optimizer to save too (for resume), or ``None``.
        step: training step recorded under ``rlec.step``.
        user_state: small picklable dict saved as-is (data-loader position, RNG seeds...).
        metadata: JSON-serialisable dict written to ``rlec_checkpoint.json`` (rank 0).
        overwrite: replace an existing ``path``.

    Returns:
        ``Path(path)``, holding ``rlec_manifest.json`` (every file's size and SHA-256).

    Raises:
        FileExistsError: ``path`` exists and ``overwrite`` is false (checked before writing).
        OSError: a write failed; ``path`` is untouched and the partial folder removed. A full disk
            is ``errno.ENOSPC`` naming ``path`` (:func:`rlec.io.no_space_error`), whatever
            torch's or Megatron's writer raised (kept as the cause).
    """
    needed, free_before = checkpoint_bytes(policy, optimizer, path), free_bytes(Path(path).parent)
    with atomic_output(path, overwrite=overwrite) as tmp:
        try:
            write_dist_checkpoint(policy, tmp, optimizer=optimizer, step=step, user_state=user_state)
            write_metadata(tmp, metadata or {})
            barrier()  # every rank's shards are on disk
            if rank() == 0:
                write_manifest(tmp)
        except Exception as exc:  # noqa: BLE001 - a full disk is told apart while the partial folder still holds its space
            full = no_space_error(exc, path, needed=needed, free_before=free_before)
            if full is not None:
                raise full from exc
            raise
    return Path(path)


def check_manifest(path: str | Path, *, required: bool) -> None:
    """Verify a checkpoint folder against its manifest on rank 0 and raise the verdict on every rank (collective).

    Args:
        path: the checkpoint folder.
        required: a missing manifest is damage (a checkpoint rlec wrote); ``False`` accepts a
            folder without one (written by another tool: verl's converter).

    Raises:
        ManifestError: the folder does not match its manifest (or has none and ``required``).
    """
    problems: list[str] = []
    if rank() == 0 and (required or (Path(path) / MANIFEST_FILE).exists()):
        try:
            verify_manifest(path)
        except ManifestError as exc:
            problems = exc.problems
    problems = broadcast_object(problems)
    if problems:
        raise ManifestError(Path(path), problems)


def load_dist_checkpoint(policy: MegatronModel, path: str | Path, *, optimizer: Any = None) -> dict[str, Any]:
    """Load model weights (and optimizer state) from a dist checkpoint; every rank calls this.

    Loads any checkpoint with the model's keys: one from this module, from
    ``tools/convert_hf_to_mcore.py`` or from verl's converter, at any TP/EP/PP. A folder with
    ``rlec_manifest.json`` is verified against it before anything is read (:func:`check_manifest`).

    Args:
        policy: a model built with the same architecture (any layout).
        path: the checkpoint folder.
        optimizer: restore its state too (the checkpoint must hold one).

    Returns:
        ``{"step": int | None, "user_state": dict}`` as saved (empty values for checkpoints
        written by other tools).

    Raises:
        FileNotFoundError: ``path`` is not a dist checkpoint (no ``metadata.json``).
        ManifestError: a file differs from the folder's manifest (damaged on disk).
        KeyError: ``optimizer`` given but the checkpoint has no optimizer state.
    """
    from megatron.core import dist_checkpointing
    from megatron.core.dist_checkpointing.serialization import StrictHandling

    path = Path(path)
    if not (path / "metadata.json").is_file():
        raise FileNotFoundError(f"{path}: not a Megatron dist checkpoint (no metadata.json)")
    check_manifest(path, required=False)
    state = model_sharded_state_dict(policy, te_extras=False)
    if optimizer is not None:
        if "optimizer" not in dist_checkpointing.load_common_state_dict(str(path)):
            raise KeyError(f"{path}: the checkpoint holds no optimizer state (a converted checkpoint has weights only)")
        state["optimizer"] = optimizer.sharded_state_dict(state, is_loading=True)
    loaded = dist_checkpointing.load(state, str(path), strict=StrictHandling.ASSUME_OK_UNEXPECTED)
    if optimizer is not None:
        optimizer.load_state_dict(loaded["optimizer"])
    common = dist_checkpointing.load_common_state_dict(str(path))
    rlec_state = common.get("rlec", {}) if isinstance(common, dict) else {}
    return {"step": rlec_state.get("step"), "user_state": rlec_state.get("user_state", {})}

