"""tools/setup_gpu_env.sh and tools/gpu_smoke.sh on a machine without a GPU: syntax, help, the
launcher rules, the plan of the set-up, the pytest selection the smoke test runs (it must collect
the GPU-marked tests), and (slow) every command the smoke test composes, checked through DRY_RUN."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SETUP, SMOKE = ROOT / "tools" / "setup_gpu_env.sh", ROOT / "tools" / "gpu_smoke.sh"


def bash(*args: str, timeout: int = 120, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT,
                          env=os.environ | {"PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}", **env})


@pytest.mark.parametrize("script", [SETUP, SMOKE], ids=["setup_gpu_env", "gpu_smoke"])
def test_scripts_parse_follow_the_launcher_rules_and_explain_themselves(script):
    assert bash("-n", str(script)).returncode == 0
    text = script.read_text()
    assert text.startswith("#!/usr/bin/env bash\n") and "set -euo pipefail" in text
    assert "pkill" not in text and "killall" not in text
    assert not re.search(r"(?<![\w$])/(work|root|home)/", text)
    helped = bash(str(script), "--help")
    assert helped.returncode == 0 and "--check" in helped.stdout
    assert bash(str(script), "--bogus").returncode == 2


def test_setup_check_prints_the_plan_and_installs_nothing(tmp_path):
    proc = bash(str(SETUP), "--check", VENV=str(tmp_path / "venv"), PYTHON=sys.executable)
    assert proc.returncode == 0, proc.stderr
    assert f"venv {tmp_path / 'venv'}" in proc.stdout
    assert "lock requirements-gpu" in proc.stdout and "would be (re)built" in proc.stdout
    assert not (tmp_path / "venv").exists()


def test_setup_refuses_a_python_the_locks_do_not_cover(tmp_path):
    fake = tmp_path / "python3.10"
    fake.write_text('#!/bin/sh\nif [ "$1" = "-c" ] && [ -n "$2" ]; then echo 3.10; fi\n')
    fake.chmod(0o755)
    proc = bash(str(SETUP), "--check", PYTHON=str(fake))
    assert proc.returncode == 1 and "the locks cover 3.12" in proc.stderr


@pytest.mark.slow  # a child pytest collects the whole suite
def test_smoke_pytest_selection_collects_every_fast_gpu_test():
    """The smoke test runs `pytest -m "gpu and not slow"`: it must find the GPU-marked tests."""
    selection = re.search(r'PYTEST_SELECTION=\((.*)\)', SMOKE.read_text()).group(1)
    assert selection == '-m "gpu and not slow" tests'
    proc = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                           "-m", "gpu and not slow", "tests"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    collected = {line for line in proc.stdout.splitlines() if "::" in line}
    marked = set()
    for path in (ROOT / "tests").rglob("test_*.py"):
        text = path.read_text()
        for m in re.finditer(r"@pytest\.mark\.gpu\n((?:@.*\n)*)def (test_\w+)", text):
            if "mark.slow" not in m.group(1):
                marked.add(f"{path.relative_to(ROOT)}::{m.group(2)}")
    assert marked and {c.split("[")[0] for c in collected} == marked, (collected, marked)
    assert "tests/tools/test_convert_hf_to_mcore.py::test_gpu_te_bf16_conversion_verifies" in marked


@pytest.mark.slow
def test_smoke_check_validates_every_command_it_composes(tmp_path):
    """`gpu_smoke.sh --check`: builds the two tiny models and the sample data, then runs each
    2-step training command through the launcher's DRY_RUN (paths checked) and the converter's --help."""
    proc = bash(str(SMOKE), "--check", timeout=1800, OUT=str(tmp_path / "smoke"), PYTHON=sys.executable)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = {line.split("|")[1].strip(): line.split("|")[2].strip() for line in proc.stdout.splitlines()
            if line.startswith("| ") and not line.startswith("| step")}
    assert rows == {"setup": "ok", "gpu-tests": "ok", "inputs": "ok", "train-bf16": "ok", "train-fp8": "ok", "convert": "ok"}
    for precision, model in (("bf16", "tiny_qwen3_moe"), ("fp8", "tiny_qwen3_moe_fp8")):
        log = (tmp_path / "smoke" / f"train-{precision}.log").read_text()
        assert "result  OK" in log and f"models/{model}" in log and "paths   model " in log
        config = (tmp_path / "smoke" / f"train-{precision}.config.yaml").read_text()
        assert "total_training_steps: 2" in config and "enforce_eager: true" in config
    assert "quantization: fp8" in (tmp_path / "smoke" / "train-fp8.config.yaml").read_text()


@pytest.mark.slow  # gpu_smoke.sh's inputs step starts Python processes that import torch
def test_smoke_inputs_step_fails_when_a_tiny_model_cannot_be_built(tmp_path):
    """The inputs step once reported `ok` after the FP8 tiny model failed to build (ENOSPC), and the
    fault surfaced two steps later as a missing model folder: a failed build must fail the step."""
    out = tmp_path / "smoke"
    out.mkdir()
    (out / "models").write_text("a file where the models folder belongs\n")
    proc = bash(str(SMOKE), "--check", OUT=str(out), PYTHON=sys.executable, SMOKE_STEPS="inputs")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert re.search(r"^\| inputs \| FAILED \(exit 1\) \|", proc.stdout, re.M), proc.stdout
    log = (out / "inputs.log").read_text()
    assert "Traceback" in log and "models" in log
    assert not (out / "data" / "train.parquet").exists()
