"""DRY_RUN's rules for MoE RL stability: rollout correction, routing replay (R2 / R3) and off-policy mini-steps.

Run by :func:`rlec.rules.checks.check_layout`, so DRY_RUN and the launcher (the CPU one included) refuse
a bad setting before Ray starts and before anything is written. verl 0.9.1 keys
(``verl/trainer/config/algorithm.py`` ``RolloutCorrectionConfig``, ``verl/workers/config/engine.py``
``EngineRouterReplayConfig``):

Errors:

- ``algorithm.rollout_correction.rollout_is`` not null / ``token`` / ``sequence``;
  ``rollout_is_threshold`` not a finite number > 1 nor a ``"lower_upper"`` string with
  0 < lower < 1 < upper; ``loss_type`` not ``ppo_clip`` / ``reinforce``; ``bypass_mode`` not a bool;
- correction on (``rollout_is``, ``rollout_rs`` or ``bypass_mode``) without
  ``actor_rollout_ref.rollout.calculate_log_probs=true``: verl's trainer then skips the correction
  silently (it runs only when ``rollout_log_probs`` is in the batch);
- ``actor_rollout_ref.actor.megatron.router_replay.mode`` not ``disabled`` / ``R2`` / ``R3``, or
  routing replay on a dense model;
- routing replay with ``actor_rollout_ref.actor.megatron.use_remove_padding=false`` (padded batches) off the
  CPU platform: verl 0.9.1 packs the replay targets without padding, Megatron routes the padded positions
  too, and the first replayed forward raises ``Router replay tensors are not aligned`` (on
  ``trainer.device=cpu`` the ``router_replay_bshd`` shim of :mod:`rlec.cpu.padded_forward` lays the routes
  out as the padded forward routes them);
- R2 with ``bypass_mode=true`` (R2 records the routes of the old-log-prob pass, which bypass mode skips);
- R3 without ``actor_rollout_ref.rollout.enable_rollout_routing_replay=true``, or with a rollout that
  returns no routes (:data:`ROUTE_ROLLOUTS`).

Warning (:data:`R3_EVIDENCE`): an MoE model trained with more than one optimizer step per rollout
(``data.train_batch_size / actor.ppo_mini_batch_size > 1``) with neither routing replay nor rollout correction.
"""

from __future__ import annotations

import math
from typing import Any

from rlec.layout import Finding
from rlec.run_config import CORRECTION, MEGATRON, ROLLOUT, VerlKeys

__all__ = ["threshold_error", "R3_EVIDENCE", "ROUTE_ROLLOUTS", "moe_stability_rules"]

REPLAY_MODE = f"{MEGATRON}.router_replay.mode"
ROUTES_FLAG = f"{ROLLOUT}.enable_rollout_routing_replay"
# rollouts whose server returns TokenOutput.routed_experts (verl's vLLM >= 0.22 and SGLang servers; rlec's CPU rollout)
ROUTE_ROLLOUTS = ("vllm", "sglang", "rlec_hf")
R3_EVIDENCE = ("R3 paper (arXiv 2510.11370): on Qwen3-30B-A3B about 10% of router choices differ between training and "
               "inference; GRPO with 8 mini-steps per rollout collapsed near step 120, with R3 it did not")


def threshold_error(value: Any) -> str | None:
    """Why ``rollout_is_threshold`` is refused, or None (a float > 1, or ``"lower_upper"`` with 0 < lower < 1 < upper)."""
    if isinstance(value, bool):
        return "must be a number > 1 (TIS cap) or a 'lower_upper' string (IcePop), not a bool"
    if isinstance(value, str) and "_" in value:
        try:
            lower, upper = (float(v) for v in value.split("_"))
        except ValueError:
            return "must be 'lower_upper' with two numbers, e.g. '0.5_5.0'"
        if not (math.isfinite(lower) and math.isfinite(upper) and 0 < lower < 1 < upper):
            return "'lower_upper' needs 0 < lower < 1 < upper (IS ratios around 1)"
        return None
    try:
        cap = float(value)
    except (TypeError, ValueError):
        return "must be a number > 1 (TIS cap) or a 'lower_upper' string (IcePop)"
    if not (math.isfinite(cap) and cap > 1):
        return "must be a finite TIS cap > 1 (IS weights are clipped to it; <= 1 clips every token that the rollout favoured)"
    return None


def _correction_rules(k: VerlKeys, out: list[Finding]) -> bool:
    """Rollout-correction findings; returns whether correction is on."""
    is_level = k.rollout_is
    if is_level not in (None, "token", "sequence"):
        out.append(Finding("error", f"{CORRECTION}.rollout_is", f"{is_level!r} must be null (metrics only), 'token' or 'sequence'"))
    # rollout_is_threshold: refused by the early rule set (rlec.rules.settings_rules, threshold_error)
    bypass = k.bypass_mode
    if not isinstance(bypass, bool):
        out.append(Finding("error", f"{CORRECTION}.bypass_mode", f"{bypass!r} must be true or false"))
    elif bypass:  # verl computes no rollout_corr/* metric in bypass mode (trainer_base._compute_advantage)
        out.append(Finding("warning", f"{CORRECTION}.bypass_mode", "true: verl then computes no rollout_corr/* metric "
                           "before the update, so the mismatch alarm (rlec.check.mismatch_kl_alarm) is inactive"))
    loss_type = k.correction_loss_type
    if loss_type not in ("ppo_clip", "reinforce"):
        out.append(Finding("error", f"{CORRECTION}.loss_type", f"{loss_type!r} must be 'ppo_clip' or 'reinforce' (bypass mode's loss)"))
    on = is_level is not None or k.rollout_rs is not None or bypass is True
    if on and not k.calculate_log_probs:
        out.append(Finding("error", f"{ROLLOUT}.calculate_log_probs", f"is false while {CORRECTION} is on: the rollout "
                           "returns no log-probs and verl's trainer then skips the correction silently; set it to true"))
    return on


def _replay_rules(k: VerlKeys, num_experts: int, out: list[Finding]) -> str:
    """Routing-replay findings; returns the mode."""
    mode = str(k.router_replay_mode)
    if mode not in ("disabled", "R2", "R3"):
        out.append(Finding("error", REPLAY_MODE, f"{mode!r} must be 'disabled', 'R2' or 'R3' (router_replay=r2|r3)"))
        return "disabled"
    if mode != "R3" and k.rollout_routing_replay is True:
        if not num_experts:  # rlec_hf refuses routes of a dense model on every request, mid-run
            out.append(Finding("error", ROUTES_FLAG, "true on a dense model: it has no routes to return; set it to false"))
        else:  # verl's own trainer: "only used in R3 mode"; the rollout pays a pass for routes nobody reads
            out.append(Finding("warning", ROUTES_FLAG, f"true with router_replay {mode}: the routes are used by R3 only, "
                               "and recording them costs the rollout a forward pass per request; set it to false"))
    if mode == "disabled":
        return mode
    if not num_experts:
        out.append(Finding("error", REPLAY_MODE, f"{mode} replays MoE routes, but the model is dense"))
    if not k.use_remove_padding and str(k.device) != "cpu":
        out.append(Finding("error", f"{MEGATRON}.use_remove_padding", f"false with router_replay {mode} on "
                           f"trainer.device={k.device}: verl 0.9.1 packs the replay targets "
                           "without padding (set_router_replay_data) while Megatron routes every padded position, so the "
                           "first replayed forward fails ('Router replay tensors are not aligned: scores=(1972, 8), "
                           "targets=(1215, 2)'); set it to true (packed THD sequences; only the CPU platform's "
                           "router_replay_bshd shim, rlec.cpu.padded_forward, replays on padded batches)"))
    if mode == "R2" and k.bypass_mode is True:
        out.append(Finding("error", f"{CORRECTION}.bypass_mode", "true with router_replay R2: R2 records the routes of the "
                           "old-log-prob pass, which bypass mode skips; set bypass_mode=false or use R3"))
    if mode == "R3":
        if not k.rollout_routing_replay:
            out.append(Finding("error", ROUTES_FLAG, "must be true for router_replay R3: the rollout must return the routes it used"))
        name = str(k.rollout_name)
        if name not in ROUTE_ROLLOUTS:
            out.append(Finding("error", f"{ROLLOUT}.name", f"{name!r} returns no routed experts; router_replay R3 needs one "
                               f"of {list(ROUTE_ROLLOUTS)}"))
    return mode


def moe_stability_rules(keys: VerlKeys, num_experts: int) -> list[Finding]:
    """Every finding of the module docstring on a composed config.

    Args:
        keys: the composed trainer config's verl keys (:meth:`rlec.run_config.VerlKeys.read`).
        num_experts: the model's routed experts (0: dense).

    Returns:
        ``error`` and ``warning`` :class:`Finding` s, each under the key it names.
    """
    out: list[Finding] = []
    corrected = _correction_rules(keys, out)
    mode = _replay_rules(keys, num_experts, out)
    tbs = int(1 if keys.train_batch_size is None else keys.train_batch_size)
    mini = int(keys.ppo_mini_batch_size or 1)
    steps = tbs // mini if mini > 0 else 1
    if num_experts and steps > 1 and mode == "disabled" and not corrected:
        out.append(Finding("warning", f"{CORRECTION}.rollout_is", f"null with router_replay disabled on an MoE model trained "
                           f"with {steps} optimizer steps per rollout (data.train_batch_size {tbs} / ppo_mini_batch_size "
                           f"{mini}): {R3_EVIDENCE}; keep the recipe's token TIS, or router_replay=r3, or "
                           f"ppo_mini_batch_size={tbs}"))
    return out
