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
message and exit 2 too (:class:`RunStopError`). Ctrl-C (SIGINT to the launcher's process group) stops the Ray
cluster the driver started (Ray's processes block SIGINT) and prints one line, the step it was in and the
checkpoint a rerun of the same command resumes from (:func:`interrupted_message`), exit status 130. Any other
error propagates unchanged (Hydra prints it and exits 1, as verl does).

Detection needs neither Ray nor verl (:func:`full_disk_error`), so it is tested in-process.

The launcher (``tools/run_megatron_rlec.sh``) starts it as ``python -m rlec.cluster.main_ppo --launch-check
--launch-dir DIR [--launch-record TEXT] [--launch-note LINE] [config_check options] -- [hydra arguments]``: the launcher's checks
(:func:`rlec.cluster.config_check.main`, the same overrides) run first in this process, and refuse before
anything is written; once they pass, ``DIR`` holds the resolved config (``config.yaml``), ``git.txt``
(``TEXT``) and from then on ``train.log``, a copy of this process's console (``tee -a``). One process for
the check and verl's driver: the second import of verl, Megatron and Hydra (about 8 CPU-seconds) saved.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any, Callable, Sequence
from rlec.config_base import TRACKER
from rlec.io import error_chain, step_folders
from rlec.machine import write_environment
from rlec.metrics_log import METRICS_FILE, read_metrics
from rlec.run_stop import RunStopError

__all__ = ["INTERRUPTED", "RunStopError", "RunStopped", "full_disk_error", "full_disk_message", "interrupted_message",
           "launch_check", "main", "stop_message"]


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

    from rlec.megatron.compat import ray_start_retried, ray_start_timeout_needed

    retried = ray_start_retried(say=lambda line: print(f"rlec: {line}", file=sys.stderr, flush=True)) \
        if ray_start_timeout_needed() else contextlib.nullcontext()
    try:
        with retried:  # verl calls ray.init once, when Ray is not started yet
            main_ppo.main.__wrapped__(config)
    except Exception as exc:
        full = full_disk_error(exc)
        if full is not None:
            raise RunStopped(full_disk_message(full)) from None
        stopped = stop_message(exc)
        if stopped is not None:
            raise RunStopped(stopped) from None
        raise


INTERRUPTED = 130  # the exit status of a command stopped by Ctrl-C (128 + SIGINT), as a shell reports it


def interrupted_message(out_dir: str | os.PathLike[str] | None) -> str:
    """The one line of a run stopped by Ctrl-C (SIGINT): the step it was in, and where a rerun resumes.

    The step in progress is the newer of the last step in ``<out_dir>/metrics.jsonl`` and the checkpoint's, plus one;
    a rerun of the same command resumes (verl's ``resume_mode=auto``) from the newest complete checkpoint, the step
    verl's tracker ``latest_checkpointed_iteration.txt`` names, unless its step was not logged yet and an older
    ``global_step_<k>`` at or before the last logged step is there (:func:`rlec.verl_plugin.state.intact_checkpoint`
    then resumes that one; manifests are not verified here).

    Args:
        out_dir: the run's folder (``trainer.default_local_dir``); None: the config was not composed yet (Ctrl-C
            during the launcher's checks), nothing trained.

    Returns:
        ``interrupted at step N; rerun the same command to resume from step M's checkpoint``, or, with no
        checkpoint yet, ``interrupted at step N; no checkpoint saved yet: rerun the same command to start again``.
    """
    if out_dir is None:
        return "interrupted before verl's trainer started: nothing trained; rerun the same command to start"
    out_dir = Path(out_dir)
    try:
        saved = int((out_dir / TRACKER).read_text().strip())
    except (OSError, ValueError):
        saved = 0
    logged = 0
    try:  # the trainer's per-step lines ({"step": N, ...})
        records = read_metrics(out_dir / METRICS_FILE)
    except OSError:
        records = []
    for record in records:
        with contextlib.suppress(ValueError, TypeError, KeyError):
            logged = max(logged, int(record["step"]))
    step = max(logged, saved) + 1
    # a checkpoint saved but not logged yet (Ctrl-C between verl's save and its metrics line) is skipped on resume for
    # the newest one at or before the last logged step, when there is one (rlec.verl_plugin.state.intact_checkpoint)
    older = [k for k, _ in step_folders(out_dir) if k <= min(saved, logged)]
    if saved > logged and older:
        saved = older[0]
    if saved <= 0:
        return f"interrupted at step {step}; no checkpoint saved yet: rerun the same command to start again"
    return f"interrupted at step {step}; rerun the same command to resume from step {saved}'s checkpoint"


LAUNCH_CHECK = "--launch-check"
# hydra's config-location options (each takes a value) and the config check's option for the same thing
_HYDRA_LOCATION = {"--config-path": "--config-dir", "-cp": "--config-dir", "--config-name": "--config-name",
                   "-cn": "--config-name", "--config-dir": None, "-cd": None}


def _check_arguments(hydra_args: Sequence[str]) -> list[str]:
    """The config check's arguments for verl's (Hydra's) ``hydra_args``: the overrides, and hydra's
    ``--config-path`` / ``--config-name`` as the check's ``--config-dir`` / ``--config-name`` (in order: the last one
    wins in both), so the check composes the config verl will run.

    Raises:
        SystemExit: (status 2) hydra's ``--config-dir`` / ``-cd`` (an added search path: the check composes from one
            folder), or a location option without its value.
    """
    out: list[str] = []
    args = list(hydra_args)
    i = 0
    while i < len(args):
        option, eq, value = args[i].partition("=")
        if option in _HYDRA_LOCATION:
            if not eq:
                if i + 1 >= len(args):
                    raise SystemExit(f"rlec.cluster.main_ppo: {option} needs a value")
                i, value = i + 1, args[i + 1]
            check_option = _HYDRA_LOCATION[option]
            if check_option is None:
                print(f"rlec.cluster.main_ppo: refused: {option} {value}: hydra's added config search path is not "
                      f"supported by the launcher's checks; put the config in --config-path's folder", file=sys.stderr)
                raise SystemExit(2)
            out += [check_option, value]
        else:
            out.append(args[i])
        i += 1
    return out


def _shutdown_ray() -> None:
    """Stop the Ray cluster this driver started (its processes block SIGINT, so Ctrl-C leaves them running), if any."""
    ray = sys.modules.get("ray")
    if ray is not None and getattr(ray, "is_initialized", lambda: False)():
        try:
            ray.shutdown()
        except Exception:  # noqa: BLE001 - the exit goes on; Ray's own handler tries again
            pass


def _tee_console(log: Path) -> None:
    """From here on, this process's stdout and stderr (and its children's) also go to ``log`` (``tee -i -a``; the
    console keeps them when the file fails, e.g. on a full disk; Ctrl-C does not stop it). At exit Ray is shut down first (its shutdown
    prints), then the pipe is closed and tee's last lines are waited for (30 s at most)."""
    sys.stdout.flush()
    sys.stderr.flush()
    console = os.dup(1)
    # -i: Ctrl-C reaches the launcher's whole process group; tee goes on copying until this process closes the pipe
    # (a tee killed by it broke the pipe: the driver's last lines were lost, BrokenPipeError in verl.log)
    tee = subprocess.Popen(["tee", "-i", "-a", str(log)], stdin=subprocess.PIPE, stdout=console)
    os.close(console)
    os.dup2(tee.stdin.fileno(), 1)
    os.dup2(tee.stdin.fileno(), 2)
    tee.stdin.close()

    def close() -> None:
        # exit handlers run last-registered first: Ray's own (registered when ray was imported, before this one)
        # would run after the pipe is closed, and what its shutdown prints would be lost; shut Ray down here
        _shutdown_ray()
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except (OSError, ValueError):
            pass
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 1)
        os.dup2(null, 2)
        os.close(null)
        try:
            tee.wait(timeout=30)
        except subprocess.TimeoutExpired:
            tee.kill()

    atexit.register(close)


def launch_check(argv: Sequence[str]) -> list[str]:
    """The launcher's checks in this process, then the launch's folder; returns verl's (Hydra's) arguments.

    Args:
        argv: ``--launch-check --launch-dir DIR [--launch-record TEXT] [--launch-note LINE] [config_check options]
            -- [hydra args]``: ``TEXT`` becomes ``DIR/git.txt`` (one trailing newline), ``LINE`` is printed to stderr
            once the folder is written and before the console is copied to ``DIR/train.log``; hydra's
            ``--config-path`` / ``--config-name`` reach the check as its ``--config-dir`` / ``--config-name``.

    Returns:
        The hydra arguments (after ``--``), unchanged, for verl's ``main``.

    Raises:
        SystemExit: ``--`` missing (a message); hydra's ``--config-dir`` (status 2, refused by name); config_check's
            status (2 refused, 1 a failed check) when it does not pass. Nothing is written then.
    """
    import argparse

    from rlec.cluster import config_check
    from rlec.io import atomic_write_text

    if "--" not in argv:
        raise SystemExit(f"rlec.cluster.main_ppo: {LAUNCH_CHECK} needs '--' before verl's arguments")
    split = list(argv).index("--")
    parser = argparse.ArgumentParser(prog=f"python -m rlec.cluster.main_ppo {LAUNCH_CHECK}")
    parser.add_argument(LAUNCH_CHECK, action="store_true")
    parser.add_argument("--launch-dir", type=Path, required=True, help="the launch's folder (config.yaml, git.txt, train.log)")
    parser.add_argument("--launch-record", default=None, help="git.txt's text (the commit, dirty or not, the command)")
    parser.add_argument("--launch-note", default=None, help="a line printed to stderr once the folder is written")
    ours, check_options = parser.parse_known_args(list(argv[:split]))
    hydra_args = list(argv[split + 1:])
    with warnings.catch_warnings():  # the check's quiet filter stays the check's
        status = config_check.main([*check_options, "--output", str(ours.launch_dir / "config.yaml"), *_check_arguments(hydra_args)])
    if status:
        raise SystemExit(status)
    if ours.launch_record is not None:
        atomic_write_text(ours.launch_dir / "git.txt", ours.launch_record.rstrip("\n") + "\n")
    write_environment(ours.launch_dir)  # the machine and installation: two boxes can part by rounding (rlec.machine)
    if ours.launch_note:
        print(ours.launch_note, file=sys.stderr, flush=True)
    _tee_console(ours.launch_dir / "train.log")
    return hydra_args


def main(wrap: Callable[[Any, Callable[[Any], None]], None] | None = None) -> None:
    """CLI: ``python -m rlec.cluster.main_ppo [hydra arguments]`` (the arguments of ``verl.trainer.main_ppo``), or
    ``python -m rlec.cluster.main_ppo --launch-check ... -- [hydra arguments]``: the launcher's checks and folder
    first, in this process (:func:`launch_check`), then verl's run.

    Args:
        wrap: called as ``wrap(config, body)`` instead of ``body(config)`` (``body`` = verl's ``main`` body with
            the full-disk exit), by a caller that adds what happens around the run in this driver process
            (:func:`rlec.verl_report.run_with_report`, ``make run``'s console and final evaluation).
    """
    out_dir: list[str] = []  # the run's folder, once Hydra has composed the config
    try:
        _main(wrap, out_dir)
    except KeyboardInterrupt:  # Ctrl-C: one line, no traceback; Ray's processes (SIGINT blocked) are stopped first
        _shutdown_ray()
        try:
            print(f"\n{interrupted_message(out_dir[0] if out_dir else None)}", file=sys.stderr, flush=True)
        except OSError:
            pass
        raise SystemExit(INTERRUPTED) from None
    except RunStopped as exc:  # Hydra lets a SystemExit through; the console is this process's own again here
        try:
            print(exc.message, file=sys.stderr, flush=True)
        except OSError:  # stderr itself on the full disk: the status still says it
            pass
        raise SystemExit(2) from None


def _main(wrap: Callable[[Any, Callable[[Any], None]], None] | None, out_dir: list[str]) -> None:
    """:func:`main` without its exits: the launcher's checks, then verl's run under Hydra; appends the run's folder
    (``trainer.default_local_dir``) to ``out_dir`` once the config is composed."""
    if len(sys.argv) > 1 and sys.argv[1] == LAUNCH_CHECK:  # the launcher: its checks first, in this process
        sys.argv = [sys.argv[0], *launch_check(sys.argv[1:])]
    import hydra
    from verl.trainer import main_ppo

    if not hasattr(main_ppo.main, "__wrapped__"):  # probe: Hydra's functools.wraps keeps verl's undecorated main
        raise RuntimeError("verl.trainer.main_ppo.main has no __wrapped__ (not a @hydra.main function any more): "
                           "rlec.cluster.main_ppo cannot run verl's main body unchanged")

    # the file is main_ppo.py, so Hydra's job name (its log file, hydra.job.name) is verl's
    config_dir = os.path.join(os.path.dirname(os.path.abspath(main_ppo.__file__)), "config")

    def task(config: Any) -> None:
        with contextlib.suppress(AttributeError):  # the folder the interrupted line reads
            out_dir.append(str(config.trainer.default_local_dir))
        if wrap is None:
            _run_verl(config)
        else:
            wrap(config, _run_verl)

    hydra.main(config_path=config_dir, config_name="ppo_trainer", version_base=None)(task)()

if __name__ == "__main__":
    main()
