"""verl's own trainer on CPU, end to end: `TRAINER=verl bash tools/run_megatron_rlec.sh` (issue 23).

The same entry point, config tree and rlec plugins as the cluster (``python -m verl.trainer.main_ppo
--config-name rlec``), on the ``cpu`` layout: the rlec_hf rollout behind verl's agent loop, rlec's reward
manager in verl's reward loop, verl's advantage and Megatron update over gloo, the weight sync to the
rollout, validation, verl's checkpoint, and a resume that continues from it. One scenario per run
(each run pays ~90 s of Ray, TransferQueue and Megatron start-up, then ~1-2 min per step on 2 cores).
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]


def _run(out: Path, data: Path, model: Path, steps: int, *overrides: str, timeout: int = 1500) -> subprocess.CompletedProcess:
    env = {**os.environ, "TRAINER": "verl", "STEPS": str(steps), "OUTPUT_DIR": str(out), "DATA_DIR": str(data),
           "MODEL_PATH": str(model), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHON": os.environ.get("PYTHON", "python")}
    venv_bin = REPO / ".venv" / "bin"
    if venv_bin.is_dir():
        env["PATH"] = f"{venv_bin}:{env['PATH']}"
        env["PYTHON"] = str(venv_bin / "python")
    return subprocess.run(["bash", str(REPO / "tools" / "run_megatron_rlec.sh"), "trainer.test_freq=-1", *overrides],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)


def _step_metrics(log: str) -> dict[int, dict[str, float]]:
    """verl's console logger lines ``step:N - key:value - ...`` -> {N: {key: value}}."""
    steps: dict[int, dict[str, float]] = {}
    for line in log.splitlines():
        m = re.search(r"step:(\d+) - (.*)$", line)
        if not m:
            continue
        values = {}
        for part in m.group(2).split(" - "):
            key, _, value = part.rpartition(":")
            num = re.search(r"-?[0-9.]+(?:e-?[0-9]+)?", value)
            if key and num:
                values[key] = float(num.group(0))
        steps[int(m.group(1))] = values
    return steps


def test_verl_main_ppo_trains_checkpoints_and_resumes_on_cpu(tmp_path, tiny_moe_dir):
    out, data = tmp_path / "run", tmp_path / "data"
    first = _run(out, data, tiny_moe_dir, steps=2)
    log = first.stdout + first.stderr
    assert first.returncode == 0, log[-6000:]
    metrics = _step_metrics(log)
    assert sorted(metrics) == [1, 2], sorted(metrics)
    for step in (1, 2):
        for key in ("timing_s/gen", "timing_s/old_log_prob", "timing_s/update_actor", "timing_s/update_weights",
                    "actor/entropy", "actor/grad_norm", "critic/score/mean", "response_length/mean"):
            assert key in metrics[step], (step, key)
        assert metrics[step]["actor/grad_norm"] > 0  # a real Megatron update ran
    assert any(k.startswith("rlec/") for k in metrics[2]), "rlec's training metrics are missing"
    assert (out / "global_step_2" / "actor").is_dir()
    assert (out / "latest_checkpointed_iteration.txt").read_text().strip() == "2"
    assert list((out / "launches").glob("*/config.yaml"))  # the resolved config beside the checkpoints

    second = _run(out, data, tiny_moe_dir, steps=3)
    log2 = second.stdout + second.stderr
    assert second.returncode == 0, log2[-6000:]
    assert sorted(_step_metrics(log2)) == [3], "the rerun must continue at step 3, not train steps 1-2 again"
    assert (out / "latest_checkpointed_iteration.txt").read_text().strip() == "3"
    assert (out / "global_step_3" / "actor").is_dir()
