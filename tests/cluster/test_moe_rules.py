"""MoE RL stability in DRY_RUN (rlec.rules.moe): rollout correction on by default, the off-policy warning,
routing replay overlays (router_replay=r2|r3) and GSPO (algorithm=gspo), refusals naming key and rule."""

from __future__ import annotations

import pytest
import torch

from rlec.cluster.config_check import run_checks
from rlec.rules.moe import moe_stability_rules
from rlec.run_config import VerlKeys
from rlec.config import cluster_layouts, gpu_precisions, options
from rlec.run_config import RunConfig

pytestmark = pytest.mark.minutes(1)  # tests/conftest.py: the longest modules start first

LAYOUTS = cluster_layouts()
PRECISIONS = gpu_precisions()


def _errors(findings):
    return [str(f) for f in findings if f.level == "error"]


def _warnings(findings):
    return [str(f) for f in findings if f.level == "warning"]


def test_the_recipe_corrects_bf16_and_fp8_and_returns_rollout_log_probs(compose_rlec):
    for precision in PRECISIONS:
        cfg = compose_rlec(f"precision={precision}")
        rc = cfg.algorithm.rollout_correction
        assert (rc.rollout_is, rc.rollout_is_threshold, rc.rollout_rs, rc.bypass_mode) == ("token", 2.0, None, False), precision
        assert cfg.actor_rollout_ref.rollout.calculate_log_probs is True
        assert (cfg.rlec.check.mismatch_kl_alarm, cfg.rlec.check.mismatch_kl_stop) == (0.004, False)


def test_the_recipe_matches_verls_decoupled_token_is_preset(compose_rlec):
    from verl.trainer.config.algorithm import RolloutCorrectionConfig

    preset = RolloutCorrectionConfig.decoupled_token_is()
    rc = compose_rlec().algorithm.rollout_correction
    for key in ("rollout_is", "rollout_is_threshold", "rollout_rs", "bypass_mode"):
        assert rc[key] == getattr(preset, key), key


def test_the_recipes_default_passes_without_the_off_policy_warning(compose_rlec):
    findings, _, _ = run_checks(RunConfig(compose_rlec()), check_paths=False)
    assert not [w for w in _warnings(findings) if "2510.11370" in w]


def test_moe_with_several_mini_steps_and_no_correction_or_replay_warns_naming_the_evidence(compose_rlec):
    cfg = compose_rlec("algorithm.rollout_correction.rollout_is=null")
    findings, _, _ = run_checks(RunConfig(cfg), check_paths=False)
    found = [w for w in _warnings(findings) if "2510.11370" in w]
    assert len(found) == 1 and "algorithm.rollout_correction.rollout_is" in found[0]
    assert "4 optimizer steps per rollout (data.train_batch_size 256 / ppo_mini_batch_size 64)" in found[0]
    # one optimizer step per rollout, routing replay, or a dense model: no warning
    for extra in (("actor_rollout_ref.actor.ppo_mini_batch_size=256",), ("router_replay=r3",)):
        assert not [w for w in _warnings(run_checks(RunConfig(compose_rlec(*cfg_overrides(extra))), check_paths=False)[0]) if "2510.11370" in w]
    assert not [f for f in moe_stability_rules(VerlKeys.read(cfg), num_experts=0) if f.level == "warning"]


def cfg_overrides(extra):
    return ("algorithm.rollout_correction.rollout_is=null", *extra)


@pytest.mark.parametrize("replay", options("router_replay"))
@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_every_layout_precision_and_routing_replay_composes_and_passes(compose_rlec, fp8_model, layout, precision, replay):
    cfg = compose_rlec(f"layout={layout}", f"precision={precision}", f"router_replay={replay}", *fp8_model(layout, precision))
    findings, est, _ = run_checks(RunConfig(cfg), check_paths=False)
    assert _errors(findings) == [] and est is not None
    assert cfg.actor_rollout_ref.actor.megatron.router_replay.mode == replay.upper()
    assert cfg.actor_rollout_ref.rollout.enable_rollout_routing_replay is (replay == "r3")


def test_committed_routing_replay_overlays():
    assert options("router_replay") == ["r2", "r3"]


def test_routing_replay_composes_on_the_cpu_layout_and_padded_batches_are_refused_elsewhere(compose_rlec, monkeypatch):
    """verl 0.9.1 packs its replay targets without padding; the CPU layout trains padded batches (no Transformer
    Engine for packed attention), where the router_replay_bshd shim lays the routes out as Megatron routes them
    (tests/verl_plugin/test_router_replay.py). Off the CPU platform padded batches with replay are refused with
    verl's error (measured 2026-12-01: the first replayed forward fails)."""
    monkeypatch.setenv("VERL_PLATFORM", "cpu")
    from rlec.cpu import enable_cpu

    enable_cpu(force=True)
    for replay in ("r2", "r3"):
        assert _errors(run_checks(RunConfig(compose_rlec("layout=cpu", "precision=fp32", f"router_replay={replay}")), check_paths=False)[0]) == []
        cfg = compose_rlec("layout=cpu", "precision=fp32", f"router_replay={replay}", "trainer.device=cuda")
        found = _errors(run_checks(RunConfig(cfg), check_paths=False)[0])
        assert any("actor_rollout_ref.actor.megatron.use_remove_padding" in f and "Router replay tensors are not aligned" in f
                   and "trainer.device=cuda" in f for f in found), found


@pytest.mark.parametrize(("overrides", "key", "rule"), [
    (("router_replay=r3", "actor_rollout_ref.rollout.enable_rollout_routing_replay=false"),
     "actor_rollout_ref.rollout.enable_rollout_routing_replay", "must be true for router_replay R3"),
    (("router_replay=r3", "actor_rollout_ref.rollout.name=trtllm"), "actor_rollout_ref.rollout.name", "returns no routed experts"),
    (("router_replay=r2", "algorithm.rollout_correction.bypass_mode=true"), "algorithm.rollout_correction.bypass_mode",
     "R2 records the routes of the old-log-prob pass, which bypass mode skips"),
    (("actor_rollout_ref.actor.megatron.router_replay.mode=R4",), "actor_rollout_ref.actor.megatron.router_replay.mode",
     "must be 'disabled', 'R2' or 'R3'"),
    (("algorithm.rollout_correction.rollout_is=tokens",), "algorithm.rollout_correction.rollout_is", "must be null"),
    (("algorithm.rollout_correction.rollout_is_threshold=0.5",), "algorithm.rollout_correction.rollout_is_threshold",
     "must be a finite TIS cap > 1"),
    (("algorithm.rollout_correction.rollout_is_threshold='2.0_0.5'",), "algorithm.rollout_correction.rollout_is_threshold",
     "0 < lower < 1 < upper"),
    (("algorithm.rollout_correction.rollout_is_threshold=nan",), "algorithm.rollout_correction.rollout_is_threshold",
     "must be a finite TIS cap > 1"),
    (("algorithm.rollout_correction.loss_type=ppo",), "algorithm.rollout_correction.loss_type", "must be 'ppo_clip' or 'reinforce'"),
    (("actor_rollout_ref.rollout.calculate_log_probs=false",), "actor_rollout_ref.rollout.calculate_log_probs",
     "skips the correction silently"),
])
def test_bad_correction_or_replay_settings_are_refused_naming_key_and_rule(compose_rlec, overrides, key, rule):
    found = [f for f in run_checks(RunConfig(compose_rlec(*overrides)), check_paths=False)[0] if f.level == "error"]
    assert any(f.key == key and rule in f.message for f in found), [str(f) for f in found]


def test_routing_replay_of_a_dense_model_is_refused():
    cfg = {"actor_rollout_ref": {"actor": {"megatron": {"router_replay": {"mode": "R2"}}},
                                 "rollout": {"calculate_log_probs": True}}}
    found = [str(f) for f in moe_stability_rules(VerlKeys.read(cfg), num_experts=0) if f.level == "error"]
    assert any("the model is dense" in f for f in found), found


@pytest.mark.slow
def test_a_bad_setting_is_refused_by_the_launcher_before_ray_writing_nothing(tmp_path, repo_root):
    """``TRAINER=verl`` on CPU with R3 and the rollout flag off: exit 1 from the check, nothing built or written."""
    import os
    import subprocess

    out = tmp_path / "run"
    env = {**os.environ, "TRAINER": "verl", "OUTPUT_DIR": str(out), "DATA_DIR": str(tmp_path / "data"),
           "MODEL_PATH": str(tmp_path / "model"), "PYTHON": str(repo_root / ".venv" / "bin" / "python")}
    proc = subprocess.run(["bash", str(repo_root / "tools" / "run_megatron_rlec.sh"), "router_replay=r3",
                           "actor_rollout_ref.rollout.enable_rollout_routing_replay=false"],
                          cwd=repo_root, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]  # a rule refused it (2: early rules)
    assert "enable_rollout_routing_replay" in proc.stdout + proc.stderr
    assert not out.exists() and not (tmp_path / "model").exists() and not (tmp_path / "data").exists()


# ---- GSPO -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("precision", PRECISIONS)
def test_gspo_overlay_composes_with_rlecs_mean_only_advantage(compose_rlec, precision):
    cfg = compose_rlec(f"precision={precision}", "algorithm=gspo")
    actor = cfg.actor_rollout_ref.actor
    assert (actor.policy_loss.loss_mode, actor.loss_agg_mode, actor.clip_ratio_low, actor.clip_ratio_high) == (
        "gspo", "seq-mean-token-mean", 3e-4, 4e-4)
    assert (cfg.algorithm.adv_estimator, cfg.algorithm.norm_adv_by_std_in_grpo) == ("grpo", False)
    assert cfg.reward.reward_manager.name == "rlec"
    assert _errors(run_checks(RunConfig(cfg), check_paths=False)[0]) == []


def test_the_sequence_level_ratio_is_what_reaches_gspos_loss(compose_rlec):
    """verl's registered ``gspo`` loss with the overlay's actor config: sequence A's token log-ratios +0.5 / -0.5
    average to 0 (sequence ratio 1: not clipped, although each token's ratio e^0.5 is far outside 1 +- 4e-4);
    sequence B's +1e-3 / +1e-3 give ratio e^1e-3 > 1 + 4e-4: both its tokens clipped. The loss is the
    seq-mean-token-mean of -A x min(s_i, 1 + 4e-4)."""
    from verl.trainer.ppo.core_algos import get_policy_loss_fn
    from verl.workers.config.actor import ActorConfig, PolicyLossConfig

    section = compose_rlec("algorithm=gspo").actor_rollout_ref.actor
    actor = ActorConfig(strategy="megatron", rollout_n=1, ppo_micro_batch_size_per_gpu=1, loss_agg_mode=section.loss_agg_mode,
                        clip_ratio_low=section.clip_ratio_low, clip_ratio_high=section.clip_ratio_high,
                        policy_loss=PolicyLossConfig(loss_mode=section.policy_loss.loss_mode))
    loss_fn = get_policy_loss_fn(actor.policy_loss.loss_mode)
    old = torch.zeros(2, 2)
    new = torch.tensor([[0.5, -0.5], [1e-3, 1e-3]], requires_grad=True)
    adv = torch.ones(2, 2)
    mask = torch.ones(2, 2)
    loss, metrics = loss_fn(old_log_prob=old, log_prob=new, advantages=adv, response_mask=mask,
                            loss_agg_mode=actor.loss_agg_mode, config=actor)
    expected = -(1.0 + (1 + 4e-4)) / 2
    assert float(loss) == pytest.approx(expected, abs=1e-6)
    assert metrics["actor/pg_clipfrac"] == pytest.approx(0.5)  # B's two tokens, not A's
    loss.backward()
    # A is unclipped: each token's gradient is -A x s_A / |y_A| / 2 sequences = -0.25 (the token ratios would give
    # -e^0.5/4 and e^-0.5/4 with vanilla PPO, and clip both); B is clipped: no gradient
    assert new.grad[0].tolist() == pytest.approx([-0.25, -0.25], abs=1e-6)
    assert new.grad[1].tolist() == pytest.approx([0.0, 0.0], abs=1e-9)
