"""DRY_RUN's memory model for the 2-layer full-width Qwen3-30B-A3B on one GPU (issue 58): the state figures are exact
counts times dtype sizes, checked against the hand count of megatron_configs/model/qwen3_30b_a3b_2l.json; BF16 and
FP8 differ only in vLLM's weights (FP8 training keeps BF16 parameters and fp32 states)."""

from __future__ import annotations

import json

import pytest

from rlec.cluster.config_check import run_checks
from rlec.layout import ParallelLayout
from rlec.rules.memory import GIB, TrainingSettings, estimate_memory
from rlec.model_shape import ModelShape
from rlec.config_base import CONFIG_DIR
from rlec.run_config import RunConfig

PARAMS = 1_868_573_184  # tests/test_models_build.py counts it by hand


def shape() -> ModelShape:
    return ModelShape.from_hf_config(json.loads((CONFIG_DIR / "model" / "qwen3_30b_a3b_2l.json").read_text()))


@pytest.mark.parametrize(("quantization", "weight_bytes"), [(None, 2), ("fp8", 1)])
def test_one_gpu_states_are_the_hand_counted_bytes(quantization, weight_bytes):
    layout = ParallelLayout(world_size=1, rollout_gpu_memory_utilization=0.3, rollout_quantization=quantization)
    est = estimate_memory(shape(), layout, TrainingSettings(tokens_per_micro_batch=4096), 80 * GIB)
    assert est.params_local == PARAMS
    assert (est.params, est.grads, est.optimizer) == (2 * PARAMS, 4 * PARAMS, 12 * PARAMS)  # bf16, fp32, fp32 master + m + v
    assert est.logits == 4096 * 151_936 * 8
    # vLLM: the embedding and output layer (2 x 311,164,928) stay bf16; the rest at the rollout's weight bytes
    embeddings = 2 * 151_936 * 2048
    assert est.vllm_weights == pytest.approx((PARAMS - embeddings) * weight_bytes + embeddings * 2)
    assert est.rollout_resident == 18 * PARAMS  # no offload: params, grads and optimizer stay beside vLLM


@pytest.mark.parametrize("precision", ["bf16", "fp8"])
def test_the_committed_layout_passes_and_fits_one_80_gb_gpu(compose_rlec, precision):
    cfg = compose_rlec("layout=qwen3_30b_a3b_2l_1gpu", f"precision={precision}")
    findings, est, context = run_checks(RunConfig(cfg), check_paths=False)
    assert [str(f) for f in findings if f.level == "error"] == []
    g = est.as_gib()
    assert (g["params"], g["grads"], g["optimizer"], g["logits"]) == (3.5, 7.0, 20.9, 4.6)
    assert g["vllm_weights"] == (3.5 if precision == "bf16" else 2.3)
    assert est.train_total < context["fraction"] * 80 * GIB and est.rollout_total < 80 * GIB
