"""Configuration of the local run: the one schema (``megatron_configs/local.yaml`` on ``recipe.yaml``).

The local run reads verl's own keys (``data.train_batch_size``, ``actor_rollout_ref.rollout.n``,
``actor_rollout_ref.actor.clip_ratio_low``, ``algorithm.adv_estimator``, ``rlec.schedule.*`` ...)
with the meaning they have on the cluster; :data:`LOCAL_KEYS` lists every key it reads. Values
come from, in increasing precedence: ``megatron_configs/local.yaml`` (which composes the cluster's
``recipe.yaml``), the environment variables of :data:`ENV_OVERRIDES` (the launcher's interface:
``MODEL_PATH=... STEPS=20 bash tools/run_megatron_rlec.sh``), and ``key=value`` arguments.

Settings of verl's trainer that the local run does not implement (e.g. ``ppo_epochs > 1``, a KL
loss, dynamic batch sizes) are refused with the key and the reason, never silently ignored.
"""

from __future__ import annotations

import os
from typing import Any, Mapping, Sequence

from omegaconf import DictConfig, OmegaConf

from rlec.config import LOCAL_CONFIG, compose, select
from rlec.flags import FALSE, TRUE, parse_flag
from rlec.settings import RlecSettings

ACTOR = "actor_rollout_ref.actor"
MEGATRON = f"{ACTOR}.megatron"
ROLLOUT = "actor_rollout_ref.rollout"
TINY_SCRIPTED_FRACTION = 0.25  # rlec.local.scripted_fraction=null resolves to this for the tiny random model, else 0

# environment variable -> config keys it sets (value transformed by _env_value)
ENV_OVERRIDES: dict[str, tuple[str, ...]] = {
    "MODEL_PATH": ("actor_rollout_ref.model.path",),
    "DATA_DIR": ("data.train_files", "data.val_files"),
    "TRAIN_FILES": ("data.train_files",),
    "VAL_FILES": ("data.val_files",),
    "TP": (f"{MEGATRON}.tensor_model_parallel_size",),
    "EP": (f"{MEGATRON}.expert_model_parallel_size",),
    "ETP": (f"{MEGATRON}.expert_tensor_parallel_size",),
    "PP": (f"{MEGATRON}.pipeline_model_parallel_size",),
    "STEPS": ("trainer.total_training_steps",),
    "TOTAL_TRAINING_STEPS": ("trainer.total_training_steps",),
    "SEED": ("data.seed", f"{ROLLOUT}.seed"),
    "OUTPUT_DIR": ("trainer.default_local_dir",),
    "CHECKPOINT_DIR": ("trainer.default_local_dir",),
    "SAVE_EVERY": ("trainer.save_freq",),
    "SAVE_FREQ": ("trainer.save_freq",),
    "RESUME": ("trainer.resume_mode",),
    "ROLLOUT_N": (f"{ROLLOUT}.n",),
    "PROMPTS_PER_STEP": ("data.train_batch_size",),
    "TRAIN_BATCH_SIZE": ("data.train_batch_size",),
    "MAX_NEW_TOKENS": ("data.max_response_length",),
    "MAX_RESPONSE_LENGTH": ("data.max_response_length",),
    "LR": (f"{ACTOR}.optim.lr",),
    "EVAL_AT_END": ("rlec.local.eval.at_end",),
    # comma-separated RLVE environments (or "all"): train on them only (algorithm=rlve, no static rows)
    "ENVIRONMENTS": ("algorithm", "rlec.rlve.environments", "data.train_files"),
}

# on/off variables: the spellings of rlec.flags (as RESUME's boolean ones)
BOOLEAN_VARS = ("EVAL_AT_END",)

# Every key the local run reads, with what it means there (shown by --help). The meaning is the
# cluster's; "local" marks the rlec.local settings the cluster does not have.
LOCAL_KEYS: dict[str, str] = {
    "actor_rollout_ref.model.path": "Hugging Face Qwen3 / Qwen3-MoE folder; null = the tiny random Qwen3-MoE",
    "data.train_files": "prepared train parquet(s) (python -m rlec.data.prepare); [] with algorithm=rlve",
    "algorithm": "optional algorithm overlays: e3, passk, rlve, or a list (megatron_configs/algorithm/)",
    "rlec.rlve.environments": "RLVE environments (algorithm=rlve; ENVIRONMENTS=a,b trains on them only)",
    "data.val_files": "prepared evaluation parquet (final evaluation)",
    "data.custom_cls.path": "optional prompt dataset class (e.g. rlec's verifiable environments)",
    "data.train_batch_size": "prompts per step (groups)",
    "data.max_prompt_length": "longer prompts are filtered out (data.filter_overlong_prompts)",
    "data.max_response_length": "response length limit in tokens",
    "data.seed": "prompt order (verl's sampler seed)",
    f"{ROLLOUT}.n": "responses per prompt (the group size)",
    f"{ROLLOUT}.temperature": "sampling temperature (also divides the logits of the log-probs)",
    f"{ROLLOUT}.top_p": "nucleus sampling mass",
    f"{ROLLOUT}.top_k": "sample among the k most likely tokens; -1 = all",
    f"{ROLLOUT}.seed": "base seed of the rollout sampling (one stream per step)",
    "algorithm.adv_estimator": "verl advantage estimator (grpo; rlec_passk when registered)",
    "algorithm.norm_adv_by_std_in_grpo": "false = mean-only group advantage r - mean(group)",
    f"{ACTOR}.ppo_mini_batch_size": "prompts per optimizer step",
    f"{ACTOR}.ppo_micro_batch_size_per_gpu": "rows per forward/backward",
    f"{ACTOR}.clip_ratio_low": "PPO clip (lower)",
    f"{ACTOR}.clip_ratio_high": "PPO clip (upper; clip-higher)",
    f"{ACTOR}.clip_ratio_c": "dual-clip bound for negative advantages",
    f"{ACTOR}.loss_agg_mode": "loss aggregation (token-mean, seq-mean-token-mean, ...)",
    f"{ACTOR}.policy_loss.loss_mode": "verl policy loss (vanilla, ...)",
    f"{ACTOR}.optim.lr": "learning rate (Adam)",
    f"{ACTOR}.optim.lr_warmup_steps": "linear warm-up steps from optim.lr_warmup_init (0 = none)",
    f"{ACTOR}.optim.weight_decay": "decoupled weight decay",
    f"{ACTOR}.optim.clip_grad": "gradient-norm clip",
    f"{MEGATRON}.tensor_model_parallel_size": "TP (torchrun processes: NPROC)",
    f"{MEGATRON}.expert_model_parallel_size": "EP",
    f"{MEGATRON}.expert_tensor_parallel_size": "ETP (null = TP)",
    f"{MEGATRON}.pipeline_model_parallel_size": "PP",
    f"{MEGATRON}.override_transformer_config": "extra Megatron TransformerConfig fields (router settings)",
    "rlec.schedule": "b from start_value to end_value over [start_step, end_step]",
    "rlec.grading.timeout_s": "math-verify per-item limit, seconds",
    "rlec.metrics.target_bucket_edges": "target buckets of the rlec/... metrics",
    "trainer.total_training_steps": "steps",
    "trainer.save_freq": "dist checkpoint (model, optimizer, prompt sampler) every k steps",
    "trainer.max_actor_ckpt_to_keep": "checkpoints kept",
    "trainer.default_local_dir": "output folder: checkpoints/, metrics.jsonl, tensorboard/, hf_final/, eval/",
    "trainer.resume_mode": "auto: continue a compatible run in the output folder; disable: start fresh",
    "trainer.logger": "tensorboard and/or console (metrics.jsonl is always written)",
    "rlec.local": "local only: tiny_seed, prepare_data_if_missing, scripted_fraction, threads, eval.*",
}

# verl settings the local run does not implement: key -> (value it supports, why)
UNSUPPORTED: dict[str, tuple[Any, str]] = {
    f"{ACTOR}.ppo_epochs": (1, "the local update makes one pass over the batch"),
    f"{ACTOR}.use_kl_loss": (False, "the local run has no reference model"),
    "algorithm.use_kl_in_reward": (False, "the local run has no reference model"),
    f"{ACTOR}.entropy_coeff": (0, "the local loss has no entropy bonus"),
    f"{ACTOR}.use_dynamic_bsz": (False, "the local update uses fixed micro-batches (ppo_micro_batch_size_per_gpu)"),
    f"{ACTOR}.shuffle": (False, "mini-batches are taken in order"),
    f"{MEGATRON}.context_parallel_size": (1, "no context parallel on CPU"),
    f"{MEGATRON}.virtual_pipeline_model_parallel_size": (None, "no virtual pipeline stages on CPU"),
    "algorithm.rollout_correction.rollout_is": (None, "the local rollout returns no log-probs to correct with "
                                                "(TRAINER=verl runs verl's rollout correction on CPU)"),
    "algorithm.rollout_correction.rollout_rs": (None, "the local rollout returns no log-probs to correct with"),
    "algorithm.rollout_correction.bypass_mode": (False, "the local update always recomputes the old log-probs"),
}


# What the local run may set differently from the cluster: scale (batch, lengths, steps, learning
# rate), layout (one CPU process per rank, no offload, no fused kernels), paths and names, and the
# rlec.local section. Everything else, the algorithm above all, is the cluster's value
# (tests/test_config.py composes both and checks it).
SCALE_KEYS: tuple[str, ...] = (
    "data.train_batch_size", "data.max_response_length", "data.dataloader_num_workers",
    "actor_rollout_ref.model.path", "actor_rollout_ref.actor.ppo_mini_batch_size",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", "actor_rollout_ref.actor.use_dynamic_bsz",
    "actor_rollout_ref.actor.optim.lr", "actor_rollout_ref.actor.optim.lr_warmup_steps", "actor_rollout_ref.rollout.n",
    "actor_rollout_ref.rollout.name", "actor_rollout_ref.actor.megatron.", "trainer.nnodes", "trainer.n_gpus_per_node",
    "trainer.total_training_steps", "trainer.save_freq", "trainer.max_actor_ckpt_to_keep", "trainer.default_local_dir",
    "trainer.experiment_name", "rlec.local.", "rlec.check.",
    # rollout correction: the local rollout returns no log-probs (UNSUPPORTED refuses the correction)
    "algorithm.rollout_correction.rollout_is", "actor_rollout_ref.rollout.calculate_log_probs",
    # verl's interpolations of the keys above (rollout_n, response_length, token budgets, ...)
    "actor_rollout_ref.actor.rollout_n", "actor_rollout_ref.ref.", "critic.", "distillation.",
    "actor_rollout_ref.rollout.response_length", "actor_rollout_ref.rollout.n_gpus_per_node",
    "actor_rollout_ref.rollout.prometheus.served_model_name", "actor_rollout_ref.rollout.trace.experiment_name",
    "actor_rollout_ref.rollout.gpu_memory_utilization", "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu",
    "actor_rollout_ref.rollout.max_num_batched_tokens", "actor_rollout_ref.rollout.tensor_model_parallel_size",
)


class LocalConfigError(ValueError):
    """A local-run setting is malformed or not supported (the message names the key)."""


def env_overrides(env: Mapping[str, str] | None = None) -> list[str]:
    """Hydra overrides from the environment variables of :data:`ENV_OVERRIDES` that are set.

    Raises:
        LocalConfigError: ``RESUME`` or a boolean variable (:data:`BOOLEAN_VARS`, :mod:`rlec.flags`) is not one
            of the accepted spellings.
    """
    env = os.environ if env is None else env
    out = []
    for var, keys in ENV_OVERRIDES.items():
        value = env.get(var, "")
        if value == "":
            continue
        for key in keys:
            out.append(f"{key}={_env_value(var, key, value)}")
        if var == "TP" and value.strip().isdigit():  # Megatron (and mbridge) run MoE with TP > 1 sequence parallel
            out.append(f"{MEGATRON}.sequence_parallel={str(int(value) > 1).lower()}")
    last = {o.split("=", 1)[0]: o for o in out}  # a later variable wins for the same key (ENVIRONMENTS over DATA_DIR)
    return list(last.values())


def _env_value(var: str, key: str, value: str) -> str:
    if var == "RESUME":  # the boolean spellings of rlec.flags, and verl's own auto / disable
        low = value.strip().lower()
        if low in ("auto", "disable", "never"):
            return "auto" if low == "auto" else "disable"
        try:
            return "auto" if parse_flag(var, value) else "disable"
        except ValueError:
            raise LocalConfigError(f"RESUME={value!r}: expected {'/'.join(TRUE)}/auto (resume a compatible run) or "
                                   f"{'/'.join(FALSE)}/disable (start fresh)") from None
    if var in BOOLEAN_VARS:
        try:
            return str(parse_flag(var, value)).lower()
        except ValueError as exc:
            raise LocalConfigError(str(exc)) from None
    if var == "ENVIRONMENTS":
        names = [n.strip() for n in value.split(",") if n.strip()]
        if not names:
            raise LocalConfigError(f"ENVIRONMENTS={value!r} names no environment: list them (maze,sorting) or all")
        return {"algorithm": "rlve", "rlec.rlve.environments": "[" + ",".join(names) + "]", "data.train_files": "[]"}[key]
    if var == "DATA_DIR":
        name = "train.parquet" if key == "data.train_files" else "test.parquet"
        return os.path.join(value, name)
    return value


def load_config(overrides: Sequence[str] = (), env: Mapping[str, str] | None = None) -> DictConfig:
    """The resolved local-run config (read-only).

    Args:
        overrides: Hydra overrides (``key=value``); they win over the environment.
        env: environment to read :data:`ENV_OVERRIDES` from (default ``os.environ``).

    Raises:
        LocalConfigError: an override names an unknown key or is malformed, a value is out of
            range, or a setting is one the local run does not implement (the message names the key).
    """
    given = {o.split("=", 1)[0].lstrip("+~") for o in overrides}
    from_env = [o for o in env_overrides(env) if o.split("=", 1)[0] not in given]  # an argument wins over the environment
    from rlec.cluster.settings_rules import override_rules  # algorithm=[e3,e3]: what only the overrides show

    for finding in override_rules([*from_env, *overrides]):
        raise LocalConfigError(str(finding))
    try:
        cfg = compose([*from_env, *overrides], config_name=LOCAL_CONFIG)
    except LocalConfigError:
        raise
    except Exception as exc:  # Hydra / OmegaConf raise many types: one line naming the problem
        raise LocalConfigError(f"bad setting: {str(exc).splitlines()[0]} (python -m rlec.local.runner --help lists the keys)") from None
    check(cfg)
    if RlecSettings.from_config(cfg).local.scripted_fraction is None:
        # resolved here, not at the start of training, so that the run's saved settings and a
        # rerun of the same command compare equal (the resume check compares them key by key)
        cfg.rlec.local.scripted_fraction = TINY_SCRIPTED_FRACTION if not select(cfg, "actor_rollout_ref.model.path") else 0.0
    OmegaConf.set_readonly(cfg, True)
    return cfg


def check(cfg: Any) -> None:
    """Refuse settings the local run cannot honour.

    The early rule set of every run comes first (:func:`rlec.cluster.settings_rules.settings_rules`:
    rlec's settings schema, verl's registries and keys), then the local run's own limits.

    Raises:
        LocalConfigError: naming the first offending key, its value and the rule.
    """
    from rlec.cluster.settings_rules import settings_rules  # the very rules DRY_RUN applies first

    for finding in settings_rules(cfg):
        raise LocalConfigError(str(finding))
    positive = ["data.train_batch_size", f"{ROLLOUT}.n", "data.max_response_length", "trainer.total_training_steps",
                "trainer.save_freq", f"{ACTOR}.ppo_mini_batch_size", f"{ACTOR}.ppo_micro_batch_size_per_gpu",
                f"{MEGATRON}.tensor_model_parallel_size", f"{MEGATRON}.expert_model_parallel_size",
                f"{MEGATRON}.pipeline_model_parallel_size", "trainer.max_actor_ckpt_to_keep"]
    for key in positive:
        value = select(cfg, key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise LocalConfigError(f"{key} must be a positive integer, got {value!r}")
    for key, (supported, why) in UNSUPPORTED.items():
        value = select(cfg, key)
        if value is not None and value != supported and not (supported == 0 and value == 0.0):
            raise LocalConfigError(f"{key}={value!r} is not supported by the local run ({why}); use {supported!r}")
    tp, sp = select(cfg, f"{MEGATRON}.tensor_model_parallel_size"), bool(select(cfg, f"{MEGATRON}.sequence_parallel", False))
    if sp != (tp > 1):
        raise LocalConfigError(f"{MEGATRON}.sequence_parallel={sp} with tensor_model_parallel_size={tp}: mbridge builds the "
                               "model sequence parallel exactly when TP > 1 (Megatron requires it for MoE); set it to "
                               f"{str(tp > 1).lower()} (the TP environment variable does)")
    # temperature, top_p, top_k, rollout.n, lr, clip ratios ...: the early rule set's NUMBER_RULES (above)
    if str(select(cfg, f"{ACTOR}.optim.lr_decay_style", "constant")) != "constant":
        raise LocalConfigError(f"{ACTOR}.optim.lr_decay_style={select(cfg, f'{ACTOR}.optim.lr_decay_style')!r} is not "
                               "supported by the local run (constant after the warm-up)")
    if str(select(cfg, "trainer.resume_mode")) not in ("auto", "disable"):
        raise LocalConfigError(f"trainer.resume_mode must be 'auto' or 'disable' in the local run, got {select(cfg, 'trainer.resume_mode')!r}")
    loggers = set(select(cfg, "trainer.logger", []) or [])
    if loggers - {"console", "tensorboard", "file"}:
        raise LocalConfigError(f"trainer.logger: the local run writes console, tensorboard (and always metrics.jsonl), got {sorted(loggers)}")
    if select(cfg, "data.train_files") is None:
        raise LocalConfigError("data.train_files must name the prepared train parquet (or be [] with algorithm=rlve)")
    from rlec.algorithms import registry

    if not train_files(cfg) and not registry.serves_prompts(cfg):  # an algorithm with prompts of its own (RLVE's rows)
        raise LocalConfigError("data.train_files=[] trains on nothing: name a prepared parquet, or add algorithm=rlve "
                               "(ENVIRONMENTS=...) to train on procedural environments only")
    from rlec.cluster.rules import algorithm_overlay_rules  # E3 / Pass@k: the very rules DRY_RUN applies

    for finding in algorithm_overlay_rules(cfg):
        if finding.level == "error":
            raise LocalConfigError(str(finding))


def train_files(cfg: Any) -> list[str]:
    """``data.train_files`` as a list of paths (verl accepts one path or a list; [] = environments only)."""
    files = select(cfg, "data.train_files", [])
    if isinstance(files, str):
        return [files]
    return [str(f) for f in files]


def settings_help(cfg: Any) -> str:
    """Every key the local run reads, its value and meaning, every setting of the algorithm overlays in
    effect, and the environment variables (the text of ``--help``)."""
    from rlec.algorithms.registry import enabled
    from rlec.config import flatten

    algorithms = [(cls.name, cls.section, cls.doc) for cls in enabled(cfg)]
    lines = ["Settings (key=value arguments; verl's keys, with the meaning they have on the cluster):", ""]
    for key, meaning in LOCAL_KEYS.items():
        value = select(cfg, key)
        if key == "algorithm":  # the overlays in effect, not verl's whole algorithm section
            value = [name for name, _, _ in algorithms]
        elif OmegaConf.is_config(value):
            value = OmegaConf.to_container(value, resolve=True)
        lines.append(f"  {key} = {value!r}\n      {meaning}")
    for name, section, doc in algorithms:  # every setting of the overlays in effect
        lines += ["", f"Settings of {name} ({section}.*, docs/{doc}):", ""]
        lines += [f"  {section}.{k} = {v!r}" for k, v in flatten(select(cfg, section)).items()]
    lines += ["", "Environment variables (the launcher's interface; key=value arguments win):", ""]
    lines += [f"  {var:<22} -> {', '.join(keys)}" for var, keys in ENV_OVERRIDES.items()]
    lines += ["", "Not supported locally (refused): " + ", ".join(f"{k}!={v!r}" for k, (v, _) in UNSUPPORTED.items())]
    return "\n".join(lines)


def to_yaml(cfg: Any) -> str:
    """The resolved config as YAML (saved beside the checkpoints)."""
    return OmegaConf.to_yaml(cfg, resolve=True)


def as_dict(cfg: Any) -> dict[str, Any]:
    """Plain dict copy of the resolved config."""
    return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]
