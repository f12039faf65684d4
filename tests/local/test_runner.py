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
    assert err.startswith("rlec.local: error: ERROR [rlec.local.threads] -1 must be an integer >= 0") and "\n" not in err


@pytest.mark.parametrize("overrides", [
    ["algorithm=e3", "rlec.e3.budget.n_min=20", "rlec.e3.budget.n_max=4"],  # issue 24: refused after 44 s, model written
    ["algorithm.adv_estimator=nonsense"],  # issue 24: crashed after the first rollout
    ["rlec.grading.timeout_s=nan"],
    ["+foo.bar=1"],
])
def test_a_refused_setting_writes_nothing_into_the_output_folder(capsys, tmp_path: Path, overrides: list[str]) -> None:
    out = tmp_path / "run"
    assert main([f"trainer.default_local_dir={out}", *overrides]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("rlec.local: error: ERROR [") and "\n" not in err
    assert not out.exists()


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


def test_main_installs_the_ctrl_c_handler_for_the_run_and_restores_the_default(monkeypatch) -> None:
    """The flag only helps if main() installs the handler around the run, and a later run starts clean."""
    import signal

    from rlec.local import runner

    seen = {}

    def fake_run(args):
        seen["handler"] = signal.getsignal(signal.SIGINT)
        seen["flag"] = runner._INTERRUPTED["flag"]
        runner._on_sigint(signal.SIGINT, None)  # a Ctrl-C during the run

    monkeypatch.setattr(runner, "run", fake_run)
    monkeypatch.setitem(runner._INTERRUPTED, "flag", True)  # left over from an earlier interrupted run
    # as in a terminal (a test run started in the background inherits SIGINT ignored)
    outer = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        assert runner.main(["trainer.total_training_steps=1"]) == 130
        assert seen == {"handler": runner._on_sigint, "flag": False}
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, outer)


def test_a_run_started_with_ctrl_c_ignored_keeps_ignoring_it(monkeypatch) -> None:
    """nohup / background jobs start with SIGINT ignored: the run must not start reacting to it."""
    import signal

    from rlec.local import runner

    seen = {}
    monkeypatch.setattr(runner, "run", lambda args: seen.setdefault("handler", signal.getsignal(signal.SIGINT)))
    outer = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        assert runner.main(["trainer.total_training_steps=1"]) == 0
        assert seen["handler"] is signal.SIG_IGN and signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, outer)


@pytest.mark.parametrize("bad", [{"actor/pg_loss": float("nan")}, {"actor/grad_norm": float("inf")}, {"actor/grad_norm": None}])
def test_a_non_finite_loss_or_grad_norm_stops_the_run_before_saving(bad: dict) -> None:
    from rlec.local.runner import check_finite_update

    check_finite_update(4, {"actor/pg_loss": 0.1, "actor/grad_norm": 2.0})  # finite: nothing happens
    metrics = {"actor/pg_loss": 0.1, "actor/grad_norm": 2.0, **bad}
    if bad.get("actor/grad_norm", 0) is None:
        metrics.pop("actor/grad_norm")
    key = next(iter(bad))
    with pytest.raises(LocalRunError, match=rf"step 4: {key}=\S+ after the update: stopped before saving"):
        check_finite_update(4, metrics)
