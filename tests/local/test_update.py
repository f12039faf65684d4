"""The local update's policy loss is verl's token-mean over the whole batch, whatever the micro-batching."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

CHECK = Path(__file__).with_name("check_update.py")


def test_pg_loss_is_global_token_mean_and_micro_batch_invariant(tiny_moe_dir: Path) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("WORLD_SIZE", None)
    proc = subprocess.run([sys.executable, str(CHECK), str(tiny_moe_dir)], capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(next(line for line in proc.stdout.splitlines() if line.startswith("RESULT_JSON "))[12:])
    # on-policy (ratio 1) the PPO-clip loss is -A per token; token-mean over all 20 response tokens
    for mbs in ("mbs1", "mbs3"):
        assert res[mbs]["pg_loss"] == pytest.approx(res["expected_pg_loss"], abs=1e-6)
    assert res["mbs1"]["grad_norm"] > 0
    assert res["mbs1"]["grad_norm"] == pytest.approx(res["mbs3"]["grad_norm"], rel=1e-5)
