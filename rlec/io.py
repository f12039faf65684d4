"""Durable outputs: atomic writes, temporary folders that a killed writer cannot leave behind, and
one-writer locks; and a console held back while a library prints (:func:`held_back_console`).

- Atomic: every writer in rlec writes into a temporary sibling (same folder, so the final
  ``rename`` stays on one filesystem) and renames it into place. Replacing an existing folder
  renames the old one aside first and deletes it only after the new one is in place.
- Temporary folders (:func:`claim_temp_dir`) are held under a lock for their whole life, so a
  later start tells a folder whose writer was killed (``kill -9``, out of memory, node loss) from
  one still being written: :func:`remove_stale_temps` removes only the former.
- Locks (:class:`FileLock`): an OS lock (``fcntl.flock``) on a small file that names the holder
  (pid, host, command, start time). A second writer refuses with a message naming the holder;
  the kernel drops the lock when the holder dies, so a stale lock file never blocks.

``flock`` works on local filesystems and on NFS (Linux emulates it with POSIX locks); on a
filesystem without lock support (Lustre mounted without ``-o flock``) :class:`FileLock` warns
once and runs unlocked, and :func:`remove_stale_temps` then reports partial folders instead of
removing them.
"""

from __future__ import annotations

import contextlib
import errno
import io
import json
import logging
import os
import shutil
import socket
import sys
import tempfile
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

if TYPE_CHECKING:
    from matplotlib.figure import Figure

log = logging.getLogger("rlec.io")

_UNSUPPORTED_LOCK_ERRNOS = {errno.ENOLCK, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP}
_warned_unsupported: set[str] = set()


# ---- console ---------------------------------------------------------------------------------

@contextlib.contextmanager
def held_back_console() -> Iterator[io.StringIO]:
    """Hold back what is printed (``sys.stdout``, ``sys.stderr``) and logged at WARNING or below meanwhile.

    A logging ``StreamHandler`` created meanwhile (a library's handler made at import binds the ``sys.stderr``
    of that moment: transformers', verl's) is pointed back at the real ``sys.stderr`` on exit. Without that it
    would write into the discarded sink for the rest of the process, and the launcher runs verl's driver in the
    process that ran its checks (:func:`rlec.cluster.main_ppo.launch_check`).

    Yields:
        the sink (what was held back), for a caller that shows it on failure.
    """
    sink = io.StringIO()
    previous = logging.root.manager.disable
    logging.disable(logging.WARNING)
    try:
        with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
            yield sink
    finally:
        logging.disable(previous)
        loggers = [logging.root, *(v for v in list(logging.root.manager.loggerDict.values()) if isinstance(v, logging.Logger))]
        for logger in loggers:
            for handler in logger.handlers:
                if isinstance(handler, logging.StreamHandler) and handler.stream is sink:
                    handler.setStream(sys.stderr)


# ---- atomic writes ---------------------------------------------------------------------------


def replace_dir(tmp: str | os.PathLike[str], out: str | os.PathLike[str]) -> Path:
    """Move the complete folder ``tmp`` to ``out``, replacing an existing ``out`` safely.

    Returns:
        ``Path(out)``.
    """
    tmp, out = Path(tmp), Path(out)
    old = out.parent / f".{out.name}.old-{uuid.uuid4().hex[:8]}"
    if out.exists():
        os.rename(out, old)
    os.rename(tmp, out)
    shutil.rmtree(old, ignore_errors=True)
    return out


def temp_sibling(out: str | os.PathLike[str], kind: str = "tmp") -> Path:
    """A fresh hidden path next to ``out`` (``.<name>.<kind>-<pid>-<random>``), not created."""
    out = Path(out)
    return out.parent / f".{out.name}.{kind}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


@contextlib.contextmanager
def atomic_dir(out: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield an empty temporary folder; on clean exit it replaces ``out`` (see :func:`replace_dir`).

    On an exception (or interrupt) the temporary folder is removed and ``out`` is untouched. A
    temporary sibling of ``out`` left by a killed earlier writer is removed first
    (:func:`remove_stale_temps`).

    Raises:
        OSError: the parent folder cannot be created or written.
    """
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temps(out.parent, out.name)
    tmp, lock = claim_temp_dir(out)
    try:
        yield tmp
        replace_dir(tmp, out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
        lock.release()


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> Path:
    """Write ``data`` to a temporary sibling, fsync, and rename it over ``path``.

    Readers see either the old file or the complete new one, never a half-written file. The file
    gets ordinary permissions (``0o666`` minus the umask).

    Raises:
        OSError: the folder cannot be created or written (nothing is left behind).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)  # mkstemp creates 0600
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(exc, OSError) and exc.filename is None:  # a failed write() names no file: name it
            raise OSError(exc.errno, exc.strerror or str(exc), str(path)) from exc
        raise
    return path


def atomic_write_parquet(path: str | os.PathLike[str], table: Any) -> Path:
    """A pyarrow ``Table`` as the parquet file ``path`` (pyarrow's default writer settings), atomically: written whole
    into memory, then :func:`atomic_write_bytes` (readers see the old file or the complete new one).

    Raises:
        OSError: the folder cannot be created or written (nothing is left behind).
    """
    import pyarrow.parquet as pq

    buf = io.BytesIO()
    pq.write_table(table, buf)
    return atomic_write_bytes(path, buf.getvalue())


LOW_SPACE_BYTES = 64 * 2**20
STEP_PREFIX = "global_step_"  # verl's checkpoint folder names, global_step_<N>


def step_folders(root: str | os.PathLike[str]) -> list[tuple[int, Path]]:
    """The ``global_step_<N>`` folders directly in ``root``, newest first: ``[(N, path), ...]``
    (``[]`` when ``root`` is not a folder; other names, ``global_step_x`` included, are ignored)."""
    root = Path(root)
    if not root.is_dir():
        return []
    found = [(int(p.name[len(STEP_PREFIX):]), p) for p in root.iterdir()
             if p.name.startswith(STEP_PREFIX) and p.name[len(STEP_PREFIX):].isdigit() and p.is_dir()]
    return sorted(found, reverse=True)


def previous_checkpoint_bytes(folder: str | os.PathLike[str]) -> int | None:
    """Bytes of the newest ``global_step_<N>`` beside ``folder`` other than ``folder`` itself: what the
    next save of the same model and optimizer needs, about. None without one, or when it cannot be read."""
    folder = Path(folder).absolute()
    for _, previous in step_folders(folder.parent):
        if previous.absolute() != folder:
            try:
                return _size(previous)
            except OSError:
                return None
    return None


def _free_bytes(path: Path) -> int | None:
    probe = path.absolute()
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    try:
        return shutil.disk_usage(probe).free
    except OSError:
        return None


def error_chain(exc: BaseException) -> list[BaseException]:
    """``exc`` and every error behind it, breadth first, each once: Ray's ``RayTaskError.cause`` (the
    remote error), ``__cause__`` and ``__context__``. The one walk of a chain in rlec (the full-disk
    checks here and in :mod:`rlec.cluster.main_ppo`)."""
    seen: set[int] = set()
    chain: list[BaseException] = []
    todo: list[BaseException] = [exc]
    while todo:
        error = todo.pop(0)
        if id(error) in seen:
            continue
        seen.add(id(error))
        chain.append(error)
        todo.extend(e for e in (getattr(error, "cause", None), error.__cause__, error.__context__) if isinstance(e, BaseException))
    return chain


def no_space_error(exc: BaseException, path: str | os.PathLike[str], *, needed: int | None = None,
                   free_before: int | None = None) -> OSError | None:
    """``OSError(ENOSPC, "No space left on device", path)`` when ``exc`` comes from a full disk, else None.

    A full disk is recognised from an ``ENOSPC`` ``OSError`` (or its text) anywhere in ``exc``'s
    cause/context chain, or, for writers that lose the errno (torch's zip writer raises
    ``RuntimeError: [enforce fail at inline_container.cc] . unexpected pos``, wrapped by
    Megatron's ``Worker failure``), from the filesystem of ``path`` having under
    :data:`LOW_SPACE_BYTES` (64 MiB) free when the error is caught: call it while the partial
    output still holds its space. A writer that frees its partial output before the error
    reaches the caller (one large shard that did not fit: the disk has room again by then) is
    told by ``needed`` > ``free_before``: the output needs more than the filesystem had when
    the write began, for write failures only (an ``OSError`` or a writer's error text in the chain:
    another failure while space is short keeps its own error). Raise the result ``from exc`` so the
    original error stays in the chain.

    Args:
        exc: the error a write raised.
        path: the output being written (file or folder; need not exist).
        needed: bytes the output needs (an estimate that does not exceed it: e.g. the previous
            checkpoint's size), or None.
        free_before: the filesystem's free bytes when the write began (:func:`free_bytes`), or None.

    Returns:
        the error to raise (its message names ``path`` and the free space), or None.
    """
    path = Path(path)
    full = any((isinstance(e, OSError) and e.errno == errno.ENOSPC) or "No space left on device" in str(e)
               for e in error_chain(exc))
    free = _free_bytes(path)
    # "it needed more than was free" judges write failures only: another failure (a worker's bug) keeps its own error
    short = needed is not None and free_before is not None and needed > free_before and _write_failure(exc)
    if not full and not short and (free is None or free >= LOW_SPACE_BYTES):
        return None
    left = "" if free is None else f" ({free / 2**20:.1f} MiB free)"
    if short and not full and (free is None or free >= LOW_SPACE_BYTES):
        left = f" (the output needs ~{needed / 2**20:.1f} MiB; {free_before / 2**20:.1f} MiB were free when it began)"
    return OSError(errno.ENOSPC, f"No space left on device{left}", str(path))


# what a writer that lost the errno raises (torch's zip writer; Megatron's async writer wraps it as "Worker failure")
_WRITE_FAILURE_TEXT = ("inline_container", "unexpected pos", "PytorchStreamWriter", "Worker failure", "[Errno ")


def _write_failure(exc: BaseException) -> bool:
    """Whether ``exc`` (or its cause/context chain) is an ``OSError`` or a writer's error text (:data:`_WRITE_FAILURE_TEXT`)."""
    return any(isinstance(e, OSError) or any(t in str(e) for t in _WRITE_FAILURE_TEXT) for e in error_chain(exc))


def free_bytes(path: str | os.PathLike[str]) -> int | None:
    """Free bytes of the filesystem ``path`` is (or would be) on; None when it cannot be told."""
    return _free_bytes(Path(path))


def read_json_object(path: str | os.PathLike[str], *, what: str = "a JSON object") -> dict[str, Any]:
    """The JSON object stored in the file ``path``.

    Args:
        path: the file.
        what: what the file should hold, for the error (e.g. ``"the run's resolved config"``).

    Returns:
        The object, as ``json.loads`` gives it.

    Raises:
        ValueError: the file is missing or unreadable, or not JSON (names the file and the cause, which is chained), or
            its JSON is no object (names the file, ``what`` was expected, and the type found).
    """
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: unreadable ({exc})") from exc
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected {what}, got a JSON {type(data).__name__}")
    return data


def atomic_write_text(path: str | os.PathLike[str], text: str) -> Path:
    """:func:`atomic_write_bytes` for UTF-8 text."""
    return atomic_write_bytes(path, text.encode("utf-8"))


def save_figure(figure: "Figure", path: str | os.PathLike[str], *, dpi: int = 120, **savefig_kwargs: Any) -> Path:
    """Render a matplotlib figure to PNG in memory, close it, and write it with :func:`atomic_write_bytes`.

    Args:
        figure: the figure; closed (``plt.close``) whether or not rendering succeeds.
        path: the PNG file (its folder is created).
        dpi: resolution in dots per inch.
        savefig_kwargs: passed to ``figure.savefig`` (e.g. ``bbox_inches="tight"``).

    Returns:
        ``Path(path)``.

    Raises:
        OSError: the file cannot be written (nothing is left behind; an old file stays as it was).
        Exception: whatever ``figure.savefig`` raises while rendering (nothing is written).
    """
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    try:
        figure.savefig(buf, format="png", dpi=dpi, **savefig_kwargs)
    finally:
        plt.close(figure)
    return atomic_write_bytes(path, buf.getvalue())


def check_writable(path: str | os.PathLike[str], *, label: str) -> Path:
    """Check, before any work, that ``path`` (a file or folder to be written) can be created.

    The nearest existing folder above ``path`` must be a folder in which a file can be created
    (probed with a temporary file, so it also holds for root and for read-only mounts); nothing
    is left behind.

    Args:
        path: the output file or folder (need not exist).
        label: how the user named it (``--out``, ``--output-dir``), used in the message.

    Returns:
        ``Path(path)``.

    Raises:
        NotADirectoryError: a path component above ``path`` is a file.
        PermissionError: the folder cannot be written (read-only filesystem, permissions).
    """
    path = Path(path)
    parent = path.absolute().parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise NotADirectoryError(f"{label} {path}: {parent} is a file, not a folder")
    try:
        with tempfile.TemporaryFile(dir=parent):
            pass
    except OSError as exc:
        raise PermissionError(f"{label} {path}: cannot write in {parent} ({exc.strerror or exc})") from None
    return path


# ---- manifests: what a complete folder holds, checked before it is read -----------------------

MANIFEST_FILE = "rlec_manifest.json"
_HASH_CHUNK = 8 * 2**20


class ManifestError(OSError):
    """A folder's manifest is missing, unreadable, or does not match its files.

    Attributes:
        folder: the folder checked.
        problems: one line per missing, resized or changed file (or the manifest's own problem).
    """

    def __init__(self, folder: Path, problems: list[str]) -> None:
        shown = "; ".join(problems[:5]) + (f"; and {len(problems) - 5} more" if len(problems) > 5 else "")
        super().__init__(f"{folder}: damaged ({shown})")
        self.folder, self.problems = folder, problems


def _sha256(path: Path) -> str:
    import hashlib

    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_HASH_CHUNK):
            digest.update(chunk)  # hashlib releases the GIL on large buffers: files hash in parallel threads
    return digest.hexdigest()


def _hash_files(folder: Path, names: list[str]) -> dict[str, str]:
    from concurrent.futures import ThreadPoolExecutor

    workers = max(1, min(8, len(names), os.cpu_count() or 1))
    with ThreadPoolExecutor(workers) as pool:
        return dict(zip(names, pool.map(lambda name: _sha256(folder / name), names)))


def _manifest_names(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*")
                  if p.is_file() and not p.is_symlink() and p.name != MANIFEST_FILE)


def write_manifest(folder: str | os.PathLike[str]) -> Path:
    """Record every file of a complete ``folder`` (relative path -> size in bytes and SHA-256) in
    ``<folder>/rlec_manifest.json``, written with :func:`atomic_write_text`.

    Call it once every file of the folder is written (all ranks finished) and before anything
    points at the folder (a checkpoint's "latest" tracker), so a folder without a manifest is one
    whose write did not finish. Cost: one read of the folder; files hash in parallel threads
    (SHA-256 at about 0.5-1 GB/s per core).

    Returns:
        the manifest's path.

    Raises:
        OSError: a file cannot be read or the manifest cannot be written (e.g. ``ENOSPC``).
    """
    folder = Path(folder)
    names = _manifest_names(folder)
    digests = _hash_files(folder, names)
    files = {name: {"bytes": (folder / name).stat().st_size, "sha256": digests[name]} for name in names}
    return atomic_write_text(folder / MANIFEST_FILE, json.dumps({"version": 1, "files": files}, indent=1, sort_keys=True) + "\n")


def verify_manifest(folder: str | os.PathLike[str]) -> int:
    """Check ``folder`` against its manifest (:func:`write_manifest`) before anything reads it.

    Every listed file must exist with the recorded size and SHA-256 (a size mismatch is reported
    without hashing). Files added after the manifest are not checked (nothing rlec writes does so).

    Returns:
        the number of files checked.

    Raises:
        ManifestError: the manifest is missing or unreadable, or a listed file is missing, has
            another size, or another content; the message names the folder and each file.
    """
    folder = Path(folder)
    try:
        files = json.loads((folder / MANIFEST_FILE).read_text())["files"]
        if not isinstance(files, dict):
            raise ValueError("'files' is not a mapping")
    except FileNotFoundError:
        raise ManifestError(folder, [f"no {MANIFEST_FILE}: its write did not finish, or it predates manifests"]) from None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ManifestError(folder, [f"{MANIFEST_FILE} is unreadable ({exc})"]) from None
    problems, to_hash = [], []
    for name, want in sorted(files.items()):
        path = folder / name
        if not path.is_file():
            problems.append(f"{name} is missing")
        elif path.stat().st_size != int(want["bytes"]):
            problems.append(f"{name} has {path.stat().st_size} bytes, the manifest {want['bytes']}")
        else:
            to_hash.append(name)
    digests = _hash_files(folder, to_hash)
    problems += [f"{name}: content differs from the manifest (sha256)" for name in to_hash if digests[name] != files[name]["sha256"]]
    if problems:
        raise ManifestError(folder, problems)
    return len(files)


# ---- locks -----------------------------------------------------------------------------------


class LockHeld(RuntimeError):
    """Another live process holds the lock.

    Attributes:
        path: the lock file.
        holder: what the holder wrote (``pid``, ``host``, ``command``, ``started``); may be empty.
    """

    def __init__(self, message: str, path: Path, holder: dict[str, Any]) -> None:
        super().__init__(message)
        self.path, self.holder = path, holder


def _pid_alive(pid: Any) -> bool:
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except (PermissionError, ValueError, TypeError, OverflowError):
        return True
    return True


def _read_holder(fd: int) -> dict[str, Any]:
    try:
        text = os.pread(fd, 65536, 0).decode("utf-8", "replace")
        holder = json.loads(text) if text.strip() else {}
    except (OSError, ValueError):
        return {}
    return holder if isinstance(holder, dict) else {}


def describe_holder(holder: dict[str, Any]) -> str:
    """``pid 123 on host h (python -m ...), since 2026-...``, or ``an unknown process``."""
    if not holder.get("pid"):
        return "an unknown process"
    text = f"pid {holder['pid']}"
    if holder.get("host"):
        text += f" on {holder['host']}"
    if holder.get("command"):
        command = str(holder["command"])
        text += f" ({command[:200]}{'...' if len(command) > 200 else ''})"
    if holder.get("started"):
        text += f", since {holder['started']}"
    return text


class FileLock:
    """An exclusive, non-blocking OS lock on ``path`` that names its holder.

    The lock is ``fcntl.flock`` on ``path``, which holds JSON ``{pid, host, command, started}`` of
    the holder while it is held and is deleted on release. The kernel releases the lock when the
    holder (and every process that inherited its file descriptor, e.g. a forked child) has
    exited, so a lock file left by a killed process never blocks: the next :meth:`acquire` takes
    it over (and logs the dead holder).

    Use as a context manager, or call :meth:`acquire` / :meth:`release`. Not re-entrant: a second
    ``FileLock`` on the same file in the same process is refused like any other holder.

    Args:
        path: the lock file (created with its folders if missing).
        what: what the lock protects, as the user knows it (``--out records.jsonl``); it starts
            the refusal message.

    Attributes:
        locked: True while held; False after release, or when the filesystem does not support
            locks (a warning is logged once per folder and the caller runs unprotected).
        previous: the holder information a killed previous holder left in the file, or None.
    """

    def __init__(self, path: str | os.PathLike[str], *, what: str | None = None) -> None:
        self.path = Path(path)
        self.what = what or str(self.path)
        self.locked = False
        self.previous: dict[str, Any] | None = None
        self._fd: int | None = None

    def acquire(self) -> "FileLock":
        """Take the lock without waiting.

        Returns:
            ``self``.

        Raises:
            LockHeld: another process holds it; the message names the holder's pid, host,
                command and start time.
            OSError: the lock file cannot be created or written (the message names it; a lock
                file that could not be written, e.g. on a full disk, is removed).
        """
        if self._fd is not None:
            raise RuntimeError(f"{self.path}: already held by this FileLock")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            try:
                import fcntl

                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _read_holder(fd)
                os.close(fd)
                raise LockHeld(self._held_message(holder), self.path, holder) from None
            except OSError as exc:
                os.close(fd)
                if exc.errno not in _UNSUPPORTED_LOCK_ERRNOS:
                    raise
                self._warn_unsupported(exc)
                return self
            # The previous holder deletes the file on release: if it did so between our open and
            # our flock, we hold a lock on a deleted file. Start again on the current file.
            try:
                same = os.stat(self.path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        self.previous = _read_holder(fd) or None
        if self.previous:
            log.info("%s: took over a stale lock left by %s (exited)", self.what, describe_holder(self.previous))
        info = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "command": " ".join([os.path.basename(sys.executable), *sys.argv]) if sys.argv and sys.argv[0] else sys.executable,
            "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        }
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, (json.dumps(info) + "\n").encode(), 0)
            os.fsync(fd)
        except OSError as exc:  # a full disk: leave no empty lock file behind, and name it
            with contextlib.suppress(OSError):
                os.unlink(self.path)
            os.close(fd)
            raise OSError(exc.errno, exc.strerror or str(exc), str(self.path)) from exc
        self._fd, self.locked = fd, True
        return self

    def _held_message(self, holder: dict[str, Any]) -> str:
        msg = f"{self.what}: in use by {describe_holder(holder)}; wait for it to finish or stop it (lock file {self.path})"
        if holder.get("pid") and holder.get("host") == socket.gethostname() and not _pid_alive(holder["pid"]):
            msg += (f". pid {holder['pid']} has exited but a process it started still holds the lock "
                    f"(list it with `fuser -v {self.path}`)")
        return msg

    def _warn_unsupported(self, exc: OSError) -> None:
        folder = str(self.path.parent)
        if folder not in _warned_unsupported:
            _warned_unsupported.add(folder)
            log.warning("%s: the filesystem does not support file locks (%s): a second writer would not be detected", folder, exc.strerror)

    def release(self) -> None:
        """Delete the lock file and release the lock (no-op when not held)."""
        fd, self._fd, self.locked = self._fd, None, False
        if fd is None:
            return
        try:
            if os.stat(self.path).st_ino == os.fstat(fd).st_ino:
                os.unlink(self.path)
        except FileNotFoundError:
            pass
        finally:
            os.close(fd)  # closing drops the flock

    def __enter__(self) -> "FileLock":
        return self.acquire()

    def __exit__(self, *exc: Any) -> None:
        self.release()


def lock_path(target: str | os.PathLike[str]) -> Path:
    """The lock file of an output file or folder: the hidden sibling ``.<name>.lock``."""
    target = Path(target)
    return target.parent / f".{target.name}.lock"


def output_lock(target: str | os.PathLike[str], *, what: str | None = None) -> FileLock:
    """A :class:`FileLock` that makes one process at a time the writer of ``target``.

    The lock file is :func:`lock_path` ``(target)``, so every spelling of the path (``./a``,
    ``a``, an absolute path) meets the same lock. Example::

        with output_lock(out_dir, what=f"OUTPUT_DIR {out_dir}"):
            ...  # a second run on out_dir raises LockHeld naming this process

    Args:
        target: the output file or folder (need not exist; its parent folder is created).
        what: how the user names the output, for the refusal message (default: the path).
    """
    return FileLock(lock_path(target), what=what or str(target))


def move_aside(path: str | os.PathLike[str]) -> Path | None:
    """Rename the file ``path`` to a free sibling ``<stem>.<its last write, UTC><suffix>``; never replaces a file.

    For an output that another command wrote and a new write would otherwise delete: the old file is
    kept, under a name that says when it was written (``records.jsonl`` ->
    ``records.20261207T054600Z.jsonl``; ``-1``, ``-2``... appended when that name is taken). Call it
    while holding the output's :func:`output_lock`. A process still writing into the file (without
    the lock) goes on writing into the renamed file: nothing is lost.

    Args:
        path: the file (a symlink is moved as the link).

    Returns:
        The new path, or None when ``path`` does not exist.

    Raises:
        IsADirectoryError: ``path`` is a folder.
        OSError: the folder cannot be written (nothing moved).
    """
    path = Path(path)
    try:
        st = path.lstat()
    except FileNotFoundError:
        return None
    if path.is_dir() and not path.is_symlink():
        raise IsADirectoryError(errno.EISDIR, "is a folder, expected a file", str(path))
    stamp = datetime.fromtimestamp(st.st_mtime, timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    n = 0
    while True:
        aside = path.with_name(f"{path.stem}.{stamp}{f'-{n}' if n else ''}{path.suffix}")
        n += 1
        try:
            os.link(path, aside, follow_symlinks=False)  # fails rather than replace an existing name
        except FileExistsError:
            continue
        except OSError as exc:
            if exc.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EXDEV, errno.EMLINK):
                raise
            if aside.exists() or aside.is_symlink():  # a filesystem without hard links: check, then rename
                continue
            os.rename(path, aside)
            return aside
        os.unlink(path)
        return aside


# ---- temporary folders that survive their writer only as stale, removable leftovers ----------


def claim_temp_dir(out: str | os.PathLike[str], kind: str = "tmp") -> tuple[Path, FileLock]:
    """Create a temporary sibling folder of ``out`` and hold its lock.

    The lock file (``<tmp>.lock``) is taken before the folder is created and released after it
    is gone (by the caller), so a folder whose lock can be taken belongs to a dead writer.

    Returns:
        (the new empty folder ``.<name>.<kind>-<pid>-<random>``, its held :class:`FileLock`;
        call ``release()`` once the folder has been renamed or removed).
    """
    tmp = temp_sibling(out, kind)
    lock = FileLock(tmp.parent / f"{tmp.name}.lock", what=str(tmp)).acquire()
    try:
        tmp.mkdir()
    except BaseException:
        lock.release()
        raise
    return tmp, lock


def _size(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file() and not f.is_symlink())


def remove_stale_temps(folder: str | os.PathLike[str], name: str | None = None, kind: str = "tmp") -> tuple[list[Path], list[Path]]:
    """Remove the temporary folders (:func:`claim_temp_dir`) that killed writers left in ``folder``.

    A folder ``.<name>.<kind>-*`` is removed when its lock file can be taken (its writer is gone);
    one whose writer is alive is left alone. A folder without a lock file (written by an older
    rlec, or on a filesystem without locks) is only reported, with the command to remove it.
    Each removal and report is logged as a warning.

    Args:
        folder: the folder holding the outputs.
        name: the output whose temporary siblings are checked; None: every output's (a
            checkpoint folder whose names change per step).
        kind: the temporary kind (``tmp`` unless the writer chose another).

    Returns:
        (removed folders, reported folders).
    """
    parent = Path(folder)
    if not parent.is_dir():
        return [], []
    pattern = f".{name if name is not None else '*'}.{kind}-*"
    removed, reported = [], []
    for folder in sorted(parent.glob(pattern)):
        if folder.name.endswith(".lock"):
            if not folder.with_name(folder.name[: -len(".lock")]).exists():  # writer died after its rename
                with contextlib.suppress(LockHeld, OSError), FileLock(folder):
                    pass
            continue
        if not folder.is_dir() or folder.is_symlink():
            continue
        lock_file = folder.with_name(folder.name + ".lock")
        if not lock_file.exists():
            log.warning("%s: a partial folder of an interrupted write, from a writer without a lock; if no process writes it, "
                        "remove it: rm -rf '%s'", folder, folder)
            reported.append(folder)
            continue
        try:
            lock = FileLock(lock_file, what=str(folder)).acquire()
        except (LockHeld, OSError):
            continue  # its writer is alive (or the lock cannot be read): not ours to judge
        try:
            if not lock.locked:
                log.warning("%s: a partial folder of an interrupted write (no file locks here to tell whether its writer "
                            "is alive); if no process writes it, remove it: rm -rf '%s'", folder, folder)
                reported.append(folder)
                continue
            size = _size(folder)
            shutil.rmtree(folder, ignore_errors=True)
            log.warning("removed %s (%.1f MiB): a partial folder left by an interrupted write (%s)",
                        folder, size / 2**20, describe_holder(lock.previous or {}))
            removed.append(folder)
        finally:
            lock.release()
    return removed, reported
