"""rlec.cluster.main_ppo (issue 34 item 2, verl's path): a full disk at a checkpoint reaches the driver as
Ray's ``RayTaskError`` around rlec's ``OSError(ENOSPC)``; it becomes one line and exit 2, anything else
propagates unchanged. In-process: real ``RayTaskError`` objects, built as Ray's worker builds them, no Ray start."""

from __future__ import annotations

import errno
import json
import sys
import traceback
import types

import pytest
from ray.exceptions import RayTaskError

from rlec.cluster import main_ppo
from rlec.cluster.main_ppo import full_disk_error, full_disk_message


def _remote(exc: BaseException) -> RayTaskError:
    """``exc`` as ``ray.get`` raises it on the driver: a RayTaskError built from the raised error (with its
    traceback text, as Ray's worker does), then its dual ``RayTaskError(<cause class>)`` instance."""
    try:
        raise exc
    except BaseException as raised:  # noqa: BLE001
        text = "".join(traceback.format_exception(raised))
    error = RayTaskError("TaskRunner.run", text, exc, proctitle="ray::TaskRunner.run", pid=1, ip="127.0.0.1")
    return error.as_instanceof_cause()


def _enospc(folder: str) -> OSError:
    """What rlec's CheckpointIntegrityMixin raises (rlec.io.no_space_error), ``from`` the writer's error."""
    full = OSError(errno.ENOSPC, "No space left on device (1.0 MiB free)", folder)
    full.__cause__ = RuntimeError("Worker failure: [enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598")
    return full


def test_a_ray_task_error_around_enospc_is_found_with_its_folder(tmp_path):
    folder = str(tmp_path / "global_step_3")
    error = _remote(_enospc(folder))
    assert isinstance(error, RayTaskError) and isinstance(error, OSError) and error.errno is None  # Ray's dual class
    full = full_disk_error(error)
    assert full is not None and full.errno == errno.ENOSPC and full.filename == folder


def test_a_plain_enospc_and_one_deeper_in_the_chain_are_found(tmp_path):
    folder = str(tmp_path / "global_step_2")
    assert full_disk_error(_enospc(folder)).filename == folder
    outer = RuntimeError("TaskRunner failed")
    outer.__cause__ = _remote(_enospc(folder))
    assert full_disk_error(outer).filename == folder


def test_a_cause_ray_could_not_keep_is_read_from_the_remote_traceback(tmp_path):
    folder = str(tmp_path / "global_step_4")
    text = f"Traceback ...\nOSError: [Errno 28] No space left on device (2.0 MiB free): '{folder}'\n"
    error = RayTaskError("TaskRunner.run", text, RuntimeError("Exception isn't serializable"), proctitle="p", pid=1,
                         ip="127.0.0.1").as_instanceof_cause()
    assert full_disk_error(error).filename == folder


@pytest.mark.parametrize("cause", [OSError(errno.EACCES, "Permission denied", "/ckpt/global_step_3"),
                                   RuntimeError("CUDA out of memory"), ValueError("No space here")])
def test_other_errors_are_not_a_full_disk(cause):
    assert full_disk_error(_remote(cause)) is None
    assert full_disk_error(cause) is None


def test_the_line_names_enospc_the_folder_and_the_checkpoint_a_rerun_resumes(tmp_path):
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("2")
    line = full_disk_message(full_disk_error(_remote(_enospc(str(tmp_path / "global_step_3")))))
    assert "\n" not in line
    assert "No space left on device" in line and str(tmp_path / "global_step_3") in line
    assert "the latest checkpoint is still global_step_2" in line and "rerun" in line


def _fake_verl(monkeypatch, raised: BaseException) -> None:
    """verl.trainer.main_ppo stand-in whose (undecorated) main raises ``raised``."""
    def body(config):
        raise raised

    def decorated():
        raise AssertionError("the Hydra wrapper must not be called")

    decorated.__wrapped__ = body
    trainer = types.ModuleType("verl.trainer")
    trainer.main_ppo = types.SimpleNamespace(main=decorated)
    monkeypatch.setitem(sys.modules, "verl.trainer", trainer)


def test_a_full_disk_on_the_driver_is_exit_2_with_one_line(tmp_path, monkeypatch):
    folder = str(tmp_path / "global_step_3")
    _fake_verl(monkeypatch, _remote(_enospc(folder)))
    with pytest.raises(main_ppo.RunStopped) as stop:
        main_ppo._run_verl(config=None)
    assert stop.value.code == 2
    assert stop.value.message.count("\n") == 0 and "No space left on device" in stop.value.message and folder in stop.value.message


def test_the_line_is_printed_once_the_console_is_back_when_the_runs_stderr_was_on_the_full_disk(tmp_path, monkeypatch,
                                                                                               capfd):
    """A real full disk under ``make run`` (700 MB tmpfs): stderr was verl.log on that disk during the run, so
    printing the line there raised ``OSError: [Errno 28]`` and the run ended with a traceback and status 1.
    Here the run's stderr is /dev/full (every write fails with ENOSPC)."""
    import hydra

    folder = str(tmp_path / "global_step_2")
    _fake_verl(monkeypatch, _remote(_enospc(folder)))
    sys.modules["verl.trainer"].main_ppo.__file__ = str(tmp_path / "main_ppo.py")
    monkeypatch.setattr(hydra, "main", lambda **kw: (lambda task: (lambda: task(None))))

    def wrap(config, body):  # rlec.verl_report.run_with_report: stderr to the log during the run, then back
        console = sys.stderr
        sys.stderr = open("/dev/full", "w")  # noqa: SIM115 - what sys.stderr writes to while fd 2 is the log
        try:
            body(config)
        finally:
            full, sys.stderr = sys.stderr, console
            try:
                full.close()
            except OSError:
                pass

    with pytest.raises(SystemExit) as stop:
        main_ppo.main(wrap=wrap)
    assert stop.value.code == 2
    err = capfd.readouterr().err
    assert err.count("\n") == 1 and "No space left on device" in err and folder in err and "Traceback" not in err


def test_any_other_error_propagates_unchanged(monkeypatch):
    raised = _remote(RuntimeError("CUDA out of memory"))
    _fake_verl(monkeypatch, raised)
    with pytest.raises(RuntimeError) as caught:
        main_ppo._run_verl(config=None)
    assert caught.value is raised


@pytest.mark.slow  # starts a local Ray (~6 s)
def test_a_full_disk_raised_in_a_real_ray_actor_is_found_on_the_driver(tmp_path):
    """The round trip the fast tests build by hand: rlec's OSError(ENOSPC) raised in an actor method (as in
    verl's TaskRunner), serialized by Ray, raised by ``ray.get`` on the driver."""
    import ray

    folder = str(tmp_path / "global_step_3")

    @ray.remote(num_cpus=0)
    class Runner:
        def run(self):  # self-contained: Ray's worker cannot import this test module
            import errno as errno_

            try:
                raise RuntimeError("Worker failure: [enforce fail at inline_container.cc:672] . unexpected pos")
            except RuntimeError as exc:
                raise OSError(errno_.ENOSPC, "No space left on device (1.0 MiB free)", folder) from exc

    ray.init(num_cpus=1, include_dashboard=False)
    try:
        with pytest.raises(RayTaskError) as caught:
            ray.get(Runner.remote().run.remote())
    finally:
        ray.shutdown()
    full = full_disk_error(caught.value)
    assert full is not None and full.errno == errno.ENOSPC and full.filename == folder


def test_a_non_finite_update_stopped_in_the_taskrunner_is_one_line_and_exit_2(monkeypatch):
    """rlec.verl_plugin.update_guard's error reaches the driver inside Ray's RayTaskError (the retired local loop
    printed one line and exited 2; verl's path printed Hydra's traceback and exited 1)."""
    from rlec.verl_plugin.update_guard import NonFiniteUpdateError

    _fake_verl(monkeypatch, _remote(NonFiniteUpdateError("step 4: actor/grad_norm=nan after the update: stopped")))
    with pytest.raises(main_ppo.RunStopped) as stop:
        main_ppo._run_verl(config=None)
    assert stop.value.code == 2
    assert stop.value.message == "rlec.cluster.main_ppo: error: step 4: actor/grad_norm=nan after the update: stopped"


# ---- --launch-check: the launcher's checks and verl's driver in one process -----------------------------------------

REPO = __import__("pathlib").Path(__file__).resolve().parents[2]


def test_the_checks_compose_the_config_verl_runs() -> None:
    """hydra's --config-path / --config-name (the launcher's, then the user's "$@") reach the check as its
    --config-dir / --config-name in order, so the last one wins in both (they were dropped: a user's
    --config-name was run by verl but never checked)."""
    args = ["--config-path", "/r/megatron_configs", "--config-name", "rlec", "layout=cpu", "-cn=mine", "trainer.x=1"]
    assert main_ppo._check_arguments(args) == ["--config-dir", "/r/megatron_configs", "--config-name", "rlec",
                                               "layout=cpu", "--config-name", "mine", "trainer.x=1"]


@pytest.mark.parametrize("args", [["-cd", "/extra"], ["--config-dir=/extra"]])
def test_hydras_added_search_path_is_refused_by_name(args, capsys) -> None:
    with pytest.raises(SystemExit) as stopped:
        main_ppo._check_arguments(["layout=cpu", *args])
    assert stopped.value.code == 2
    assert args[0].partition("=")[0] in capsys.readouterr().err


def test_launch_check_needs_the_separator() -> None:
    with pytest.raises(SystemExit, match="needs '--' before verl's arguments"):
        main_ppo.launch_check(["--launch-check", "--launch-dir", "/nonexistent", "layout=cpu"])


def test_a_passing_launch_check_writes_the_folder_then_tees(tmp_path, capsys, monkeypatch) -> None:
    """The passing path: config.yaml and git.txt (one trailing newline) written, the note on stderr before the
    console is tee'd (so not in train.log), and verl's arguments returned unchanged."""
    run = tmp_path / "ckpt" / "launches" / "t"
    teed: list[tuple] = []
    monkeypatch.setattr(main_ppo, "_tee_console", lambda log: teed.append((log, capsys.readouterr().err)))
    hydra = ["--config-path", str(REPO / "megatron_configs"), "--config-name", "rlec", "layout=tiny_1gpu",
             f"trainer.default_local_dir={tmp_path / 'ckpt'}"]
    returned = main_ppo.launch_check(["--launch-check", "--launch-dir", str(run), "--launch-record", "commit: abc\n\n",
                                      "--launch-note", "launch t: note", "--skip-path-checks", "--", *hydra])
    assert returned == hydra
    assert (run / "git.txt").read_text() == "commit: abc\n"
    env = json.loads((run / "environment.json").read_text())  # the machine and installation (rlec.machine)
    assert env["packages"]["count"] > 0 and any(p.startswith("verl==") for p in env["packages"]["packages"])
    assert "trainer:" in (run / "config.yaml").read_text()
    assert len(teed) == 1 and teed[0][0] == run / "train.log"
    assert teed[0][1].rstrip().endswith("launch t: note")  # printed before the tee: the console's, not train.log's


_TEE_CHILD = """
import os, sys
from pathlib import Path
from rlec.cluster.main_ppo import _tee_console
print("before", flush=True)  # the check's report: the console only
_tee_console(Path(sys.argv[1]))
print("from python", flush=True)
print("to stderr", file=sys.stderr, flush=True)
os.system("echo from a child process")
sys.exit(3)
"""


@pytest.mark.parametrize("log_name", ["train.log", "/dev/full"])
def test_the_console_goes_to_train_log_and_the_exit_status_is_the_runs(tmp_path, log_name) -> None:
    """The launcher's ``2>&1 | tee -a train.log`` moved into the process (``_tee_console``): what the process and its
    children print after the folder exists reaches the console and the file, and the status is the process's own,
    not tee's: also when the file cannot be written (``/dev/full``, a full disk), where the console keeps it all."""
    import subprocess

    log = tmp_path / log_name if not log_name.startswith("/") else log_name
    proc = subprocess.run([sys.executable, "-c", _TEE_CHILD, str(log)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 3, proc.stderr
    for line in ("before", "from python", "to stderr", "from a child process"):
        assert line in proc.stdout, proc.stdout
    if log_name == "train.log":
        assert log.read_text().splitlines() == ["from python", "to stderr", "from a child process"]


_TEE_RAY_CHILD = """
import sys, types
from pathlib import Path
from rlec.cluster.main_ppo import _tee_console
ray = types.ModuleType("ray")  # stands in for a started Ray: its own exit handler was registered first
ray.is_initialized = lambda: True
ray.shutdown = lambda: print("ray: shut down", flush=True)
sys.modules["ray"] = ray
_tee_console(Path(sys.argv[1]))
print("last step", flush=True)
"""


def test_what_rays_shutdown_prints_reaches_train_log(tmp_path) -> None:
    """Exit handlers run last-registered first: the tee's ran before Ray's, so what Ray's shutdown printed was lost;
    the tee's handler shuts a started Ray down before it closes the pipe."""
    import subprocess

    log = tmp_path / "train.log"
    proc = subprocess.run([sys.executable, "-c", _TEE_RAY_CHILD, str(log)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert log.read_text().splitlines() == ["last step", "ray: shut down"]


def test_a_refused_launch_check_exits_2_and_writes_nothing(tmp_path, capsys) -> None:
    """The checks refuse (a bad value, named) before the launch's folder, git.txt or train.log exist."""
    run = tmp_path / "ckpt" / "launches" / "t"
    with pytest.raises(SystemExit) as stopped:
        main_ppo.launch_check(["--launch-check", "--launch-dir", str(run), "--launch-record", "commit: x", "--",
                               "--config-path", str(REPO / "megatron_configs"), "--config-name", "rlec", "layout=cpu", "precision=fp32",
                               "rlec.grading.timeout_s=0", f"trainer.default_local_dir={tmp_path / 'ckpt'}"])
    assert stopped.value.code == 2
    assert "rlec.grading.timeout_s" in capsys.readouterr().err
    assert not (tmp_path / "ckpt").exists()


def test_the_interrupted_line_names_the_step_in_progress_and_the_checkpoint_a_rerun_resumes(tmp_path) -> None:
    from rlec.cluster.main_ppo import interrupted_message

    assert interrupted_message(tmp_path) == ("interrupted at step 1; no checkpoint saved yet: rerun the same command "
                                             "to start again")
    (tmp_path / "metrics.jsonl").write_text('{"step": 1, "x": 0.5}\n{"step": 2}\n{"step": 3, "x"')  # a torn last line
    assert interrupted_message(tmp_path).startswith("interrupted at step 3; no checkpoint saved yet")
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("2\n")
    assert interrupted_message(tmp_path) == "interrupted at step 3; rerun the same command to resume from step 2's checkpoint"
    # Ctrl-C between step 3's save and its metrics line: the resume skips the unlogged checkpoint for step 2's
    for step in (2, 3):
        (tmp_path / f"global_step_{step}").mkdir()
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("3\n")
    assert interrupted_message(tmp_path) == "interrupted at step 4; rerun the same command to resume from step 2's checkpoint"


def test_ctrl_c_on_the_driver_is_one_line_exit_130_and_stops_ray(tmp_path, monkeypatch, capfd) -> None:
    """Issue 55 item 3, in-process: KeyboardInterrupt out of verl's main (Ctrl-C in ``ray.get``) becomes one line and
    status 130, after the Ray cluster the driver started is shut down (its processes block SIGINT). The real SIGINT to
    a launch's process group: tests/tools/test_verl_cpu_run.py."""
    import hydra

    _fake_verl(monkeypatch, KeyboardInterrupt())
    sys.modules["verl.trainer"].main_ppo.__file__ = str(tmp_path / "main_ppo.py")
    config = types.SimpleNamespace(trainer=types.SimpleNamespace(default_local_dir=str(tmp_path)))
    monkeypatch.setattr(hydra, "main", lambda **kw: (lambda task: (lambda: task(config))))
    (tmp_path / "metrics.jsonl").write_text('{"step": 1}\n')
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("1\n")
    shut_down = []
    monkeypatch.setattr(main_ppo, "_shutdown_ray", lambda: shut_down.append(True))
    with pytest.raises(SystemExit) as stop:
        main_ppo.main()
    assert stop.value.code == 130 and shut_down == [True]
    err = capfd.readouterr().err
    assert err.strip() == "interrupted at step 2; rerun the same command to resume from step 1's checkpoint", err
