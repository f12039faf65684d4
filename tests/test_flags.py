"""Boolean environment variables accept the same spellings everywhere (rlec/flags.py, issue 34 item 8)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from rlec.flags import FALSE, TRUE, flag, main, parse_flag, resume_mode

REPO = Path(__file__).resolve().parents[1]
SPELLINGS = [(s, True) for s in TRUE] + [(s, False) for s in FALSE]
CASES = SPELLINGS + [(s.upper(), v) for s, v in SPELLINGS] + [(f" {s} ", v) for s, v in SPELLINGS[:2]]


@pytest.mark.parametrize(("value", "on"), CASES)
def test_every_boolean_variable_reads_every_spelling_alike(value, on, monkeypatch):
    assert parse_flag("X", value) is on
    # EVAL_AT_END=0 was refused ("must be true or false") while RESUME=0 was accepted: one parser for both now
    assert flag("EVAL_AT_END", default=not on, env={"EVAL_AT_END": value}) is on
    from rlec.report import verbose

    monkeypatch.setenv("RLEC_VERBOSE", value)
    assert verbose() is on  # RLEC_VERBOSE=false was on


def test_a_bad_spelling_is_refused_naming_the_variable(capsys):
    for bad in ("maybe", "2", "y", "enable"):
        with pytest.raises(ValueError, match=rf"^X='{bad}': expected one of 1/true/yes/on"):
            parse_flag("X", bad)
    with pytest.raises(ValueError, match="EVAL_AT_END='maybe'"):
        flag("EVAL_AT_END", True, env={"EVAL_AT_END": "maybe"})
    assert flag("UNSET", env={}) is False and flag("UNSET", True, env={"UNSET": " "}) is True
    os.environ.pop("RLEC_FLAGS_TEST", None)
    assert main(["RLEC_FLAGS_TEST"]) == 0 and capsys.readouterr().out.strip() == "RLEC_FLAGS_TEST=0"


def test_the_launcher_reads_its_flags_with_the_same_parser():
    env = {**os.environ, "PYTHON": sys.executable, "DRY_RUN": "maybe"}
    done = subprocess.run(["bash", str(REPO / "tools" / "run_megatron_rlec.sh")], env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 2 and done.stderr.strip() == (
        "rlec.flags: DRY_RUN='maybe': expected one of 1/true/yes/on (on) or 0/false/no/off (off)")
    out = subprocess.run([sys.executable, "-m", "rlec.flags", "DRY_RUN", "SKIP_PATH_CHECKS", "PRINT_CONFIG"],
                         env={**env, "DRY_RUN": "Yes", "SKIP_PATH_CHECKS": "off", "PRINT_CONFIG": ""}, cwd=REPO,
                         capture_output=True, text=True, timeout=60)
    assert out.stdout.split() == ["DRY_RUN=1", "SKIP_PATH_CHECKS=0", "PRINT_CONFIG=0"]


@pytest.mark.parametrize(("value", "mode"), [("", "auto"), ("auto", "auto"), ("disable", "disable"), ("resume_path", "resume_path"),
                                             (" Auto ", "auto"), *[(s, "auto") for s in TRUE], *[(s, "disable") for s in FALSE]])
def test_resume_takes_verls_modes_and_every_boolean_spelling(value, mode):
    # the local run mapped RESUME=0 to disable; verl's trainer got RESUME verbatim (trainer.resume_mode=0)
    assert resume_mode("RESUME", value) == mode


def test_a_bad_resume_is_refused_by_the_launcher_before_anything_starts():
    with pytest.raises(ValueError, match=r"^RESUME='maybe': expected one of auto/disable/resume_path"):
        resume_mode("RESUME", "maybe")
    env = {**os.environ, "PYTHON": sys.executable, "RESUME": "sometimes", "DRY_RUN": "1"}
    done = subprocess.run(["bash", str(REPO / "tools" / "run_megatron_rlec.sh")], env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 2 and done.stderr.strip().startswith("rlec.flags: RESUME='sometimes': expected one of")


def test_resume_without_a_variable_name_is_a_usage_error_not_a_traceback(capsys):
    assert main(["--resume"]) == 2
    assert "expected the variable's name" in capsys.readouterr().err
