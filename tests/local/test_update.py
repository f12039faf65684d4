"""The local update is verl's policy loss: loss and gradients equal verl's own functions on HF autograd."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

CHECK = Path(__file__).with_name("check_update.py")
pytestmark = pytest.mark.slow  # one child process that imports torch and verl and runs 5 parity cases (~20 CPU-s)


@pytest.fixture(scope="module")
def parity(tiny_moe_dir: Path) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    for var in ("WORLD_SIZE", "RANK", "LOCAL_RANK"):
        env.pop(var, None)
    proc = subprocess.run([sys.executable, str(CHECK), str(tiny_moe_dir)], capture_output=True, text=True, timeout=900, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(next(line for line in proc.stdout.splitlines() if line.startswith("RESULT_JSON "))[12:])


@pytest.mark.parametrize("case", ["token-mean/vanilla/mbs1", "token-mean/vanilla/mbs3", "seq-mean-token-mean/vanilla/mbs2",
                                  "seq-mean-token-sum/vanilla/mbs3", "token-mean/gspo/mbs2"])
def test_local_loss_and_gradients_equal_verls_policy_loss(parity: dict, case: str) -> None:
    res = parity[case]
    assert not res["missing"] and res["compared"] > 10
    assert res["local_loss"] == pytest.approx(res["verl_loss"], rel=1e-5, abs=1e-7)
    assert res["max_grad"] > 1e-6  # a real gradient, not zeros on both sides
    assert res["max_grad_diff"] <= 1e-5 * max(1.0, res["max_grad"]), res


def test_micro_batching_does_not_change_the_loss(parity: dict) -> None:
    assert parity["token-mean/vanilla/mbs1"]["local_loss"] == pytest.approx(parity["token-mean/vanilla/mbs3"]["local_loss"], rel=1e-6)
