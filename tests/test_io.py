"""rlec.io: one-writer locks that name their holder and never go stale, temporary folders that a
killed writer cannot leave behind for good, the up-front writability check, atomic writes.

Killed writers are real processes killed with SIGKILL (no cleanup code runs), started from a few
lines of Python that import only rlec.io, so each costs a fraction of a second.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rlec.io import (
    FileLock,
    LockHeld,
    atomic_dir,
    atomic_write_parquet,
    atomic_write_text,
    check_writable,
    claim_temp_dir,
    lock_path,
    output_lock,
    remove_stale_temps,
)

REPO = Path(__file__).resolve().parents[1]
UNWRITABLE = Path("/sys/rlec-test-unwritable")  # sysfs refuses new files, even to root


def _holder(code: str, ready: Path) -> subprocess.Popen:
    """A Python process that runs ``code`` (with rlec.io imported), then touches ``ready`` and sleeps."""
    script = f"import time, pathlib\nfrom rlec.io import *\n{code}\npathlib.Path({str(ready)!r}).touch()\ntime.sleep(600)\n"
    proc = subprocess.Popen([sys.executable, "-c", script, "--holder-flag"], cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    deadline = time.time() + 60
    while not ready.exists():
        assert proc.poll() is None and time.time() < deadline, "holder process did not start"
        time.sleep(0.05)
    return proc


def _kill(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)


def test_second_writer_is_refused_with_the_holders_pid_and_command(tmp_path: Path) -> None:
    out = tmp_path / "records.jsonl"
    holder = _holder(f"lock = output_lock({str(out)!r}).acquire()", tmp_path / "ready")
    try:
        with pytest.raises(LockHeld) as err:
            output_lock(tmp_path / "." / "records.jsonl", what="--out records.jsonl").acquire()  # another spelling, same lock
        message = str(err.value)
        assert message.startswith("--out records.jsonl: in use by pid ") and f"pid {holder.pid} " in message
        assert "--holder-flag" in message and err.value.holder["pid"] == holder.pid
        assert not out.exists()
    finally:
        _kill(holder)


def test_a_lock_left_by_a_killed_process_never_blocks(tmp_path: Path) -> None:
    out = tmp_path / "outputs"
    holder = _holder(f"lock = output_lock({str(out)!r}).acquire()", tmp_path / "ready")
    _kill(holder)
    assert json.loads(lock_path(out).read_text())["pid"] == holder.pid  # the stale file is still there
    with output_lock(out) as lock:
        assert lock.locked and lock.previous["pid"] == holder.pid
        assert json.loads(lock_path(out).read_text())["pid"] == os.getpid()
    assert not lock_path(out).exists()  # released: the lock file is gone


def test_one_process_cannot_take_its_own_lock_twice(tmp_path: Path) -> None:
    with FileLock(tmp_path / "x.lock"):
        with pytest.raises(LockHeld, match=f"pid {os.getpid()}"):
            FileLock(tmp_path / "x.lock").acquire()
    with FileLock(tmp_path / "x.lock") as again:  # free after release
        assert again.locked and again.previous is None


def test_partial_folder_of_a_killed_writer_is_removed_and_a_live_one_kept(tmp_path: Path) -> None:
    out = tmp_path / "ckpt" / "global_step_3"
    out.parent.mkdir()
    code = f"tmp, lock = claim_temp_dir({str(out)!r}); (tmp / 'shard.distcp').write_bytes(b'x' * 1000)"
    dead = _holder(code, tmp_path / "ready1")
    _kill(dead)
    live = _holder(code.replace("global_step_3", "global_step_4"), tmp_path / "ready2")
    try:
        partial = [p for p in out.parent.iterdir() if p.is_dir()]
        assert len(partial) == 2 and all(p.name.startswith((".global_step_3.tmp-", ".global_step_4.tmp-")) for p in partial)
        legacy = out.parent / ".global_step_2.tmp-123-1700000000"  # written before locks existed
        legacy.mkdir()
        removed, reported = remove_stale_temps(out.parent)  # every name: checkpoint names change per step
        assert [p.name for p in removed] == [p.name for p in partial if p.name.startswith(".global_step_3")]
        assert reported == [legacy] and legacy.is_dir()
        left = sorted(p.name for p in out.parent.iterdir())
        assert len(left) == 3 and any(n.startswith(".global_step_4.tmp-") and not n.endswith(".lock") for n in left)
        assert not any(n.startswith(".global_step_3") for n in left)  # folder and lock file both gone
        assert remove_stale_temps(out.parent, name="global_step_4") == ([], [])  # still being written
    finally:
        _kill(live)
    removed, _ = remove_stale_temps(out.parent, name="global_step_4")
    assert len(removed) == 1 and sorted(p.name for p in out.parent.iterdir()) == [legacy.name]


def test_atomic_dir_keeps_the_old_output_on_failure_and_clears_a_killed_writers_leftover(tmp_path: Path) -> None:
    out = tmp_path / "processed"
    with atomic_dir(out) as tmp:
        (tmp / "a.txt").write_text("old")
    with pytest.raises(RuntimeError), atomic_dir(out) as tmp:
        (tmp / "a.txt").write_text("half")
        raise RuntimeError("crash while writing")
    assert (out / "a.txt").read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["processed"]
    _kill(_holder(f"claim_temp_dir({str(out)!r})", tmp_path / "ready"))
    (tmp_path / "ready").unlink()
    assert len(list(tmp_path.glob(".processed.tmp-*"))) == 2  # the folder and its lock file
    with atomic_dir(out) as tmp:
        (tmp / "a.txt").write_text("new")
    assert (out / "a.txt").read_text() == "new" and sorted(p.name for p in tmp_path.iterdir()) == ["processed"]


def test_claim_temp_dir_holds_its_lock_until_released(tmp_path: Path) -> None:
    tmp, lock = claim_temp_dir(tmp_path / "out")
    assert tmp.is_dir() and tmp.name.startswith(".out.tmp-") and lock.locked
    assert remove_stale_temps(tmp_path, "out") == ([], [])  # our own write in progress is safe
    tmp.rmdir()
    lock.release()
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("kind", ["file_above", "unwritable"])
def test_check_writable_refuses_in_one_line_and_writes_nothing(tmp_path: Path, kind: str) -> None:
    if kind == "file_above":
        (tmp_path / "afile").write_text("x")
        target, error, message = tmp_path / "afile" / "sub" / "out.jsonl", NotADirectoryError, "afile is a file, not a folder"
    else:
        if not UNWRITABLE.parent.is_dir():
            pytest.skip("needs /sys (Linux)")
        target, error, message = UNWRITABLE / "out.jsonl", PermissionError, "cannot write in /sys"
    with pytest.raises(error) as err:
        check_writable(target, label="--out")
    assert str(err.value).startswith(f"--out {target}: ") and message in str(err.value) and "\n" not in str(err.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == (["afile"] if kind == "file_above" else [])
    assert check_writable(tmp_path / "new" / "deeper" / "x", label="--out") == tmp_path / "new" / "deeper" / "x"
    assert not (tmp_path / "new").exists()


def test_atomic_write_text_gives_ordinary_permissions_and_leaves_no_temporary(tmp_path: Path) -> None:
    path = atomic_write_text(tmp_path / "a" / "b.json", "{}\n")
    umask = os.umask(0)
    os.umask(umask)
    assert path.read_text() == "{}\n" and (path.stat().st_mode & 0o777) == 0o666 & ~umask
    assert [p.name for p in path.parent.iterdir()] == ["b.json"]


def test_atomic_write_parquet_writes_pyarrows_bytes_and_a_full_disk_keeps_the_old_file(tmp_path: Path, monkeypatch) -> None:
    """The one atomic parquet writer (the pilot files, the pools, the experiments' stage rows): pyarrow's own bytes,
    written whole or not at all."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table({"q": ["a", "b"], "n": [1, 2]})
    expected = tmp_path / "direct.parquet"
    pq.write_table(table, expected)
    path = atomic_write_parquet(tmp_path / "out" / "t.parquet", table)
    assert path.read_bytes() == expected.read_bytes() and [p.name for p in path.parent.iterdir()] == ["t.parquet"]
    monkeypatch.setattr(os, "fsync", _full_disk)
    with pytest.raises(OSError, match="No space left on device"):
        atomic_write_parquet(path, pa.table({"q": ["c"], "n": [3]}))
    assert path.read_bytes() == expected.read_bytes() and [p.name for p in path.parent.iterdir()] == ["t.parquet"]


def test_save_figure_writes_a_complete_png_and_closes_the_figure(tmp_path, monkeypatch) -> None:
    """A plot is written like every other output: complete or not at all, and its figure is freed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from rlec.io import save_figure

    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])
    path = save_figure(fig, tmp_path / "plots" / "curve.png", dpi=50)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not plt.fignum_exists(fig.number)
    assert sorted(p.name for p in path.parent.iterdir()) == ["curve.png"]

    fig2, _ = plt.subplots()
    monkeypatch.setattr(fig2, "savefig", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("render failed")))
    with pytest.raises(RuntimeError, match="render failed"):
        save_figure(fig2, path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"  # the old file is untouched
    assert not plt.fignum_exists(fig2.number)


def _full_disk(*args, **kwargs):
    import errno

    raise OSError(errno.ENOSPC, "No space left on device")


def test_manifest_accepts_the_folder_it_was_written_for_and_names_each_damaged_file(tmp_path: Path) -> None:
    from rlec.io import MANIFEST_FILE, ManifestError, verify_manifest, write_manifest

    folder = tmp_path / "ckpt"
    (folder / "sub").mkdir(parents=True)
    shard = folder / "__0_0.distcp"
    shard.write_bytes(os.urandom(3 * 2**20))
    (folder / "sub" / "common.pt").write_bytes(b"abc")
    with pytest.raises(ManifestError, match=f"no {MANIFEST_FILE}"):
        verify_manifest(folder)  # a folder whose save never reached the manifest
    write_manifest(folder)
    assert verify_manifest(folder) == 2
    data = bytearray(shard.read_bytes())
    data[2**20: 2**21] = os.urandom(2**20)  # 1 MiB overwritten in the middle: same size, other content
    shard.write_bytes(bytes(data))
    with pytest.raises(ManifestError, match=r"__0_0\.distcp: content differs") as info:
        verify_manifest(folder)
    assert info.value.problems == ["__0_0.distcp: content differs from the manifest (sha256)"]
    (folder / "sub" / "common.pt").write_bytes(b"ab")
    shard.unlink()
    with pytest.raises(ManifestError) as info:
        verify_manifest(folder)
    assert info.value.problems == ["__0_0.distcp is missing", "sub/common.pt has 2 bytes, the manifest 3"]
    (folder / MANIFEST_FILE).write_text("{not json")
    with pytest.raises(ManifestError, match="is unreadable"):
        verify_manifest(folder)


def test_manifest_is_written_atomically_and_a_full_disk_leaves_no_manifest(tmp_path: Path, monkeypatch) -> None:
    import errno

    from rlec.io import MANIFEST_FILE, write_manifest

    (tmp_path / "a.bin").write_bytes(b"x" * 10)
    monkeypatch.setattr(os, "fsync", _full_disk)
    with pytest.raises(OSError) as info:
        write_manifest(tmp_path)
    assert info.value.errno == errno.ENOSPC and info.value.filename == str(tmp_path / MANIFEST_FILE)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.bin"]


def test_no_space_error_finds_enospc_in_the_chain_or_a_full_filesystem(tmp_path: Path, monkeypatch) -> None:
    import errno
    import shutil

    from rlec import io as rio

    target = tmp_path / "global_step_2"
    try:
        try:
            raise OSError(errno.ENOSPC, "No space left on device")
        except OSError as inner:
            raise RuntimeError("Worker failure") from inner
    except RuntimeError as exc:
        chained = exc
    found = rio.no_space_error(chained, target)
    assert found is not None and found.errno == errno.ENOSPC and found.filename == str(target)
    assert "No space left on device" in str(found) and str(target) in str(found)
    # torch's zip writer loses the errno: the full filesystem tells it apart
    zip_error = RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598")
    assert rio.no_space_error(zip_error, target) is None  # this disk has room
    monkeypatch.setattr(shutil, "disk_usage", lambda p: shutil._ntuple_diskusage(10**9, 10**9, 4096))
    assert rio.no_space_error(zip_error, target).errno == errno.ENOSPC
    assert rio.no_space_error(ValueError("x"), target).errno == errno.ENOSPC  # any failure on a full disk


def test_atomic_write_on_a_full_disk_names_the_file_and_leaves_nothing(tmp_path: Path, monkeypatch) -> None:
    import errno

    path = tmp_path / "latest_checkpointed_iteration.txt"
    path.write_text("1\n")
    monkeypatch.setattr(os, "fsync", _full_disk)
    with pytest.raises(OSError, match="No space left on device") as info:
        atomic_write_text(path, "2\n")
    assert info.value.errno == errno.ENOSPC and info.value.filename == str(path)
    monkeypatch.undo()
    assert path.read_text() == "1\n" and sorted(p.name for p in tmp_path.iterdir()) == [path.name]


def test_a_lock_that_cannot_be_written_on_a_full_disk_is_named_and_removed(tmp_path: Path, monkeypatch) -> None:
    import errno

    out = tmp_path / "records.jsonl"
    monkeypatch.setattr(os, "pwrite", _full_disk)
    with pytest.raises(OSError, match="No space left on device") as info:
        output_lock(out).acquire()
    assert info.value.errno == errno.ENOSPC and info.value.filename == str(lock_path(out))
    assert list(tmp_path.iterdir()) == []  # no 0-byte lock file


def test_no_space_error_tells_a_write_bigger_than_the_free_space_after_the_writer_freed_it(tmp_path: Path) -> None:
    """Issue 34 item 2: on a 300 MB tmpfs torch's writer failed, freed its partial shard, and 135 MB were free
    when the error was caught: the free space alone said 'room'. The checkpoint's size against the free space
    when the write began tells it."""
    import errno

    from rlec import io as rio

    target = tmp_path / "global_step_2"
    zip_error = RuntimeError("Worker failure: [enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598")
    free = rio.free_bytes(tmp_path)
    assert free is not None and free > rio.LOW_SPACE_BYTES
    assert rio.no_space_error(zip_error, target, needed=free // 2, free_before=free) is None  # it fitted: another error
    found = rio.no_space_error(zip_error, target, needed=free + 2**20, free_before=free)
    assert found is not None and found.errno == errno.ENOSPC and found.filename == str(target)
    assert "No space left on device (the output needs ~" in str(found) and "MiB were free when it began" in str(found)
    assert rio.no_space_error(zip_error, target, needed=None, free_before=free) is None


def test_no_space_error_does_not_call_a_failure_that_is_no_write_a_full_disk(tmp_path: Path) -> None:
    """A save that fails for another reason (a worker's bug) while space is short is not reported as ENOSPC:
    the space heuristics judge write failures only, so the real error reaches the user."""
    from rlec import io as rio

    target = tmp_path / "global_step_2"
    free = rio.free_bytes(tmp_path)
    bug = RuntimeError("ActorDiedError: the worker died unexpectedly: KeyError 'decoder.layers.0'")
    assert rio.no_space_error(bug, target, needed=free + 2**20, free_before=free) is None
    wrapped = RuntimeError("save failed")
    wrapped.__cause__ = OSError(5, "Input/output error", str(target))  # an OSError in the chain is a write failure
    assert rio.no_space_error(wrapped, target, needed=free + 2**20, free_before=free) is not None


def test_step_folders_newest_first_and_previous_checkpoint_bytes_skips_the_folder_itself(tmp_path):
    from rlec.io import previous_checkpoint_bytes, step_folders

    for step, size in ((2, 10), (10, 30)):
        (tmp_path / f"global_step_{step}").mkdir()
        (tmp_path / f"global_step_{step}" / "w.bin").write_bytes(b"x" * size)
    (tmp_path / "global_step_x").mkdir()  # not a step
    (tmp_path / "global_step_7").write_text("a file, not a folder")
    assert [s for s, _ in step_folders(tmp_path)] == [10, 2]  # numeric order, not text order
    assert step_folders(tmp_path / "missing") == []
    assert previous_checkpoint_bytes(tmp_path / "global_step_11") == 30
    assert previous_checkpoint_bytes(tmp_path / "global_step_10") == 10  # its own partial save is not counted
    assert previous_checkpoint_bytes(tmp_path / "other" / "global_step_1") is None


def test_a_handler_made_while_the_console_is_held_back_keeps_the_real_stderr(capsys) -> None:
    """A library that makes its StreamHandler at import (transformers, verl) while the launcher's check holds the
    console back bound it to the discarded sink for good: the driver, run in the same process, then logged nothing."""
    import logging
    import sys

    from rlec.io import held_back_console

    logger = logging.getLogger("rlec.tests.held_back")
    logger.propagate = False
    with held_back_console() as sink:
        handler = logging.StreamHandler()  # binds the sys.stderr of this moment: the sink
        logger.addHandler(handler)
        print("held back", file=sys.stderr)
        logger.warning("held back too")  # logging.disable(WARNING) meanwhile
    try:
        assert "held back" in sink.getvalue() and "held back too" not in sink.getvalue()
        assert handler.stream is sys.stderr
        logger.warning("after the check")
        assert "after the check" in capsys.readouterr().err
    finally:
        logger.removeHandler(handler)


def test_move_aside_names_the_file_by_its_last_write_and_never_replaces_one(tmp_path: Path) -> None:
    from rlec.io import move_aside

    records = tmp_path / "records.jsonl"
    assert move_aside(records) is None  # nothing there
    kept = []
    for text in ("first\n", "second\n", "third\n"):
        records.write_text(text)
        os.utime(records, (1796622360, 1796622360))  # 2026-12-07 05:46:00 UTC, all three
        kept.append(move_aside(records))
    assert [p.name for p in kept] == ["records.20261207T054600Z.jsonl", "records.20261207T054600Z-1.jsonl",
                                      "records.20261207T054600Z-2.jsonl"]
    assert [p.read_text() for p in kept] == ["first\n", "second\n", "third\n"] and not records.exists()
    (tmp_path / "folder").mkdir()
    with pytest.raises(IsADirectoryError, match="folder"):
        move_aside(tmp_path / "folder")


def test_read_json_object_returns_the_object_and_names_the_file_and_what_was_expected(tmp_path) -> None:
    from rlec.io import read_json_object

    good = tmp_path / "good.json"
    good.write_text('{"a": 1}')
    assert read_json_object(good) == {"a": 1}
    listed = tmp_path / "listed.json"
    listed.write_text("[1, 2]")
    with pytest.raises(ValueError, match=r"listed\.json: expected the run's config, got a JSON list"):
        read_json_object(listed, what="the run's config")
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    with pytest.raises(ValueError, match=r"broken\.json: unreadable \(Expecting"):
        read_json_object(broken)
    with pytest.raises(ValueError, match=r"missing\.json: unreadable \(\[Errno 2\]"):
        read_json_object(tmp_path / "missing.json")
