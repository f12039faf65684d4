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
from rlec.run_config import RunConfig

pytestmark = pytest.mark.minutes(2.3)  # tests/conftest.py: the longest modules start first

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


SMOKE_1X8 = ["layout=qwen3_30b_a3b_1x8", "data.train_batch_size=16", "actor_rollout_ref.rollout.n=4",
             "actor_rollout_ref.actor.ppo_mini_batch_size=8", "data.max_response_length=128",
             "actor_rollout_ref.model.path=/nonexistent/tiny"]  # the shape then comes from rlec.check.model_shape


def test_gpus_takes_1_or_8_and_8_needs_eight_gpus(tmp_path):
    proc = bash(str(SMOKE), "--gpus", "3", OUT=str(tmp_path / "a"))
    assert proc.returncode == 2 and "--gpus takes 1 (the tiny_1gpu layout) or 8" in proc.stderr
    proc = bash(str(SMOKE), "--gpus", "8", OUT=str(tmp_path / "b"), PATH=f"{Path(sys.executable).parent}:/usr/bin:/bin")
    assert proc.returncode == 1 and "--gpus 8 needs 8 GPUs on this node; nvidia-smi lists 0" in proc.stderr
    assert "--gpus 8" in bash(str(SMOKE), "--help").stdout


@pytest.mark.parametrize("precision", ["bf16", "fp8"])
def test_the_1x8_tiny_model_passes_the_1x8_layout_rules_and_the_1gpu_one_does_not(compose_rlec, precision):
    """The 8-GPU smoke model must satisfy TP 4 (heads), EP 8 (experts) and, in FP8, rollout EP 4 with
    128-wide slices; the 1-GPU tiny model (2 KV heads) cannot run that layout."""
    from rlec.cluster.config_check import run_checks

    cfg = compose_rlec(*SMOKE_1X8, f"precision={precision}", "rlec.check.model_shape=tiny_qwen3_moe_1x8")
    findings, _, _ = run_checks(RunConfig(cfg), check_paths=False)
    assert [str(f) for f in findings if f.level == "error"] == []
    meg, rollout = cfg.actor_rollout_ref.actor.megatron, cfg.actor_rollout_ref.rollout
    assert (meg.tensor_model_parallel_size, meg.expert_model_parallel_size, meg.sequence_parallel) == (4, 8, True)
    assert rollout.expert_parallel_size == (4 if precision == "fp8" else 1)
    if precision == "fp8":
        assert meg.override_transformer_config.fp8_recipe == "blockwise" and rollout.quantization == "fp8"
    old, _, _ = run_checks(RunConfig(compose_rlec(*SMOKE_1X8, f"precision={precision}", "rlec.check.model_shape=tiny_qwen3_moe")),
                           check_paths=False)
    assert any("KV heads" in str(f) for f in old if f.level == "error")


@pytest.mark.slow
def test_smoke_check_with_8_gpus_validates_the_1x8_commands(tmp_path):
    """`gpu_smoke.sh --gpus 8 --check`: builds the 1x8 tiny model and the data, then runs both 2-step
    commands of the one-node layout through the launcher's DRY_RUN (paths checked)."""
    proc = bash(str(SMOKE), "--gpus", "8", "--check", timeout=1800, OUT=str(tmp_path / "smoke"), PYTHON=sys.executable)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = {line.split("|")[1].strip(): line.split("|")[2].strip() for line in proc.stdout.splitlines()
            if line.startswith("| ") and not line.startswith("| step")}
    assert rows == {"setup": "ok", "inputs": "ok", "train-1x8-bf16": "ok", "train-1x8-fp8": "ok"}
    for precision in ("bf16", "fp8"):
        log = (tmp_path / "smoke" / f"train-1x8-{precision}.log").read_text()
        assert "result  OK" in log and "models/tiny_qwen3_moe_1x8" in log and "paths   model " in log
        assert "layout  8 GPUs: TP 4 PP 1 CP 1 DP 2 | EP 8 ETP 1 | rollout TP 4 DP 1 EP " in log
        config = (tmp_path / "smoke" / f"train-1x8-{precision}.config.yaml").read_text()
        assert "total_training_steps: 2" in config and "n_gpus_per_node: 8" in config and "sequence_parallel: true" in config
    fp8 = (tmp_path / "smoke" / "train-1x8-fp8.config.yaml").read_text()
    assert "quantization: fp8" in fp8 and "fp8_recipe: blockwise" in fp8 and "expert_parallel_size: 4" in fp8


def _mismatch_of(log: Path) -> str:
    """gpu_smoke.sh's ``mismatch_of`` on ``log`` (the function alone, sourced from the script)."""
    proc = subprocess.run(["bash", "-c", f'source <(sed -n "/^mismatch_of()/,/^}}/p" {SMOKE}); mismatch_of "$1"', "_", str(log)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def test_smoke_table_records_the_last_steps_mismatch_metrics(tmp_path):
    """The training rows of the summary table carry verl's mismatch metrics of the run's last step (issue 32)."""
    log = tmp_path / "train-bf16.log"
    log.write_text("(TaskRunner pid=1) step:1 - actor/entropy:11.9 - rollout_corr/kl:np.float64(1.2e-07) - "
                   "rollout_corr/k3_kl:3.4e-09 - training/rollout_probs_diff_max:0.0001\n"
                   "(TaskRunner pid=1) step:2 - rollout_corr/k3_kl:np.float64(5e-09) - rollout_corr/kl:-2.5e-07 - "
                   "training/rollout_probs_diff_max:0.0002 - actor/pg_loss:0.1\nTraining finished\n")
    assert _mismatch_of(log) == "kl -2.5e-07, k3_kl 5e-09, rollout_probs_diff_max 0.0002"
    log.write_text("result  OK\n")  # DRY_RUN (--check): no training step
    assert _mismatch_of(log) == "-"
    assert "| step | result | seconds | mismatch (last step) | log |" in SMOKE.read_text()
