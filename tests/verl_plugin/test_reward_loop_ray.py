"""The ``rlec`` reward manager through verl's RewardLoopManager with one Ray worker on CPU.

The job (tests/verl_plugin/reward_loop_job.py) runs in a fresh process started without
VERL_USE_EXTERNAL_MODULES, so the Ray worker can only learn about rlec through the runtime env
built from the composed config (what multi-node runs rely on); test_reward_manager.py shows that
without the variable verl does not know "rlec". The job also stores the records in
TransferQueue the way verl's agent loop does and reads the training metrics back through the
trainer hook.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

JOB = Path(__file__).with_name("reward_loop_job.py")


def run_job(model_dir: Path, mode: str, repo_root: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "VERL_USE_EXTERNAL_MODULES"}
    env["PYTHONPATH"] = str(repo_root)
    proc = subprocess.run([sys.executable, str(JOB), str(model_dir), mode], env=env, capture_output=True,
                          text=True, timeout=600)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    detail = f"job failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    assert proc.returncode == 0 and lines, detail
    return json.loads(lines[-1][len("RESULT "):])


@pytest.mark.slow
def test_reward_loop_worker_registers_rlec_through_runtime_env_and_scores(tiny_moe_dir, repo_root):
    spec = importlib.util.spec_from_file_location("reward_loop_job", JOB)
    job = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(job)
    out = run_job(tiny_moe_dir, "with-env", repo_root)
    assert "error" not in out, out
    assert out["scores"] == pytest.approx(job.EXPECTED)
    assert out["extra"]["b"] == job.EXPECTED_B
    assert out["extra"]["target_p"] == [s[3]["target_p"] for s in job.SAMPLES]
    assert out["extra"]["outcome"] == ["correct", "incorrect", "abstain", "correct", "correct", "incorrect", "correct"]
    assert {"score", "acc", "bucket", "global_step", "reward_b1"} <= set(out["keys"])
    # the trainer hook reads the same records back from TransferQueue; the padding row is dropped
    m = out["metrics"]
    assert m["rlec/count"] == 7 and m["rlec/accuracy"] == pytest.approx(4 / 7)
    assert m["rlec/b"] == pytest.approx((4 * 0.5 + 0.0 + 1.0 + 1.0) / 7)
    assert m["rlec/reward/mean"] == pytest.approx(sum(job.EXPECTED) / 7)
    assert (m["rlec/p0.0-0.3/count"], m["rlec/p0.0-0.3/accuracy"]) == (3, pytest.approx(1 / 3))
    assert m["rlec/p0.6-1.0/abstention_rate"] == 1.0 and m["rlec/src_math_dapo/count"] == 5
