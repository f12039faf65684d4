"""The local run's entry point: one run per output folder, one-line errors, --help."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rlec.local.runner import main, run
from rlec.local.setup import LocalRunError


def test_a_second_run_on_the_same_output_folder_is_refused_naming_the_holder(tmp_path: Path) -> None:
    from rlec.io import output_lock

    out = tmp_path / "run"
    with output_lock(out, what=f"OUTPUT_DIR {out}"):
        with pytest.raises(LocalRunError, match=rf"OUTPUT_DIR {out}: in use by pid {os.getpid()}"):
            run([f"trainer.default_local_dir={out}"])
    assert not out.exists()  # refused before anything was written


def test_bad_settings_are_one_line_with_status_2(capsys, tmp_path: Path) -> None:
    assert main([f"trainer.default_local_dir={tmp_path}", "rlec.local.threads=-1"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("rlec.local: error: rlec.local.threads must be an integer >= 0") and "\n" not in err


def test_help_lists_the_settings_and_exits_0(capsys) -> None:
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "data.train_batch_size = 8" in out and "ENVIRONMENTS" in out


def test_a_ctrl_c_that_third_party_code_swallows_still_stops_at_the_next_step(monkeypatch) -> None:
    """Ctrl-C raises KeyboardInterrupt at once; if a library catches it, the step boundary raises it again."""
    import signal

    from rlec.local import runner

    monkeypatch.setitem(runner._INTERRUPTED, "flag", False)
    runner._stop_if_interrupted()  # no Ctrl-C yet: nothing happens
    try:
        runner._on_sigint(signal.SIGINT, None)
    except BaseException:  # noqa: BLE001 - what a library that swallows it would do
        pass
    with pytest.raises(KeyboardInterrupt):
        runner._stop_if_interrupted()
