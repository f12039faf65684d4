"""Configuration of the local run: ``megatron_configs/local/cpu.yaml`` < environment < CLI.

The YAML holds every default (one place). Environment variables named in
:data:`ENV_OVERRIDES` override it (the launcher's interface: ``MODEL_PATH=... STEPS=20 bash
tools/run_megatron_rlec.sh``), and ``key=value`` arguments override both
(``python -m rlec.local.runner rollout.n=8 trainer.steps=3``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping, Sequence

from omegaconf import DictConfig, OmegaConf

from rlec.config import REPO_ROOT

DEFAULT_CONFIG = REPO_ROOT / "megatron_configs" / "local" / "cpu.yaml"

# environment variable -> config key
ENV_OVERRIDES: dict[str, str] = {
    "MODEL_PATH": "model.path",
    "DATA_DIR": "data.dir",
    "TP": "layout.tp",
    "EP": "layout.ep",
    "ETP": "layout.etp",
    "PP": "layout.pp",
    "STEPS": "trainer.steps",
    "SEED": "trainer.seed",
    "OUTPUT_DIR": "trainer.output_dir",
    "CHECKPOINT_DIR": "trainer.output_dir",
    "SAVE_EVERY": "trainer.save_every",
    "RESUME": "trainer.resume",
    "ROLLOUT_N": "rollout.n",
    "PROMPTS_PER_STEP": "rollout.prompts_per_step",
    "MAX_NEW_TOKENS": "rollout.max_new_tokens",
    "LR": "actor.lr",
    "EVAL_AT_END": "eval.at_end",
}


def load_config(
    overrides: Sequence[str] = (), env: Mapping[str, str] | None = None, path: str | Path = DEFAULT_CONFIG
) -> DictConfig:
    """The resolved local-run config.

    Args:
        overrides: ``key=value`` strings (OmegaConf dotlist).
        env: environment to read :data:`ENV_OVERRIDES` from (default ``os.environ``).
        path: the YAML with the defaults.

    Returns:
        A read-only ``DictConfig``.

    Raises:
        FileNotFoundError: ``path`` is missing.
        ValueError: an override names a key that is not in the YAML, or a value is out of range
            (the message names the key).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: local-run config not found")
    base = OmegaConf.load(path)
    OmegaConf.set_struct(base, True)  # unknown keys are errors, not silent additions
    env = os.environ if env is None else env
    from_env = [f"{key}={_env_value(var, env[var])}" for var, key in ENV_OVERRIDES.items() if env.get(var, "") != ""]
    try:
        cfg = OmegaConf.merge(base, OmegaConf.from_dotlist(from_env), OmegaConf.from_dotlist(list(overrides)))
    except Exception as exc:  # omegaconf raises several types; one clear message
        raise ValueError(f"bad override ({exc}); keys must exist in {path}") from None
    _check(cfg)
    OmegaConf.set_readonly(cfg, True)
    return cfg


def _env_value(var: str, value: str) -> str:
    """RESUME follows both conventions: 1/true/yes/auto resume, 0/false/no/disable start fresh."""
    if var == "RESUME":
        low = value.strip().lower()
        if low in ("1", "true", "yes", "auto"):
            return "true"
        if low in ("0", "false", "no", "disable", "never"):
            return "false"
        raise ValueError(f"RESUME={value!r}: expected 1/true/auto (resume) or 0/false/disable (start fresh)")
    return value


def _check(cfg: DictConfig) -> None:
    positive = ["rollout.prompts_per_step", "rollout.n", "rollout.max_new_tokens", "trainer.steps", "trainer.save_every",
                "actor.micro_batch_size", "actor.ppo_mini_batch_size", "layout.tp", "layout.ep", "layout.pp"]
    for key in positive:
        value = OmegaConf.select(cfg, key)
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{key} must be a positive integer, got {value!r}")
    if not cfg.rollout.temperature > 0 or not 0 < cfg.rollout.top_p <= 1:
        raise ValueError(f"rollout.temperature must be > 0 and rollout.top_p in (0, 1], got {cfg.rollout.temperature}, {cfg.rollout.top_p}")
    frac = cfg.rollout.scripted_fraction
    if frac is not None and not 0.0 <= float(frac) < 1.0:
        raise ValueError(f"rollout.scripted_fraction must be in [0, 1) or null, got {frac!r}")
    from rlec.local.update import LOSS_AGG_MODES

    if cfg.actor.loss_agg_mode not in LOSS_AGG_MODES:
        raise ValueError(f"actor.loss_agg_mode must be one of {LOSS_AGG_MODES}, got {cfg.actor.loss_agg_mode!r}")
    if not cfg.actor.clip_ratio_c > 1:
        raise ValueError(f"actor.clip_ratio_c must be > 1 (verl's dual clip), got {cfg.actor.clip_ratio_c}")
    if not cfg.actor.lr > 0:
        raise ValueError(f"actor.lr must be > 0, got {cfg.actor.lr}")
    if cfg.rollout.n < 2:
        raise ValueError("rollout.n must be >= 2: a group of one has no baseline (its advantage is its raw reward)")


def schedule_steps(cfg: DictConfig) -> int:
    """Steps over which b goes from ``b_start`` to ``b_end`` (default: the whole run, min 2)."""
    return int(cfg.reward.schedule_steps or max(2, cfg.trainer.steps))


def to_yaml(cfg: DictConfig) -> str:
    """The resolved config as YAML (saved beside the checkpoints)."""
    return OmegaConf.to_yaml(cfg, resolve=True)


def as_dict(cfg: DictConfig) -> dict[str, Any]:
    """Plain dict copy."""
    return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]
