"""The one shim a missing Transformer Engine needs on any machine, a GPU node too (issue 58): megatron-core 0.16.1's
MoE router GEMM tests ``te_general_gemm is not None``, a name never defined when TE does not import, so the MoE
forward raised NameError on an H200 with the local layer spec. Run in a fresh process: the probe must see the
unpatched module, as on a GPU node where apply_cpu_shims does nothing."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

CHILD = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
import torch
from megatron.core.transformer.moe import moe_utils
from rlec.megatron import compat
out = {"te": moe_utils.HAVE_TE, "defined_before": "te_general_gemm" in vars(moe_utils)}
x, w = torch.randn(5, 8, generator=torch.Generator().manual_seed(0)), torch.randn(3, 8, generator=torch.Generator().manual_seed(1))
try:
    moe_utils.RouterGatingLinearFunction.apply(x, w, None, torch.float32)
    out["before"] = "ran"
except NameError as exc:
    out["before"] = f"NameError: {exc}"
out["applied"] = compat.apply_no_te_shims()
out["again"] = compat.apply_no_te_shims()
y = moe_utils.RouterGatingLinearFunction.apply(x, w, None, torch.float32)
out["max_diff"] = float((y - x @ w.t()).abs().max())
print("RESULT " + json.dumps(out))
"""


@pytest.mark.slow  # a child interpreter importing Megatron
def test_router_gemm_without_te_raises_nameerror_unpatched_and_falls_back_to_torch_mm_with_the_shim():
    proc = subprocess.run([sys.executable, "-c", CHILD, str(ROOT)], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.split("RESULT ", 1)[1])
    assert out["te"] is False and out["defined_before"] is False  # this machine has no TE, like the H200 run
    assert out["before"] == "NameError: name 'te_general_gemm' is not defined"
    assert out["applied"] == ["te_general_gemm"] and out["again"] == ["te_general_gemm"]  # once per process
    assert out["max_diff"] == 0.0  # torch.mm(inp, weight.t()) exactly
