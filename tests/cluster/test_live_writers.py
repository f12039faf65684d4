"""A launch is refused while another process still writes into its checkpoint folder (issue 34 item 3: a Ray
worker that outlived its killed launcher went on writing global_step_2/.../__0_0.distcp)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from rlec.cluster.resume import live_writer_findings, live_writers

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
