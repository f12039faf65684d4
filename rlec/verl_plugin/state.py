"""Algorithm state saved beside verl's checkpoint: one JSON file per algorithm in ``global_step_<N>/``.

verl 0.9.1's V1 trainer saves the actor, the critic and the dataloader (``data.pt``) into
``<trainer.default_local_dir>/global_step_<N>/`` and, on resume, sets ``global_steps = N`` from
the folder it picks (``trainer.resume_mode``: ``auto`` = the latest under ``default_local_dir``,
``resume_path`` = ``trainer.resume_from_path``). rlec's trainer mixins write their state there
too, atomically and *before* verl writes ``latest_checkpointed_iteration.txt``, so a checkpoint
that verl resumes from always holds it.
"""

from __future__ import annotations

import json
import logging
import os
from typing import TYPE_CHECKING, Any

from rlec.io import (ManifestError, atomic_write_text, free_bytes, no_space_error, previous_checkpoint_bytes, step_folders,
                     verify_manifest, write_manifest)
from rlec.metrics_log import METRICS_FILE, read_metrics
from rlec.config_base import TRACKER

if TYPE_CHECKING:  # verl's step returns TransferQueue's batch handle; this module imports neither at run time
    from transfer_queue import KVBatchMeta

    from rlec.run_config import RunConfig

logger = logging.getLogger(__name__)


__all__ = ["CheckpointIntegrityMixin", "intact_checkpoint", "load_state", "resumed_folder", "save_state", "saving_folder"]


def saving_folder(config: Any, global_steps: int) -> str:
    """The folder verl's ``_save_checkpoint`` writes step ``global_steps`` to."""
    return os.path.join(config.trainer.default_local_dir, f"global_step_{global_steps}")


def resumed_folder(config: Any, global_steps: int) -> str | None:
    """The folder verl's ``_load_checkpoint`` resumed from (None when it started from scratch)."""
    if global_steps <= 0 or config.trainer.resume_mode == "disable":
        return None
    if config.trainer.resume_mode == "resume_path":
        folder = str(config.trainer.resume_from_path)
    else:
        folder = saving_folder(config, global_steps)
    return folder if os.path.isabs(folder) else os.path.join(os.getcwd(), folder)


def save_state(folder: str, name: str, state: dict[str, Any]) -> str:
    """Write ``state`` as ``<folder>/<name>`` (JSON, atomic); returns the path."""
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, name)
    atomic_write_text(path, json.dumps(state))
    return path


def load_state(folder: str | None, name: str) -> dict[str, Any] | None:
    """``<folder>/<name>`` as a dict; None (with a warning) when the checkpoint has no such file.

    Raises:
        ValueError: the file is not valid JSON (names the file).
    """
    if folder is None:
        return None
    path = os.path.join(folder, name)
    if not os.path.exists(path):
        logger.warning("%s: missing (a checkpoint written without this algorithm); its state starts fresh", path)
        return None
    try:
        with open(path) as f:
            return json.load(f)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not valid JSON ({exc})") from None


def _tracked_step(tracker: str) -> tuple[int | None, str]:
    """The step verl's tracker names (None when it holds no step: empty, ``two``, a partial write) and its text."""
    try:
        with open(tracker, "rb") as f:
            text = f.read(64).decode("utf-8", "replace").strip()
    except OSError as exc:
        return None, f"<unreadable: {exc}>"
    return (int(text) if text.isascii() and text.isdigit() else None), text


def _last_logged_step(root: str) -> int | None:
    """The newest step ``<root>/metrics.jsonl`` holds a complete line for (0: none; None: no such file, a run without
    rlec's metrics backend)."""
    path = os.path.join(root, METRICS_FILE)
    if not os.path.isfile(path):
        return None
    last = 0
    for record in read_metrics(path):
        try:
            last = max(last, int(record["step"]))
        except (KeyError, TypeError, ValueError):
            continue
    return last


def intact_checkpoint(root: str, verify: bool = True) -> int | None:
    """Make verl's resume pick the newest checkpoint under ``root`` whose files match its manifest.

    The folder ``latest_checkpointed_iteration.txt`` names is checked with
    :func:`rlec.io.verify_manifest` (``verify``; otherwise the folder only has to exist); when it is
    damaged (a changed, truncated or missing file, or no manifest because its save did not finish)
    or missing, each older ``global_step_<N>`` is tried, newest first, and the tracker is rewritten
    (atomically) to the first intact one, with a warning naming the damage. A tracker that names no
    step (empty, or ``two``: verl writes it in place, so a kill mid-write leaves it so) is damaged
    too: every ``global_step_<N>`` is a candidate, newest first, with a warning. verl itself would
    raise ``ValueError`` on it, or, for a missing folder, silently train from step 0.

    A checkpoint newer than every line of ``<root>/metrics.jsonl`` finished its save but not its step:
    verl's ``fit`` logs a step's metrics only after saving it, so a launch killed in between (its Ray
    trainer outliving a SIGKILLed launcher for a moment) leaves step k saved and tracked with no
    line. Resuming it would lose that line for good (a rerun "resumed after step 2" with step 2
    missing from the file, seen in CI), so such checkpoints are skipped, with a warning, for the
    newest intact one at or before the last logged step: the steps after it are trained again from
    the same data order (on CPU the same draws and weights too; with ``save_freq`` n up to n steps,
    whose lines are rewritten). With none (a single kept checkpoint, ``max_ckpt_to_keep=1``), the
    newest unlogged one is resumed and its missing line named. Returns the step resumed from, or
    None when there is no tracker (a fresh run).

    Raises:
        ManifestError: no checkpoint under ``root`` is intact (names the newest one's damage).
    """
    tracker = os.path.join(root, TRACKER)
    if not os.path.exists(tracker):
        return None
    latest, text = _tracked_step(tracker)
    if latest is None:
        logger.warning("%s holds %r, not a step (a save killed while verl wrote it): resuming from the newest intact "
                       "global_step_<N> instead", tracker, text)
    first_error: ManifestError | None = None
    last_logged = _last_logged_step(root)
    unlogged: list[int] = []  # intact checkpoints newer than the last logged step, newest first
    for step, path in step_folders(root):
        folder = str(path)
        if latest is not None and step > latest:
            continue  # newer than the tracker: a save that did not finish
        try:
            if verify:
                verify_manifest(folder)
        except ManifestError as exc:
            first_error = first_error or exc
            logger.warning("checkpoint %s is damaged and will not be resumed: %s", folder, exc)
            continue
        if last_logged is not None and step > last_logged:
            unlogged.append(step)
            continue
        if unlogged:
            again = f"step {step + 1} is" if step + 1 == unlogged[0] else f"steps {step + 1}-{unlogged[0]} are"
            logger.warning("checkpoint global_step_%d was saved but its step's metrics were never logged (%s ends at "
                           "step %d: the launch was killed between verl's save and its log): resuming from %s, so %s "
                           "trained again", unlogged[0], METRICS_FILE, last_logged, folder, again)
        elif step != latest:
            named = f"global_step_{latest}" if latest is not None else f"the tracker's {text!r}"
            logger.warning("resuming from %s instead of %s (damaged or missing, see above)", folder, named)
        if step != latest:
            atomic_write_text(tracker, str(step))
        return step
    if unlogged:  # nothing older is intact: resume the newest unlogged one, its line stays missing
        logger.warning("checkpoint global_step_%d was saved but its step's metrics were never logged, and no intact "
                       "checkpoint at or before step %d is left to train it again from: resuming it; step %d's line "
                       "stays missing from %s", unlogged[0], last_logged, unlogged[0], METRICS_FILE)
        if unlogged[0] != latest:
            atomic_write_text(tracker, str(unlogged[0]))
        return unlogged[0]
    if first_error is not None:
        raise first_error
    missing = f"global_step_{latest}" if latest is not None else f"global_step_<N> (the tracker holds {text!r})"
    raise ManifestError(os.path.join(root, missing), ["the tracked checkpoint folder is missing, and no older "
                                                      "global_step_<N> is there to resume"])


def _remove_partial(folder: str, root: str) -> None:
    """Remove the checkpoint folder a failed save left, unless verl's tracker names it (best effort: a file
    another rank still writes on a shared filesystem may stay; a rerun overwrites the folder)."""
    import shutil

    tracked, _ = _tracked_step(os.path.join(root, TRACKER))
    if tracked is not None and os.path.basename(os.path.normpath(folder)) == f"global_step_{tracked}":
        return
    shutil.rmtree(folder, ignore_errors=True)


class CheckpointIntegrityMixin:
    """A manifest (size + SHA-256 of every file, :func:`rlec.io.write_manifest`) in every verl checkpoint,
    checked before resuming (:func:`intact_checkpoint`): a damaged checkpoint is never trained on.

    A save that fails on a full disk is one ``OSError`` (``ENOSPC``, naming the step's folder,
    :func:`rlec.io.no_space_error`, also when the writer lost the errno or freed its partial shard);
    verl moves its tracker only after a complete save, so the partial folder is never resumed (it is
    newer than the tracker) and a rerun after freeing space resumes the previous checkpoint. The partial
    folder is removed first (never the tracked one), which gives the disk back the room to log the finished
    step's metrics (measured on a 700 MB tmpfs: step 2's save stopped at 88 MB of 613, and with the
    partial folder in place its metrics line could not be written either).

    verl 0.9.1's ``_save_checkpoint`` writes the tracker itself before returning, so the manifest is
    written right after it (synchronous saves; verl's ``async_save`` is refused by the early rule set, before the run): a crash in between
    leaves a tracked folder without a manifest, which the next resume treats as damaged and skips.
    Outermost in rlec's trainers, so the manifest covers the algorithm state files the other mixins write.
    ``rlec.checkpoint.manifest=false`` turns both off (one read of the checkpoint per save and resume).
    """

    rlec_run: RunConfig  # the trainer's config, converted once at construction (rlec.verl_plugin.trainers.AlgorithmsMixin)
    _rlec_step_metrics: dict | None = None

    def step(self, metrics: dict, timing_raw: dict) -> KVBatchMeta:
        """verl's step; keeps its ``metrics`` dict (verl's ``fit`` logs it only after the save) for a failed save."""
        self._rlec_step_metrics = metrics
        return super().step(metrics, timing_raw)

    def _log_finished_step(self) -> None:
        """Log the step's metrics so far (a save failed before verl's ``fit`` logs them); best effort on a full disk."""
        logger_ = getattr(self, "logger", None)
        if self._rlec_step_metrics is None or logger_ is None:
            return
        try:
            logger_.log(data=dict(self._rlec_step_metrics), step=self.global_steps)
        except Exception as exc:  # noqa: BLE001 - the same full disk may refuse the log too
            logger.warning("step %s: its metrics could not be logged either (%s)", self.global_steps, exc)

    def _manifest_on(self) -> bool:
        return self.rlec_run.rlec.checkpoint.manifest

    def _save_checkpoint(self):
        folder = saving_folder(self.config, self.global_steps)
        needed, free_before = previous_checkpoint_bytes(folder), free_bytes(os.path.dirname(folder) or ".")
        try:
            out = super()._save_checkpoint()
        except Exception as exc:  # a full disk: one error naming ENOSPC and the folder; verl's tracker is unmoved
            full = no_space_error(exc, folder, needed=needed, free_before=free_before)
            if full is not None:
                _remove_partial(folder, self.config.trainer.default_local_dir)
                self._log_finished_step()
                raise full from exc
            raise
        if not self._manifest_on():
            return out
        write_manifest(saving_folder(self.config, self.global_steps))
        return out

    def _load_checkpoint(self):
        if self.config.trainer.resume_mode == "auto":  # a damaged tracker is repaired with or without the manifest
            root = self.config.trainer.default_local_dir
            intact_checkpoint(root if os.path.isabs(root) else os.path.join(os.getcwd(), root), verify=self._manifest_on())
        elif self.config.trainer.resume_mode == "resume_path" and self._manifest_on():
            verify_manifest(str(self.config.trainer.resume_from_path))
        return super()._load_checkpoint()
