"""A launch is refused while another process still writes into its checkpoint folder (issue 34 item 3: a Ray
worker that outlived its killed launcher went on writing global_step_2/.../__0_0.distcp)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from rlec.rules.resume import LAUNCHER, RUN_FOLDER_ENV, launch_processes, live_writer_findings, live_writers, wait_for_earlier_launch

pytestmark = pytest.mark.skipif(not Path("/proc/self/fdinfo").is_dir(), reason="reads /proc (Linux)")

HOLD = """
import sys, time
f = open(sys.argv[1], sys.argv[2])
print("ready", flush=True)
time.sleep(600)
"""


def _holder(path: Path, mode: str) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(path), mode], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    return proc


def test_a_process_writing_into_the_checkpoint_folder_is_named_and_refused_until_it_is_gone(tmp_path):
    shard = tmp_path / "ckpt" / "global_step_2" / "actor" / "__0_0.distcp"
    shard.parent.mkdir(parents=True)
    shard.write_bytes(b"x")
    cfg = {"trainer": {"default_local_dir": str(tmp_path / "ckpt")}}
    reader = _holder(shard, "rb")  # a reader (e.g. an evaluation) does not race a save
    try:
        assert live_writers(tmp_path / "ckpt") == [] and live_writer_findings(cfg) == []
        writer = _holder(shard, "ab")  # the orphaned worker, still writing its shard
        try:
            found = live_writer_findings(cfg)
            assert len(found) == 1 and found[0].level == "error" and found[0].key == "trainer.default_local_dir"
            assert f"process {writer.pid} (" in found[0].message and str(shard) in found[0].message
            assert f"kill {writer.pid}" in found[0].message
        finally:
            writer.kill()
            writer.wait()
        assert live_writer_findings(cfg) == []  # gone: the rerun goes ahead
    finally:
        reader.kill()
        reader.wait()
    assert live_writer_findings({"trainer": {"default_local_dir": str(tmp_path / "missing")}}) == []


def test_this_launchs_own_open_files_do_not_count(tmp_path):
    own = open(tmp_path / "log.txt", "w")  # e.g. the launcher's stdout redirected into the folder
    try:
        assert live_writers(tmp_path) == []
    finally:
        own.close()


def test_dry_run_and_the_launch_check_refuse_while_the_writer_lives(tmp_path, capsys):
    from rlec.cluster.config_check import main

    shard = tmp_path / "ckpt" / "global_step_2" / "__0_0.distcp"
    shard.parent.mkdir(parents=True)
    args = ["layout=tiny_1gpu", "--skip-path-checks", f"trainer.default_local_dir={tmp_path / 'ckpt'}"]
    writer = _holder(shard, "wb")
    try:
        assert main(args) == 1
        assert f"process {writer.pid} (" in capsys.readouterr().err
    finally:
        writer.kill()
        writer.wait()
    assert main(args) == 0


SLEEP = "import sys, time; print('ready', flush=True); time.sleep(float(sys.argv[1]))"


def _launch_process(folder: Path, seconds: float, *argv: str) -> subprocess.Popen:
    """A stand-in for a process of a launch into ``folder`` (a Ray worker: it carries RLEC_RUN_FOLDER)."""
    import os

    env = {**os.environ, RUN_FOLDER_ENV: os.path.realpath(folder)}
    proc = subprocess.Popen([sys.executable, "-c", SLEEP, str(seconds), *argv], env=env, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    return proc


def test_a_killed_launchs_leftover_process_is_waited_for_then_the_rerun_goes_ahead(tmp_path):
    """Issue 34 item 3: a killed launcher's Ray trainer / workers (they carry RLEC_RUN_FOLDER) may still write the
    checkpoint, tracker or metrics: the rerun waits for them to end instead of racing them, and names them."""
    folder = tmp_path / "ckpt"
    folder.mkdir()
    cfg = {"trainer": {"default_local_dir": str(folder)}}
    other = _launch_process(tmp_path / "other_run", 60)  # a launch into another folder is none of ours
    worker = _launch_process(folder, 2.0)
    try:
        assert [pid for pid, _ in launch_processes(folder)] == [worker.pid]
        now = live_writer_findings(cfg)  # no wait (DRY_RUN): refused, naming the process and how to stop it
        assert len(now) == 1 and now[0].key == "trainer.default_local_dir"
        assert f"process {worker.pid} (" in now[0].message and "earlier launch" in now[0].message
        assert f"kill {worker.pid}" in now[0].message
        said: list[str] = []
        t0 = time.monotonic()
        assert wait_for_earlier_launch(folder, 30, poll_s=0.1, say=said.append) == []
        assert time.monotonic() - t0 < 25, "returned once the process ended, not at the deadline"
        assert len(said) == 1 and str(worker.pid) in said[0] and "waiting up to 30 s" in said[0]
        assert live_writer_findings(cfg, wait_s=5) == []
    finally:
        for proc in (other, worker):
            proc.kill()
            proc.wait()


def test_a_process_that_outlives_the_wait_is_refused_naming_it(tmp_path):
    folder = tmp_path / "ckpt"
    folder.mkdir()
    worker = _launch_process(folder, 60)
    try:
        found = live_writer_findings({"trainer": {"default_local_dir": str(folder)}}, wait_s=0.5)
        assert len(found) == 1 and f"process {worker.pid} (" in found[0].message and "after 0.5 s" in found[0].message
    finally:
        worker.kill()
        worker.wait()


def test_a_running_launcher_into_the_same_folder_is_refused_at_once(tmp_path):
    """Another launch still running (its launcher script alive) is not waited for: refused at once, named."""
    folder = tmp_path / "ckpt"
    folder.mkdir()
    launcher = _launch_process(folder, 60, LAUNCHER)  # argv names the launcher, as `bash tools/run_megatron_rlec.sh`
    try:
        t0 = time.monotonic()
        found = live_writer_findings({"trainer": {"default_local_dir": str(folder)}}, wait_s=30)
        assert time.monotonic() - t0 < 10
        assert len(found) == 1 and "another launch into this folder is running" in found[0].message
        assert f"process {launcher.pid}:" in found[0].message
    finally:
        launcher.kill()
        launcher.wait()


def test_this_launch_and_its_parents_carrying_the_folder_do_not_count(tmp_path, monkeypatch):
    """The launcher exports RLEC_RUN_FOLDER before its own checks run: the checking process and its parents
    carry it and are not an earlier launch."""
    import os

    folder = tmp_path / "ckpt"
    folder.mkdir()
    code = ("import sys; from rlec.rules.resume import launch_processes; "
            "sys.exit(0 if launch_processes(sys.argv[1]) == [] else 1)")
    env = {**os.environ, RUN_FOLDER_ENV: os.path.realpath(folder)}
    assert subprocess.run([sys.executable, "-c", code, str(folder)], env=env).returncode == 0


@pytest.mark.parametrize("value", ["-1", "nan", "inf", "soon"])
def test_config_check_refuses_a_bad_wait(value, capsys):
    from rlec.cluster.config_check import main

    with pytest.raises(SystemExit) as exc:
        main(["--wait-previous", value])
    assert exc.value.code == 2 and "--wait-previous" in capsys.readouterr().err


def test_an_exiting_writer_without_a_command_line_does_not_count(tmp_path, monkeypatch):
    """A SIGKILLed launch's Ray worker, caught between releasing its memory and closing its files (its command line
    already empty), refused the rerun on a loaded 2-core box ("process 31359 () still writes ..."): it can write
    nothing more, so it is not a live writer; a writer with a command line still is."""
    from rlec.rules import resume

    shard = tmp_path / "global_step_2" / "__0_0.distcp"
    shard.parent.mkdir(parents=True)
    writer = _holder(shard, "ab")
    try:
        assert [pid for pid, _, _ in live_writers(tmp_path)] == [writer.pid]
        real = resume._command
        monkeypatch.setattr(resume, "_command", lambda pid: "" if pid == writer.pid else real(pid))
        assert live_writers(tmp_path) == []
    finally:
        writer.kill()
        writer.wait()
