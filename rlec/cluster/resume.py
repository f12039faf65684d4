"""The layout a cluster run's checkpoints were written under, recorded at launch and compared at the next.

verl 0.9.1 resumes from ``<trainer.default_local_dir>/global_step_<k>/`` with
``trainer.resume_mode=auto`` (the launcher's default): the Megatron engine reloads the model and
the distributed optimizer's state per rank, so a launch under another layout (other TP, PP, CP,
EP, ETP, number of GPUs, or optimizer sharding) fails inside the workers or resumes from a wrongly
resharded optimizer. A launch that passes its checks records the layout beside the checkpoints
(:func:`record_layout`, ``rlec_layout.json``); the next launch, and ``DRY_RUN=1`` on a machine that
sees the folder, refuse a different one naming both (:func:`layout_change_findings`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from rlec.cluster.layout import Finding
from rlec.cluster.verl_keys import layout_of
from rlec.config import select
from rlec.io import atomic_write_text

LAYOUT_RECORD = "rlec_layout.json"
TRACKER = "latest_checkpointed_iteration.txt"  # verl's tracker of the newest checkpoint
CHECKPOINT_KEY = "trainer.default_local_dir"
# what decides how a checkpoint is sharded (the rollout side is rebuilt from the weights each launch)
SHARDING_FIELDS = ("world_size", "tp", "pp", "cp", "ep", "etp", "vpp", "distributed_optimizer")

__all__ = ["LAYOUT_RECORD", "checkpoint_layout", "describe", "layout_change_findings", "record_layout"]


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
    return Path(os.path.expanduser(str(select(cfg, CHECKPOINT_KEY, "") or "")))


def layout_change_findings(cfg: Any, name: str) -> list[Finding]:
    """Refuse resuming checkpoints written under another layout; reads only.

    Applies when ``trainer.resume_mode`` is not ``disable`` and the checkpoint folder holds verl's
    tracker (a checkpoint to resume). No record beside it (written before rlec recorded layouts, or
    by another launcher) is a warning.

    Returns:
        an error naming the folder and both layouts (:func:`describe`), a warning, or nothing.
    """
    folder = _folder(cfg)
    if str(select(cfg, "trainer.resume_mode", "auto")) == "disable" or not (folder / TRACKER).is_file():
        return []
    try:
        saved = json.loads((folder / LAYOUT_RECORD).read_text())
    except FileNotFoundError:
        return [Finding("warning", CHECKPOINT_KEY, f"{folder} holds checkpoints without {LAYOUT_RECORD}: the layout they "
                        "were written under is unknown; resuming under another one fails or corrupts the optimizer")]
    except (OSError, ValueError) as exc:
        return [Finding("error", CHECKPOINT_KEY, f"{folder / LAYOUT_RECORD}: unreadable ({exc}); restore it or remove it "
                        "if the checkpoints' layout is known to be this launch's")]
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


def live_writers(folder: str | os.PathLike[str]) -> list[tuple[int, str, str]]:
    """Processes on this machine, other than this launch, with a file under ``folder`` open for writing.

    Read from ``/proc`` (Linux; elsewhere nothing is found): each process's open descriptors, their
    paths and their ``fdinfo`` flags (write-only or read-write).

    Returns:
        ``(pid, command line (cut), file)`` per process, the first such file of each.
    """
    root = os.path.realpath(folder) + os.sep
    mine, out = _ancestors(), []
    try:
        entries = [e.name for e in os.scandir("/proc") if e.name.isdigit()]
    except OSError:
        return []
    for name in entries:
        pid = int(name)
        if pid in mine:
            continue
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
                try:
                    command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                except OSError:
                    command = "?"
                out.append((pid, command.strip()[:120], target))
                break
    return sorted(out)


def live_writer_findings(cfg: Any) -> list[Finding]:
    """Refuse a launch while another process still writes into the checkpoint folder (on this machine).

    A launcher killed mid-save leaves its Ray workers (outside its process group) writing their shards;
    its output-folder lock is already free, so a rerun would race them. The error names each process
    (pid, command, the file it writes): wait for it to finish, or stop it.
    """
    folder = _folder(cfg)
    if not str(folder) or not folder.is_dir():
        return []
    return [Finding("error", CHECKPOINT_KEY, f"{folder}: process {pid} ({command}) still writes {path}: a previous run's "
                    "worker outliving its launcher? wait for it to finish or stop it (kill "
                    f"{pid}), then rerun") for pid, command, path in live_writers(folder)]
