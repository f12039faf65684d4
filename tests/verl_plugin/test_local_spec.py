"""``RLEC_LAYER_SPEC=local``: verl's engine builds Megatron's local layer spec (no Transformer Engine) in verl's dtype on a
GPU node (issue 58). On CPU: the switch, the swap of verl's mbridge ``AutoBridge`` when verl's engine module is imported,
and the bf16 local-spec model the swapped bridge builds (no TE module, no fusions whatever verl's overrides ask)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rlec.verl_plugin.local_spec import ENV, local_spec_requested

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("value", "platform", "expected"), [("", "", False), ("local", "", True), ("local", "cpu", False)])
def test_requested_only_off_the_cpu_platform(monkeypatch, value, platform, expected):
    monkeypatch.setenv(ENV, value)
    monkeypatch.setenv("VERL_PLATFORM", platform)
    assert local_spec_requested() is expected


def test_a_bad_value_is_named(monkeypatch):
    monkeypatch.setenv(ENV, "te")
    with pytest.raises(ValueError, match="RLEC_LAYER_SPEC='te': expected 'local'"):
        local_spec_requested()


CHILD = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
import torch
import rlec.verl_plugin  # noqa: F401  (what VERL_USE_EXTERNAL_MODULES does in every verl process)
import verl.workers.engine.megatron.transformer_impl  # noqa: F401  (the post-import hook swaps the bridge)
import verl.models.mcore.mbridge as verl_mbridge
from transformers import AutoConfig
from rlec.megatron.compat import model_provider
from rlec.megatron.parallel import ParallelLayout, init_parallel
from rlec.verl_plugin.local_spec import LocalSpecAutoBridge
out = {"swapped": verl_mbridge.AutoBridge is LocalSpecAutoBridge}
init_parallel(ParallelLayout(world_size=1))
bridge = verl_mbridge.AutoBridge.from_config(AutoConfig.from_pretrained(sys.argv[2]), dtype=torch.bfloat16)
bridge.set_extra_args(moe_grouped_gemm=True, moe_permute_fusion=True, moe_router_dtype="fp32")  # as verl's overlay asks
model = model_provider(bridge)(pre_process=True, post_process=True)
out["te_modules"] = sorted({type(m).__name__ for m in model.modules() if type(m).__name__.startswith("TE")})
out["dtypes"] = sorted({str(p.dtype) for n, p in model.named_parameters() if "layernorm" not in n})
out["fp32"] = sorted({n.split(".")[-2] + "." + n.split(".")[-1] for n, p in model.named_parameters() if p.dtype == torch.float32})
cfg = bridge.config
out["config"] = [cfg.moe_grouped_gemm, cfg.moe_permute_fusion, cfg.moe_router_dtype, str(cfg.params_dtype)]
print("RESULT " + json.dumps(out))
"""


@pytest.mark.slow  # a child interpreter importing Megatron and verl
def test_the_swapped_bridge_builds_a_bf16_local_spec_model(tiny_moe_dir: Path):
    env = {k: v for k, v in os.environ.items() if k != "VERL_PLATFORM"} | {ENV: "local", "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, "-c", CHILD, str(ROOT), str(tiny_moe_dir)], capture_output=True, text=True,
                          timeout=600, cwd=ROOT, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.split("RESULT ", 1)[1])
    assert out["swapped"] is True
    assert out["te_modules"] == []
    # every linear weight in bf16; the local spec's torch RMSNorms start in fp32 (Megatron's Float16Module, which verl's
    # get_model wraps the model in for bf16, casts them)
    assert out["dtypes"] == ["torch.bfloat16"]
    assert out["fp32"] == ["final_layernorm.weight", "input_layernorm.weight", "k_layernorm.weight", "pre_mlp_layernorm.weight",
                           "q_layernorm.weight"]
    assert out["config"] == [False, False, "fp32", "torch.bfloat16"]  # the local spec's no-fusion settings win
