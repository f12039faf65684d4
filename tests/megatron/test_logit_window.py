"""Windowed output layer (logits only for each row's last K tokens) equals the full computation."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from rlec.megatron.logprobs import window_index

CHECK = Path(__file__).with_name("check_logit_window.py")


def test_window_index() -> None:
    valid = torch.tensor([[1, 1, 1, 1, 1, 0], [1, 1, 0, 0, 0, 0]], dtype=torch.bool)
    # predictions of the last 3 tokens of row 0 (positions 2..4) come from logits at 1..3;
    # row 1 has 2 tokens: only position 1 can be predicted, from logits at 0
    assert window_index(valid, 3).tolist() == [[1, 2, 3], [-1, -1, 0]]


@pytest.mark.slow  # a child process that imports Megatron and builds the tiny model
def test_windowed_log_probs_and_gradients_match_full(tiny_moe_dir: Path) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("WORLD_SIZE", None)
    proc = subprocess.run([sys.executable, str(CHECK), str(tiny_moe_dir)], capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(next(line for line in proc.stdout.splitlines() if line.startswith("RESULT_JSON "))[12:])
    assert result["lp_diff"] < 1e-5
    assert result["outside_zero"]
    assert result["grad_scale"] > 0
    assert result["grad_diff"] < 1e-5 * max(1.0, result["grad_scale"])
