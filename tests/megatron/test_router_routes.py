"""The CPU rollout's routed experts equal Megatron's router choices for the same tokens and weights (issue 32).

One plain process (``tests/megatron/megatron_checks.py`` plan ``routes``): the tiny Qwen3-MoE's HF weights in
Megatron (local spec, fp32, gloo) and in transformers; per sequence, the tokens on which the set of experts
Megatron's ``TopKRouter`` chose differs from ``rlec.cpu.rollout_scores.score_tokens``' routes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
CHECKS = REPO / "tests" / "megatron" / "megatron_checks.py"
RESULT_PREFIX = "RESULT_JSON "


def test_rollout_routes_equal_megatrons_router_choices(tiny_moe_dir):
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    env.update(OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONPATH=str(REPO), PYTHONWARNINGS="ignore")
    proc = subprocess.run([sys.executable, str(CHECKS), json.dumps([{"routes": {"hf": str(tiny_moe_dir)}}])], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=900)
    lines = [line for line in proc.stdout.splitlines() if line.startswith(RESULT_PREFIX)]
    assert proc.returncode == 0 and lines, f"rc={proc.returncode}\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    (result,) = json.loads(lines[-1][len(RESULT_PREFIX):])
    for seq in result["sequences"]:
        assert seq["layers"] == 2 and seq["experts_per_token"] == 2, seq  # every layer's router, top-2 each
        assert seq["differ"] == 0, seq
