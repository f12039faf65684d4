"""The launcher's training entry: verl's own ``main_ppo``, with a full disk or a deliberate stop as one line and exit 2.

``python -m rlec.cluster.main_ppo [hydra arguments]`` takes exactly what ``python -m
verl.trainer.main_ppo`` takes (``--config-path``, ``--config-name``, overrides, ``--cfg job``...)
and runs verl's ``main`` body unchanged under the same Hydra settings (verl's config folder, config
name ``ppo_trainer``, the job name ``main_ppo``, ``version_base=None``). The one difference: when
the run stops because a checkpoint could not be written on a full disk (rlec's
:class:`~rlec.verl_plugin.state.CheckpointIntegrityMixin` raises ``OSError(ENOSPC)`` naming
``global_step_N`` inside Ray's TaskRunner; the driver gets it as a ``ray.exceptions.RayTaskError``),
it prints one line naming "No space left on device", the folder and the checkpoint a rerun resumes,
and exits 2; a run rlec stops on purpose (a non-finite update, :mod:`rlec.verl_plugin.update_guard`; a
train-inference mismatch above its stop level, :mod:`rlec.verl_plugin.mismatch`) is one line with that error's
message and exit 2 too (:class:`RunStopError`). Any other error propagates unchanged (Hydra prints it and exits 1,
as verl does).

Detection needs neither Ray nor verl (:func:`full_disk_error`), so it is tested in-process.
"""

from __future__ import annotations

import errno
import os
import re
import sys
from typing import Any, Callable
from rlec.config_base import TRACKER
from rlec.io import error_chain

__all__ = ["RunStopError", "RunStopped", "full_disk_error", "full_disk_message", "main", "stop_message"]


class RunStopError(RuntimeError):
    """The base of rlec's errors that stop a run on purpose inside verl's TaskRunner (a non-finite update,
    :class:`rlec.verl_plugin.update_guard.NonFiniteUpdateError`; a mismatch above its stop level,
    :class:`rlec.verl_plugin.mismatch.MismatchError`): the driver prints its message as one line and exits 2."""


class RunStopped(SystemExit):
    """Exit status 2 after a full disk or a :class:`RunStopError`; :attr:`message` is the one line :func:`main`
    prints once the console is back (``make run`` sends stderr to ``verl.log`` during the run, which sits on the full
    disk: printing there raised ``OSError: [Errno 28]`` and the run ended with a traceback and status 1)."""

    def __init__(self, message: str) -> None:
        super().__init__(2)
        self.message = message

_ENOSPC_TEXT = re.compile(r"\[Errno %d\] No space left on device[^\n]*?: '([^'\n]+)'" % errno.ENOSPC)


def full_disk_error(exc: BaseException) -> OSError | None:
    """The ``OSError(ENOSPC)`` behind ``exc``, or None when ``exc`` does not come from a full disk.

    Looks through ``exc``, the ``cause`` of Ray's ``RayTaskError`` (also its dual
    ``RayTaskError(OSError)`` instance, whose own ``errno`` is None) and the ``__cause__`` /
    ``__context__`` chain. A cause Ray could not deserialize leaves only the remote traceback's
    text: an ``[Errno 28] No space left on device...: '<path>'`` line there is taken too.

    Args:
        exc: the exception that reached the driver.

    Returns:
        an ``OSError`` with ``errno.ENOSPC`` (its ``filename`` names the folder when known), or None.
    """
    chain = error_chain(exc)
    for error in chain:
        if isinstance(error, OSError) and error.errno == errno.ENOSPC:
            return error
    # a cause Ray could not deserialize leaves only the remote traceback's text
    match = _ENOSPC_TEXT.search("\n".join(f"{e}\n{getattr(e, 'traceback_str', '') or ''}" for e in chain))
    if match:
        return OSError(errno.ENOSPC, "No space left on device", match.group(1))
    return None


def full_disk_message(full: OSError, prog: str = "rlec.cluster.main_ppo") -> str:
    """The one line printed for a full disk: the error (ENOSPC and the folder) and the checkpoint a rerun resumes."""
    latest = "none"
    if full.filename:
        try:
            with open(os.path.join(os.path.dirname(os.fspath(full.filename)), TRACKER)) as fh:
                latest = f"global_step_{int(fh.read().strip())}"
        except (OSError, ValueError):
            pass
    return (f"{prog}: error: a checkpoint was not saved (the step's metrics were logged, where the disk allowed): {full}; "
            f"the latest checkpoint is still {latest}: free space, then rerun the same command to resume")


def stop_message(exc: BaseException, prog: str = "rlec.cluster.main_ppo") -> str | None:
    """The one line of a deliberate stop (a :class:`RunStopError`) anywhere in ``exc``'s chain (Ray's
    ``RayTaskError.cause`` included), or None."""
    for error in error_chain(exc):
        # the remote error itself: Ray's dual RayTaskError(<cause class>) is an instance too, but prints a traceback
        if isinstance(error, RunStopError) and not hasattr(error, "cause"):
            return f"{prog}: error: {error}"
    return None


def _run_verl(config: Any) -> None:
    """verl's ``main`` body (``verl.trainer.main_ppo.main`` without its Hydra wrapper); a full disk or a deliberate
    stop (:func:`stop_message`) exits 2 with one line."""
    from verl.trainer import main_ppo

    try:
        main_ppo.main.__wrapped__(config)
    except Exception as exc:
        full = full_disk_error(exc)
        if full is not None:
            raise RunStopped(full_disk_message(full)) from None
        stopped = stop_message(exc)
        if stopped is not None:
            raise RunStopped(stopped) from None
        raise


def main(wrap: Callable[[Any, Callable[[Any], None]], None] | None = None) -> None:
    """CLI: ``python -m rlec.cluster.main_ppo [hydra arguments]`` (the arguments of ``verl.trainer.main_ppo``).

    Args:
        wrap: called as ``wrap(config, body)`` instead of ``body(config)`` (``body`` = verl's ``main`` body with
            the full-disk exit), by a caller that adds what happens around the run in this driver process
            (:func:`rlec.verl_report.run_with_report`, ``make run``'s console and final evaluation).
    """
    import hydra
    from verl.trainer import main_ppo

    if not hasattr(main_ppo.main, "__wrapped__"):  # probe: Hydra's functools.wraps keeps verl's undecorated main
        raise RuntimeError("verl.trainer.main_ppo.main has no __wrapped__ (not a @hydra.main function any more): "
                           "rlec.cluster.main_ppo cannot run verl's main body unchanged")

    def task(config: Any) -> None:
        if wrap is None:
            _run_verl(config)
        else:
            wrap(config, _run_verl)

    # the file is main_ppo.py, so Hydra's job name (its log file, hydra.job.name) is verl's
    config_dir = os.path.join(os.path.dirname(os.path.abspath(main_ppo.__file__)), "config")
    try:
        hydra.main(config_path=config_dir, config_name="ppo_trainer", version_base=None)(task)()
    except RunStopped as exc:  # Hydra lets a SystemExit through; the console is this process's own again here
        try:
            print(exc.message, file=sys.stderr, flush=True)
        except OSError:  # stderr itself on the full disk: the status still says it
            pass
        raise SystemExit(2) from None


if __name__ == "__main__":
    main()
