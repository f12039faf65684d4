"""What a cluster run's checkpoints were written under (layout, settings), recorded at launch and compared at the next.

verl 0.9.1 resumes from ``<trainer.default_local_dir>/global_step_<k>/`` with
``trainer.resume_mode=auto`` (the launcher's default): the Megatron engine reloads the model and
the distributed optimizer's state per rank, so a launch under another layout (other TP, PP, CP,
EP, ETP, number of GPUs, or optimizer sharding) fails inside the workers or resumes from a wrongly
resharded optimizer. A launch that passes its checks records the layout beside the checkpoints
(:func:`record_layout`, ``rlec_layout.json``); the next launch, and ``DRY_RUN=1`` on a machine that
sees the folder, refuse a different one naming both (:func:`layout_change_findings`).

The settings follow one rule (:func:`rlec.config.resume_differences`): the
launch that starts a run (no checkpoint to resume) records its resolved config beside the
checkpoints (:func:`record_run`, ``rlec_run.json``, kept by every resume); a launch that resumes is
refused, before Ray starts, when any setting differs from it but the few that cannot change what the run
optimises (:data:`rlec.config.RESUME_ALLOWED`; :func:`resume_setting_findings`, one error per key); and verl's trainer keeps the b schedule the
run started with when only the step count changed (:func:`apply_resume_rules`, called by
:class:`rlec.verl_plugin.trainers.AlgorithmsMixin` before verl starts its reward workers).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable

from rlec.layout import Finding
from rlec.rules.verl_keys import layout_of
from rlec.config import pinned_schedule_end, resume_differences
from rlec.run_config import VerlKeys
from rlec.config_writes import pin_schedule_end
from rlec.io import atomic_write_text, read_json_object
from rlec.config_base import TRACKER

LAYOUT_RECORD = "rlec_layout.json"
RUN_RECORD = "rlec_run.json"  # the resolved config of the launch that started the run
CHECKPOINT_KEY = VerlKeys.key_of("default_local_dir")  # the checkpoint folder's key, named by each finding here
# what decides how a checkpoint is sharded (the rollout side is rebuilt from the weights each launch)
SHARDING_FIELDS = ("world_size", "tp", "pp", "cp", "ep", "etp", "vpp", "distributed_optimizer")

__all__ = ["LAYOUT_RECORD", "RUN_RECORD", "apply_resume_rules", "checkpoint_layout", "describe", "fresh_start_findings",
           "layout_change_findings",
           "record_layout", "record_run", "resume_setting_findings", "resumes", "saved_run_config"]


def checkpoint_layout(cfg: Any, name: str) -> dict[str, Any]:
    """The sharding-relevant layout of a composed config (:data:`SHARDING_FIELDS`) and its name.

    Args:
        cfg: the composed trainer config.
        name: the layout's name as launched (``qwen3_30b_a3b_1x8``), for messages.
    """
    lay = layout_of(cfg)
    values = {"world_size": lay.world, "tp": lay.tp, "pp": lay.pp, "cp": lay.cp, "ep": lay.ep, "etp": lay.expert_tp,
              "vpp": lay.vpp, "distributed_optimizer": lay.distributed_optimizer}
    return {"name": name, **values}


def describe(record: dict[str, Any]) -> str:
    """``qwen3_30b_a3b_4x8 (32 GPUs: TP 4 PP 1 CP 1 EP 8 ETP 1, distributed optimizer)``."""
    vpp = f" VPP {record['vpp']}" if record.get("vpp") else ""
    optimizer = "distributed optimizer" if record.get("distributed_optimizer") else "optimizer not sharded"
    return (f"{record.get('name', '?')} ({record.get('world_size')} GPUs: TP {record.get('tp')} PP {record.get('pp')} "
            f"CP {record.get('cp')} EP {record.get('ep')} ETP {record.get('etp')}{vpp}, {optimizer})")


def _folder(cfg: Any) -> Path:
    return Path(os.path.expanduser(str(VerlKeys.read(cfg).default_local_dir or "")))


def _resume_mode(cfg: Any) -> str:
    """``trainer.resume_mode`` (``auto`` when absent)."""
    return str(VerlKeys.read(cfg).resume_mode)


def layout_change_findings(cfg: Any, name: str) -> list[Finding]:
    """Refuse resuming checkpoints written under another layout; reads only.

    Applies when ``trainer.resume_mode`` is not ``disable`` and the checkpoint folder holds verl's
    tracker (a checkpoint to resume). No record beside it (written before rlec recorded layouts, or
    by another launcher) is a warning.

    Returns:
        an error naming the folder and both layouts (:func:`describe`), a warning, or nothing.
    """
    folder = _folder(cfg)
    if _resume_mode(cfg) == "disable" or not (folder / TRACKER).is_file():
        return []
    try:
        saved = _read_record(folder / LAYOUT_RECORD, "a JSON object (the checkpoints' layout)")
    except ValueError as exc:
        return [Finding("error", CHECKPOINT_KEY, f"{exc}; restore it or remove it if the checkpoints' layout is known "
                        "to be this launch's")]
    if saved is None:
        return [Finding("warning", CHECKPOINT_KEY, f"{folder} holds checkpoints without {LAYOUT_RECORD}: the layout they "
                        "were written under is unknown; resuming under another one fails or corrupts the optimizer")]
    now = checkpoint_layout(cfg, name)
    changed = [field for field in SHARDING_FIELDS if saved.get(field) != now[field]]
    if not changed:
        return []
    return [Finding("error", CHECKPOINT_KEY, f"{folder} holds checkpoints written under layout {describe(saved)}; this "
                    f"launch uses {describe(now)} ({', '.join(changed)} differ): verl reloads the optimizer per rank, so "
                    "resuming across layouts fails or corrupts it. Launch with the saved layout, or set "
                    "RESUME=disable with another CHECKPOINT_DIR to start fresh")]


def record_layout(cfg: Any, name: str) -> Path:
    """Write the launch's layout (:func:`checkpoint_layout`) to ``<trainer.default_local_dir>/rlec_layout.json``.

    Called by ``rlec.cluster.config_check --record-layout`` (the launcher, not ``DRY_RUN``) only
    after every check passed, so a refused launch writes nothing.

    Raises:
        OSError: the folder cannot be created or written (the error names the file).
    """
    path = _folder(cfg) / LAYOUT_RECORD
    return atomic_write_text(path, json.dumps(checkpoint_layout(cfg, name), indent=2, sort_keys=True) + "\n")


def resumes(cfg: Any) -> bool:
    """Whether this launch resumes a checkpoint: ``trainer.resume_mode`` is ``resume_path`` (a ``global_step_<N>`` of
    the checkpoint folder, :mod:`rlec.rules.settings_rules`), or ``auto`` and the checkpoint folder holds verl's
    tracker (``latest_checkpointed_iteration.txt``)."""
    mode = _resume_mode(cfg)
    return mode == "resume_path" or (mode != "disable" and (_folder(cfg) / TRACKER).is_file())


def fresh_start_findings(cfg: Any) -> list[Finding]:
    """Refuse ``trainer.resume_mode=disable`` (``RESUME=disable``) into a folder that holds an earlier run's checkpoints.

    A new run there would record its settings over the earlier run's (:func:`record_run`) and start a new
    ``metrics.jsonl``, while the earlier tracker and ``global_step_<N>`` folders stay: killed before its first save,
    a rerun with ``auto`` would resume the earlier run's checkpoint under the new run's record. (The retired local
    loop moved such a folder aside; this refuses and names it.) Reads only.
    """
    if _resume_mode(cfg) != "disable":
        return []
    folder = _folder(cfg)
    held = sorted(p.name for p in folder.glob("global_step_*") if p.is_dir()) if folder.is_dir() else []
    if not held and not (folder / TRACKER).is_file():
        return []
    what = ", ".join(held[-3:]) if held else TRACKER
    return [Finding("error", CHECKPOINT_KEY, f"{folder} holds an earlier run's checkpoints ({what}): RESUME=disable "
                    "(trainer.resume_mode=disable) would start a new run beside them and a later resume would mix the "
                    "two; choose another OUTPUT_DIR / CHECKPOINT_DIR, or move this folder aside")]


def _read_record(path: Path, what: str) -> dict[str, Any] | None:
    """The JSON object of the record ``path`` (:func:`rlec.io.read_json_object`), or None when there is no such file.

    Raises:
        ValueError: the file is unreadable or not JSON (names the file and the cause), or holds no JSON object (names
            the file and ``what`` was expected).
    """
    try:
        return read_json_object(path, what=what)
    except ValueError as exc:
        if isinstance(exc.__cause__, FileNotFoundError):
            return None
        raise


def saved_run_config(cfg: Any) -> dict[str, Any] | None:
    """The resolved config the run in ``trainer.default_local_dir`` started with (:data:`RUN_RECORD`), or None.

    Raises:
        ValueError: the record exists but is unreadable or not a JSON object (names the file).
    """
    try:
        return _read_record(_folder(cfg) / RUN_RECORD, "a JSON object (the run's resolved config)")
    except ValueError as exc:
        raise ValueError(f"{exc}; restore it, or remove it to resume without the resume rules") from exc


def resume_setting_findings(cfg: Any) -> list[Finding]:
    """Refuse a resume whose settings change what the run optimises; reads only.

    Applies when this launch resumes (:func:`resumes`). Each key of the resolved config that differs from the
    record (or that only one side has), outside :data:`rlec.config.RESUME_ALLOWED`, is one error naming the key,
    the saved and the new value and the rule (:func:`rlec.config.resume_differences`); a missing record
    (checkpoints written before rlec recorded settings) is a warning.
    """
    if not resumes(cfg):
        return []
    folder = _folder(cfg)
    try:
        saved = saved_run_config(cfg)
    except ValueError as exc:
        return [Finding("error", CHECKPOINT_KEY, str(exc))]
    if saved is None:
        return [Finding("warning", CHECKPOINT_KEY, f"{folder} holds checkpoints without {RUN_RECORD}: the settings they "
                        "were trained with are unknown, so a changed algorithm, data or loss cannot be refused")]
    refused, _ = resume_differences(saved, cfg)
    return [Finding("error", line.split(": ", 1)[0],
                    f"{line.split(': ', 1)[1]}: the checkpoints in {folder} were trained with the first value, and a setting "
                    "outside the resume allow-list (rlec.config.RESUME_ALLOWED: step count, checkpoint and validation "
                    "cadence, logging, output paths, worker counts) changes what the run optimises, so a resume must "
                    "keep it; restore it, or start fresh with RESUME=disable and another CHECKPOINT_DIR") for line in refused]


def record_run(cfg: Any) -> Path | None:
    """Record the launch's resolved config as the run's (:data:`RUN_RECORD`) when it starts the run.

    A launch that resumes keeps the record of the launch that started the run (the settings and the
    b schedule the checkpoints were trained with); returns None then. Called with
    :func:`record_layout` only after every check passed, so a refused launch writes nothing.

    Raises:
        OSError: the folder cannot be created or written (the error names the file).
    """
    if resumes(cfg):
        return None
    from rlec.settings import plain

    tree = plain(cfg)
    return atomic_write_text(_folder(cfg) / RUN_RECORD, json.dumps(tree, indent=1, sort_keys=True, default=str) + "\n")


def apply_resume_rules(cfg: Any) -> int | None:
    """verl's trainer side of the rules, on the config it is built with (before any worker starts).

    When the run resumes and its record exists: the first refused setting raises (the launcher
    refused it already; this covers a ``main_ppo`` started without it), and when the step count
    changed with ``rlec.schedule.end_step`` unset, that is set to where the run's schedule ends
    (:func:`rlec.config.pinned_schedule_end`), so b reaches 1 where the original plan said.

    Returns:
        The pinned end step, or None when nothing was pinned.

    Raises:
        ValueError: a refused setting (:func:`resume_setting_findings`) or an unreadable record.
    """
    if not resumes(cfg):
        return None
    saved = saved_run_config(cfg)
    if saved is None:
        return None
    errors = [f for f in resume_setting_findings(cfg) if f.level == "error"]
    if errors:
        raise ValueError(str(errors[0]))
    end = pinned_schedule_end(saved, cfg)
    if end is not None:
        pin_schedule_end(cfg, end)  # verl's reward-loop workers read the b schedule from this config
    return end


def _ancestors() -> set[int]:
    """This process and its parents (their open files are this launch's own: a redirected stdout)."""
    pids, pid = set(), os.getpid()
    while pid > 1 and pid not in pids:
        pids.add(pid)
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            break
        pid = next((int(line.split()[1]) for line in status.splitlines() if line.startswith("PPid:")), 0)
    return pids


def _other_pids() -> list[int]:
    """The pids in ``/proc`` other than this process and its parents (empty where ``/proc`` cannot be read)."""
    mine = _ancestors()
    try:
        return [int(e.name) for e in os.scandir("/proc") if e.name.isdigit() and int(e.name) not in mine]
    except OSError:
        return []


def _command(pid: int) -> str | None:
    """``pid``'s command line, spaces between its arguments (None: gone or unreadable). Empty for a process whose
    memory is already released (exiting, or a zombie): the kernel drops its memory before its open files, so such a
    process may still hold a file open for a moment but can no longer write to it."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return None


def live_writers(folder: str | os.PathLike[str]) -> list[tuple[int, str, str]]:
    """Processes on this machine, other than this launch, with a file under ``folder`` open for writing.

    Read from ``/proc`` (Linux; elsewhere nothing is found): each process's open descriptors, their
    paths and their ``fdinfo`` flags (write-only or read-write). A process without a command line is
    exiting and writes nothing more (:func:`_command`): not counted (a rerun right after SIGKILL, on a
    loaded 2-core box, was refused for a killed launch's Ray worker caught between the two steps of its exit).

    Returns:
        ``(pid, command line (cut), file)`` per process, the first such file of each.
    """
    root = os.path.realpath(folder) + os.sep
    out = []
    for pid in _other_pids():
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if not target.startswith(root):
                    continue
                flags = next(int(line.split()[1], 8) for line in Path(f"/proc/{pid}/fdinfo/{fd}").read_text().splitlines()
                             if line.startswith("flags:"))
            except (OSError, StopIteration, ValueError):
                continue
            if flags & (os.O_WRONLY | os.O_RDWR):
                command = _command(pid)
                if command != "":  # "": exiting, writes nothing more
                    out.append((pid, "?" if command is None else command[:120], target))
                break
    return sorted(out)


RUN_FOLDER_ENV = "RLEC_RUN_FOLDER"
"""The environment variable the launcher exports (and hands Ray's workers) naming its checkpoint folder:
every process of a launch carries it, so a rerun finds the processes a killed launch left behind."""

LAUNCHER = "run_megatron_rlec.sh"


def launch_processes(folder: str | os.PathLike[str]) -> list[tuple[int, str]]:
    """Processes on this machine, other than this launch and its parents, of a launch into ``folder``.

    A launch's processes are those whose environment (``/proc/<pid>/environ``, as they were started)
    has :data:`RUN_FOLDER_ENV` equal to ``folder``'s real path: the launcher exports it, Ray's
    raylet and workers inherit it (and ``ray_init.runtime_env`` hands it to workers elsewhere). Linux;
    elsewhere, or for another user's processes, nothing is found.

    Returns:
        ``(pid, command line)`` per process, by pid.
    """
    wanted = f"{RUN_FOLDER_ENV}={os.path.realpath(folder)}".encode()
    out = []
    for pid in _other_pids():
        try:
            if wanted not in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
                continue
        except OSError:
            continue
        command = _command(pid)
        if command:  # a zombie or an exiting process has no command line and writes nothing more
            out.append((pid, command))
    return sorted(out)


def wait_for_earlier_launch(folder: str | os.PathLike[str], wait_s: float, *, poll_s: float = 0.5,
                            say: Callable[[str], None] | None = None) -> list[tuple[int, str]]:
    """Wait up to ``wait_s`` seconds for the processes a killed launch into ``folder`` left behind to end.

    A launcher killed with SIGKILL (its process group) leaves Ray's processes (outside that group):
    its trainer and workers may still write a checkpoint, the tracker or ``metrics.jsonl`` for a few
    seconds, until Ray's reaper stops them. A rerun started at once would race them, so it waits
    here (one line on ``say`` while it does). A live launcher into the same folder is not waited
    for: another launch is running, and the caller refuses at once.

    Returns:
        The processes still alive (:func:`launch_processes`): empty when the rerun may go ahead.
    """
    procs = launch_processes(folder)
    if not procs or wait_s <= 0 or any(LAUNCHER in command for _, command in procs):
        return procs
    if say is not None:
        say(f"waiting up to {wait_s:g} s for {len(procs)} process(es) of an earlier launch into {folder} to end "
            f"(pids {', '.join(str(p) for p, _ in procs[:8])}{' ...' if len(procs) > 8 else ''})")
    deadline = time.monotonic() + wait_s
    while procs and time.monotonic() < deadline:
        time.sleep(poll_s)
        procs = launch_processes(folder)
    return procs


def live_writer_findings(cfg: Any, wait_s: float = 0.0) -> list[Finding]:
    """Refuse a launch while another process still works in the checkpoint folder (on this machine).

    Two kinds, each named (pid, command): a process of another launch into the folder
    (:func:`launch_processes`: another launcher running, or what a killed launch left behind,
    after waiting up to ``wait_s`` seconds for it to end, :func:`wait_for_earlier_launch`), and any
    other process with a file under the folder open for writing (:func:`live_writers`).
    """
    folder = _folder(cfg)
    if not str(folder) or not folder.is_dir():
        return []
    procs = wait_for_earlier_launch(folder, wait_s, say=lambda line: print(f"rlec: {line}", file=sys.stderr, flush=True))
    running = [(pid, command) for pid, command in procs if LAUNCHER in command]
    findings = [Finding("error", CHECKPOINT_KEY, f"{folder}: another launch into this folder is running (process {pid}: "
                        f"{command[:120]}): wait for it to end or stop it, then rerun") for pid, command in running]
    if not running:
        after = f" after {wait_s:g} s" if wait_s > 0 else ""
        findings += [Finding("error", CHECKPOINT_KEY, f"{folder}: process {pid} ({command[:120]}) of an earlier launch into this "
                             f"folder is still running{after}: a worker outliving its killed launcher? wait for it to end "
                             f"or stop it (kill {pid}), then rerun") for pid, command in procs]
    seen = {pid for pid, _ in procs}
    return findings + [Finding("error", CHECKPOINT_KEY, f"{folder}: process {pid} ({command}) still writes {path}: a previous "
                               "run's worker outliving its launcher? wait for it to finish or stop it (kill "
                               f"{pid}), then rerun") for pid, command, path in live_writers(folder) if pid not in seen]
