"""Every config key, overlay and metric name the experiments use, in one place (easy to rename).

The launch's own keys (seed, logging, rollout dump, HF export) are :mod:`rlec.demo.verl_run`'s.
Settings are passed to the launcher as hydra overrides (``key=value``); overlays as
``algorithm=<name>``. Pass@k's settings live in ``rlec.passk`` (``algorithm.passk`` is verl's copy, which the
launch refuses to set directly).
"""

from __future__ import annotations

from rlec import probe_keys

OVERLAY = "algorithm"  # megatron_configs/algorithm/<name>.yaml: algorithm=e3|passk|rlve

# data, batch, optimiser: identical for every arm of an experiment
BATCH = "data.train_batch_size"
ROLLOUT_N = "actor_rollout_ref.rollout.n"
TOP_K = "actor_rollout_ref.rollout.top_k"
TEMPERATURE = "actor_rollout_ref.rollout.temperature"
MAX_RESPONSE = "data.max_response_length"
MAX_PROMPT = "data.max_prompt_length"
MINI_BATCH = "actor_rollout_ref.actor.ppo_mini_batch_size"
MICRO_BATCH = "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu"
LR = "actor_rollout_ref.actor.optim.lr"
TRAIN_FILES = "data.train_files"

# RLEC
B_START = "rlec.schedule.start_value"
B_END = "rlec.schedule.end_value"
NORM_BY_STD = "algorithm.norm_adv_by_std_in_grpo"

# E3 (rlec/algorithms/e3/settings.py; recipe.yaml rlec.e3)
E3 = "rlec.e3"
E3_TEMPERATURE = f"{E3}.temperature.enable"
E3_ANNEAL = f"{E3}.temperature.anneal.enable"
E3_BUDGET = f"{E3}.budget.enable"
E3_N_MIN = f"{E3}.budget.n_min"
E3_N_MAX = f"{E3}.budget.n_max"
E3_LENGTH_BIAS = f"{E3}.length_bias.enable"

# Pass@k Training (rlec/algorithms/passk/settings.py)
PASSK = "rlec.passk"
PASSK_K = f"{PASSK}.k"

# RLVE (rlec/algorithms/rlve/settings.py; megatron_configs/algorithm/rlve.yaml)
RLVE = "rlec.rlve"
RLVE_ENVIRONMENTS = f"{RLVE}.environments"
RLVE_DIFFICULTY = f"{RLVE}.difficulty"
RLVE_WINDOW = f"{RLVE}.window"
RLVE_BINARY_FRACTION = f"{RLVE}.binary_fraction"
RLVE_TARGET_MIN = f"{RLVE}.target_min"
RLVE_TARGET_MAX = f"{RLVE}.target_max"
RLVE_ROWS = f"{RLVE}.rows_per_epoch"

# metrics of verl's step (the run's metrics.jsonl)
M_ENTROPY = "actor/entropy"
M_GRAD_NORM = "actor/grad_norm"
M_REWARD = "critic/score/mean"
M_TEMPERATURE = "e3/temperature"
M_ROLLOUT_N_MAX = "e3/rollout_n/max"
M_ROLLOUT_N_MIN = "e3/rollout_n/min"
M_ACTIVE_K = "passk/active_k"
M_STEP_TIME = "timing_s/step"
# whether clipping acted: verl's compute_policy_loss_vanilla, per update, averaged over the step's updates
M_CLIPFRAC = "actor/pg_clipfrac"
M_CLIPFRAC_LOWER = "actor/pg_clipfrac_lower"  # dual-clip's lower bound (clip_ratio_c) on negative advantages
M_PPO_KL = "actor/ppo_kl"
# the probe set's, from their home (rlec.probe_keys), which rlec.verl_plugin.probe logs by
M_PROBE_ENTROPY = probe_keys.ENTROPY
M_PROBE_RESPONSE_LENGTH = probe_keys.RESPONSE_LENGTH
M_PROBE_TIME = probe_keys.TIMING
m_probe_pass_at = probe_keys.pass_at_k_key  # the graded probe's pass@k key: rlec/probe/pass@<k>[/<subset>]


# RLEC's training coverage per target bucket (rlec.reward.metrics): targets 0.1 and 0.8
M_COVERAGE_LOW = "rlec/p0.0-0.3/coverage"
M_COVERAGE_HIGH = "rlec/p0.6-1.0/coverage"

# settings the papers' baselines name (issue 57 item 3)
CLIP_LOW = "actor_rollout_ref.actor.clip_ratio_low"
CLIP_HIGH = "actor_rollout_ref.actor.clip_ratio_high"
PPO_EPOCHS = "actor_rollout_ref.actor.ppo_epochs"
SHUFFLE = "data.shuffle"
RLVE_SEED = f"{RLVE}.seed"


def rlve_difficulty_metric(env: str) -> str:
    """``rlve/<env>/difficulty``: the controller's h of ``env`` at the step."""
    return f"rlve/{env}/difficulty"
