"""Every committed megatron_configs combination composes on verl's config and passes verl's and
rlec's checks; impossible layouts are refused with a message that names the limit."""

from __future__ import annotations

import pytest

from rlec.cluster.config_check import run_checks
from rlec.config import CONFIG_DIR, cluster_layouts, options

LAYOUTS = cluster_layouts()
PRECISIONS = options("precision")
VERL_STEPS = {"VERL_USE_EXTERNAL_MODULES", "validate_config", "algorithm", "actor_rollout_ref.rollout",
              "rollout.checkpoint_engine", "reward_manager", "trainer.v1.trainer_mode"}


def errors(findings):
    return [str(f) for f in findings if f.level == "error"]


def test_committed_overlays_exist():
    assert {"qwen3_30b_a3b_4x8", "qwen3_30b_a3b_1x8", "tiny_1gpu"} <= set(LAYOUTS)
    assert {"bf16", "fp8"} <= set(PRECISIONS)


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_every_combination_composes_converts_and_passes(compose_rlec, layout, precision):
    cfg = compose_rlec(f"layout={layout}", f"precision={precision}")
    findings, est, context = run_checks(cfg)
    assert errors(findings) == []
    assert set(context["verl_passed"]) == VERL_STEPS
    assert est is not None and est.train_total < context["fraction"] * context["gpu_memory_gib"] * 2**30
    assert cfg.reward.reward_manager.name == "rlec" and cfg.trainer.v1.trainer_mode == "rlec_sync"
    assert cfg.actor_rollout_ref.actor.strategy == "megatron"
    assert cfg.algorithm.adv_estimator == "grpo" and cfg.algorithm.norm_adv_by_std_in_grpo is False


def test_default_is_4x8_bf16_rlec_algorithm(compose_rlec):
    cfg = compose_rlec()
    assert (cfg.trainer.nnodes, cfg.trainer.n_gpus_per_node) == (4, 8)
    actor = cfg.actor_rollout_ref.actor
    assert (actor.clip_ratio_low, actor.clip_ratio_high, actor.loss_agg_mode) == (0.2, 0.28, "token-mean")
    assert actor.use_kl_loss is False and cfg.algorithm.use_kl_in_reward is False
    assert actor.megatron.override_transformer_config.get("fp8") is None
    assert cfg.ray_kwargs.ray_init.runtime_env.env_vars.VERL_USE_EXTERNAL_MODULES == "rlec.verl_plugin"


def test_fp8_overlay_sets_training_rollout_and_correction(compose_rlec):
    cfg = compose_rlec("precision=fp8")
    tf = cfg.actor_rollout_ref.actor.megatron.override_transformer_config
    assert (tf.fp8, tf.fp8_recipe) == ("e4m3", "blockwise")
    assert cfg.actor_rollout_ref.actor.optim.override_optimizer_config.fp8_recipe == "blockwise"
    assert cfg.actor_rollout_ref.rollout.quantization == "fp8"
    assert cfg.algorithm.rollout_correction.rollout_is == "token"
    assert cfg.ray_kwargs.ray_init.runtime_env.env_vars.NVTE_FP8_BLOCK_SCALING_FP32_SCALES == "1"


def test_tiny_layout_with_real_model_folder_converts_model_config(compose_rlec, tiny_moe_dir):
    cfg = compose_rlec("layout=tiny_1gpu", f"actor_rollout_ref.model.path={tiny_moe_dir}")
    findings, est, context = run_checks(cfg)
    assert errors(findings) == []
    assert "actor_rollout_ref.model" in context["verl_passed"]  # verl's HFModelConfig loaded the folder
    assert context["source"] == str(tiny_moe_dir / "config.json")


INVALID = [
    (("actor_rollout_ref.actor.megatron.tensor_model_parallel_size=8",), "TP 8 must divide the 4 KV heads"),
    (("actor_rollout_ref.actor.megatron.expert_model_parallel_size=3",), "EP 3 must divide the 128 experts"),
    (("trainer.nnodes=1", "trainer.n_gpus_per_node=6"),
     "world size 6 (1 nodes x 6 GPUs) is not a multiple of TP x PP x CP"),
    (("actor_rollout_ref.actor.megatron.pipeline_model_parallel_size=5",), "PP 5 must divide the 48 layers"),
    (("layout=qwen3_30b_a3b_1x8", "actor_rollout_ref.actor.megatron.expert_tensor_parallel_size=2"),
     "EP x ETP = 8 x 2 must divide the 8 GPUs of a pipeline stage"),
    (("actor_rollout_ref.rollout.expert_parallel_size=3",), "rollout EP must be 1 or TP x DP = 4"),
    (("actor_rollout_ref.rollout.tensor_model_parallel_size=3",), "rollout TP 3 must divide the 32 attention heads"),
    (("actor_rollout_ref.actor.ppo_mini_batch_size=48",), "256 must be a multiple of actor.ppo_mini_batch_size 48"),
    (("actor_rollout_ref.actor.ppo_mini_batch_size=4", "actor_rollout_ref.rollout.n=3"),
     "must split evenly over the 8"),
    (("actor_rollout_ref.rollout.n=1",), "rollout.n must be >= 2"),
    (("actor_rollout_ref.actor.ppo_max_token_len_per_gpu=4096",), "cannot hold one sequence"),
    (("layout=qwen3_30b_a3b_1x8", "rlec.check.gpu_memory_gib=80"), "GiB per GPU >"),
    (("actor_rollout_ref.rollout.gpu_memory_utilization=0.9",), "Megatron state left on the GPU"),
    (("actor_rollout_ref.actor.megatron.sequence_parallel=false",), "sequence parallel must be on"),
    (("actor_rollout_ref.actor.megatron.vanilla_mbridge=false",), "Megatron-Bridge, which is not installed"),
    (("++ray_kwargs.ray_init.runtime_env.env_vars.VERL_USE_EXTERNAL_MODULES=other",), "must list rlec.verl_plugin"),
    (("precision=fp8", "ray_kwargs.ray_init.runtime_env.env_vars.NVTE_FP8_BLOCK_SCALING_FP32_SCALES=0"),
     "must be '1' for Transformer Engine's blockwise FP8"),
    (("+actor_rollout_ref.actor.megatron.override_transformer_config.moe_expert_count=4",),
     "not fields of Megatron's config"),
    (("~actor_rollout_ref.actor.megatron.override_transformer_config.moe_router_dtype",),
     "explicitly: the weight bridges"),
    (("trainer.total_training_steps=1",), "the b schedule needs more than one step"),
]


@pytest.mark.parametrize(("overrides", "message"), INVALID, ids=[m for _, m in INVALID])
def test_impossible_layouts_are_refused(compose_rlec, overrides, message):
    findings, _, _ = run_checks(compose_rlec(*overrides))
    assert any(message in e for e in errors(findings)), errors(findings)


def test_rope_theta_must_match_model(compose_rlec, tiny_moe_dir):
    cfg = compose_rlec("layout=tiny_1gpu", f"actor_rollout_ref.model.path={tiny_moe_dir}",
                       "actor_rollout_ref.model.override_config.rope_theta=10000")
    findings, _, _ = run_checks(cfg)
    assert any("mbridge 0.15.1 reads hf_config.rope_theta" in e for e in errors(findings))


def test_verl_own_validation_is_reported(compose_rlec):
    # a layout error verl itself catches (RolloutConfig.__post_init__), reported under verl:
    findings, _, _ = run_checks(compose_rlec("actor_rollout_ref.rollout.expert_parallel_size=3"))
    assert any(e.startswith("ERROR [verl:actor_rollout_ref.rollout]") for e in errors(findings))


def test_changed_algorithm_is_a_warning_not_an_error(compose_rlec):
    findings, _, _ = run_checks(compose_rlec("algorithm.norm_adv_by_std_in_grpo=true"))
    assert errors(findings) == []
    assert any(f.level == "warning" and f.key == "algorithm.norm_adv_by_std_in_grpo" for f in findings)


def test_verl_entry_point_composes_exactly_what_config_check_validates(compose_rlec, repo_root):
    """The launcher trains with `python -m verl.trainer.main_ppo --config-path megatron_configs
    --config-name rlec ...`; Hydra's `--cfg job` prints that config without starting anything."""
    import os
    import subprocess
    import sys

    from omegaconf import OmegaConf

    overrides = ["layout=tiny_1gpu", "precision=fp8"]
    proc = subprocess.run(
        [sys.executable, "-m", "verl.trainer.main_ppo", "--config-path", str(CONFIG_DIR), "--config-name", "rlec",
         *overrides, "--cfg", "job", "--resolve"],
        env=os.environ | {"PYTHONPATH": str(repo_root)}, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout == OmegaConf.to_yaml(compose_rlec(*overrides), resolve=True)
