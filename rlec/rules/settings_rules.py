"""The checks every run passes before any work or write: rlec's settings schema and verl's keys verl checks late.

One rule set, called by ``DRY_RUN`` and the launcher (:func:`rlec.cluster.config_check.main`, exit 2
before anything is written), by verl's trainer at construction (:class:`rlec.verl_plugin.trainers.AlgorithmsMixin`)
and by the demo before its first stage (both through :func:`early_errors`).
Each finding names the full key, the value and the rule:

- rlec's own non-algorithm settings (:meth:`rlec.settings.RlecSettings.from_config`: types, ranges,
  unknown keys in its sections) and unknown ``rlec.<section>`` names (neither the schema's nor a
  registered algorithm's);
- an unknown top-level key (``+foo.bar=1``), which verl would silently ignore: the known ones are
  those of verl's own trainer config (``verl/trainer/config/_generated_ppo*_trainer.yaml``), the
  ``model_engine`` group and ``rlec``;
- ``algorithm.adv_estimator`` is registered in verl's advantage-estimator registry
  (``verl.trainer.ppo.core_algos.ADV_ESTIMATOR_REGISTRY``, rlec's plugin imported for ``rlec_*``
  names); otherwise verl fails after the first rollout;
- ``actor_rollout_ref.actor.policy_loss.loss_mode`` is registered in verl's ``POLICY_LOSS_REGISTRY``
  and ``actor_rollout_ref.actor.loss_agg_mode`` is accepted by verl's ``ActorConfig`` (its list is
  verl's, asked, not copied);
- ``actor_rollout_ref.actor.optim.clip_grad`` is a finite number > 0, ``data.seed`` an integer or null and
  ``trainer.resume_mode`` one of verl's modes (``auto``, ``disable``, ``resume_path``);
- every numeric setting of verl's that the recipe, a layout or an overlay sets, or that rlec reads
  (:data:`NUMBER_RULES`: learning rate, weight decay, clip ratios, sampling temperature / top-p /
  top-k, batch sizes, lengths, parallel sizes, step counts, seeds ...) is a number of its kind
  (an integer, or a finite number) in its range (an algorithm's own keys in verl's sections, such as
  Pass@k's ``algorithm.passk.active_k``, are its check's: :func:`rlec.algorithms.registry.check_all`);
- the overrides themselves (:func:`override_rules`, where a caller has them): an algorithm named
  twice in ``algorithm=[...]``, which the composed config no longer shows.
- the b schedule spans more than one step: its end (``rlec.schedule.end_step``, else
  ``trainer.total_training_steps``) is after ``rlec.schedule.start_step`` (one rule for every path);
- Adam's ``optim.betas`` are two numbers in [0, 1) (torch refuses others only once Ray and the model are up);
  a step's responses (``data.train_batch_size x rollout.n``) fit TransferQueue's storage
  (:func:`_batch_rules`); ``rollout.response_length`` equals ``data.max_response_length`` (:func:`_length_rules`).
"""

from __future__ import annotations

import functools
import math
import os
import re
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Sequence

from rlec.layout import Finding
from rlec.rules.moe import threshold_error
from rlec.run_config import ACTOR, CORRECTION, MEGATRON, ROLLOUT, VerlKeys
from rlec.run_config import RunConfig
from rlec.io import held_back_console
from rlec.settings import CpuSettings, RlecSettings, SettingError

__all__ = ["CPU_WING_SWITCHES", "NUMBER_RULES", "NumberRule", "known_top_level_keys", "override_rules", "settings_rules"]

PLUGIN_MODULE = "rlec.verl_plugin"
# top-level keys besides verl's trainer sections: the engine group choice and rlec's own settings
EXTRA_TOP_LEVEL = ("model_engine", "rlec")


SEED_LIMIT = 2**32  # numpy's and torch's generators take seeds in [0, 2**32)


@dataclass(frozen=True)
class NumberRule:
    """The kind and range of one numeric setting.

    Attributes:
        kind: ``int`` (a whole number, not a bool, not a float) or ``float`` (any finite int or float).
        low: the least value (None: unbounded); ``low_open`` excludes it.
        high: the greatest value (None: unbounded); ``high_open`` excludes it.
        nullable: null is accepted (verl's default, or "not set").
        special: values legal outside the range, with their meaning (e.g. ``{-1: "all tokens"}``).
        why: what the setting is (ends the refusal).
    """

    kind: type
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    nullable: bool = False
    special: tuple[tuple[Any, str], ...] = ()
    why: str = ""

    def describe(self) -> str:
        """The rule in words, e.g. ``"must be a finite number in (0, 1]"``."""
        what = "an integer" if self.kind is int else "a finite number"
        if self.low is not None and self.high is not None:
            rng = f" in {'(' if self.low_open else '['}{_num(self.low)}, {_num(self.high)}{')' if self.high_open else ']'}"
        elif self.low is not None:
            rng = f" {'>' if self.low_open else '>='} {_num(self.low)}"
        elif self.high is not None:
            rng = f" {'<' if self.high_open else '<='} {_num(self.high)}"
        else:
            rng = ""
        extra = "".join(f", or {v!r} ({meaning})" for v, meaning in self.special)
        extra += ", or null" if self.nullable else ""
        return f"must be {what}{rng}{extra}" + (f": {self.why}" if self.why else "")

    def broken_by(self, value: Any) -> bool:
        """Whether ``value`` breaks the rule."""
        if value is None:
            return not self.nullable
        if any(value == v and type(value) is type(v) for v, _ in self.special):
            return False
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return True
        if self.kind is int and not isinstance(value, int):
            return True
        if not math.isfinite(value):
            return True
        if self.low is not None and (value < self.low or (self.low_open and value == self.low)):
            return True
        return self.high is not None and (value > self.high or (self.high_open and value == self.high))


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() and abs(x) < 1e15 else repr(x)


def _count(why: str, *, nullable: bool = False, low: int = 1) -> NumberRule:
    return NumberRule(int, low=low, nullable=nullable, why=why)


def _fraction(why: str, *, low_open: bool = False, high_open: bool = False, nullable: bool = False) -> NumberRule:
    return NumberRule(float, low=0.0, high=1.0, low_open=low_open, high_open=high_open, nullable=nullable, why=why)


_ALL_TOKENS = ((-1, "all tokens"),)
_TOP_K = ("0 is refused as ambiguous: vLLM reads it as all tokens, a top-k sampler as none; -1 is all tokens, "
          "k >= 1 the k most likely")
_SEED = NumberRule(int, low=0, high=SEED_LIMIT, high_open=True, nullable=True,
                   why="numpy's and torch's generators take seeds in [0, 2**32)")
_PARALLEL = "a parallel size (processes per group)"

# Every numeric verl setting that megatron_configs/ (recipe.yaml, rlec.yaml, the layout,
# precision, moe and algorithm overlays) sets or that rlec reads: full key -> its rule. rlec's own
# settings (rlec.*) are the settings schema's (rlec.settings) and each algorithm's check.
NUMBER_RULES: dict[str, NumberRule] = {
    f"{ACTOR}.optim.lr": NumberRule(float, low=0.0, high=1.0, low_open=True,
                                    why="Adam's learning rate (1e-6 on the cluster, 1e-5 locally)"),
    f"{ACTOR}.optim.weight_decay": _fraction("decoupled weight decay, a share of lr x weight per step"),
    f"{ACTOR}.optim.lr_warmup_steps": NumberRule(int, low=0, nullable=True,
                                                 special=((-1, "use lr_warmup_steps_ratio"),),
                                                 why="linear warm-up steps"),
    f"{ACTOR}.optim.lr_warmup_steps_ratio": _fraction("the warm-up's share of the run, which must end before it",
                                                      high_open=True),
    f"{ACTOR}.optim.lr_warmup_init": NumberRule(float, low=0.0, high=1.0, why="the learning rate the warm-up starts from"),
    f"{ACTOR}.optim.min_lr": NumberRule(float, low=0.0, high=1.0, why="the learning rate's floor"),
    f"{ACTOR}.clip_ratio": _fraction("PPO's clip epsilon: the ratio is clipped to [1 - eps, 1 + eps]", high_open=True),
    f"{ACTOR}.clip_ratio_low": _fraction("PPO's lower clip: the ratio is clipped below at 1 - clip_ratio_low, "
                                         "which must stay > 0", high_open=True),
    f"{ACTOR}.clip_ratio_high": NumberRule(float, low=0.0, why="PPO's upper clip: the ratio is clipped above at "
                                           "1 + clip_ratio_high"),
    f"{ACTOR}.clip_ratio_c": NumberRule(float, low=1.0, low_open=True, why="verl's dual-clip bound for negative "
                                        "advantages"),
    f"{ACTOR}.entropy_coeff": NumberRule(float, why="the entropy term's weight in the loss (negative: an entropy "
                                         "penalty)"),
    f"{ACTOR}.kl_loss_coef": NumberRule(float, low=0.0, why="the KL loss's weight"),
    "algorithm.kl_ctrl.kl_coef": NumberRule(float, low=0.0, why="the in-reward KL penalty's weight"),
    f"{ACTOR}.ppo_epochs": _count("passes over each batch"),
    f"{ACTOR}.ppo_mini_batch_size": _count("prompts per optimizer step"),
    f"{ACTOR}.ppo_micro_batch_size_per_gpu": _count("rows per forward/backward", nullable=True),
    f"{ACTOR}.ppo_max_token_len_per_gpu": _count("tokens per dynamic micro-batch", nullable=True),
    f"{ROLLOUT}.temperature": NumberRule(float, low=0.0, low_open=True, why="the sampling temperature, which also "
                                         "divides the logits of the log-probs"),
    f"{ROLLOUT}.top_p": _fraction("nucleus sampling mass", low_open=True),
    f"{ROLLOUT}.top_k": NumberRule(int, low=1, special=_ALL_TOKENS, why=_TOP_K),
    f"{ROLLOUT}.n": _count("responses per prompt; a group of one has no baseline (its advantage is its raw reward)",
                           low=2),
    f"{ROLLOUT}.seed": _SEED,
    f"{ROLLOUT}.val_kwargs.temperature": NumberRule(float, low=0.0, why="validation sampling temperature (0: greedy)"),
    f"{ROLLOUT}.val_kwargs.top_p": _fraction("validation nucleus sampling mass", low_open=True),
    f"{ROLLOUT}.val_kwargs.top_k": NumberRule(int, low=1, special=_ALL_TOKENS, why=_TOP_K),
    f"{ROLLOUT}.val_kwargs.n": _count("validation samples per prompt"),
    f"{ROLLOUT}.gpu_memory_utilization": _fraction("vLLM's share of GPU memory", low_open=True),
    f"{ROLLOUT}.tensor_model_parallel_size": _count(_PARALLEL),
    f"{ROLLOUT}.data_parallel_size": _count(_PARALLEL),
    f"{ROLLOUT}.expert_parallel_size": _count(_PARALLEL),
    f"{ROLLOUT}.pipeline_model_parallel_size": _count(_PARALLEL),
    f"{ROLLOUT}.log_prob_max_token_len_per_gpu": _count("tokens per log-prob micro-batch", nullable=True),
    f"{ROLLOUT}.log_prob_micro_batch_size_per_gpu": _count("rows per log-prob forward", nullable=True),
    f"{ROLLOUT}.max_num_batched_tokens": _count("vLLM's tokens per scheduler step", nullable=True),
    f"{ROLLOUT}.agent.num_workers": _count("agent-loop workers"),
    **{f"{owner}.megatron.{size}_parallel_size": _count(_PARALLEL, nullable=size in ("expert_tensor_model",
                                                                                       "virtual_pipeline_model"))
       for owner in (ACTOR, "actor_rollout_ref.ref")
       for size in ("tensor_model", "pipeline_model", "expert_model", "context", "virtual_pipeline_model")},
    **{f"{owner}.megatron.expert_tensor_parallel_size": _count(_PARALLEL, nullable=True)
       for owner in (ACTOR, "actor_rollout_ref.ref")},
    "actor_rollout_ref.model.override_config.rope_theta": NumberRule(float, low=0.0, low_open=True,
                                                                     why="RoPE's base frequency"),
    f"{MEGATRON}.override_transformer_config.moe_aux_loss_coeff": NumberRule(float, low=0.0,
                                                                             why="the MoE load-balancing loss's weight"),
    "data.train_batch_size": _count("prompts per step"),
    "data.max_prompt_length": _count("prompt tokens"),
    "data.max_response_length": _count("response tokens"),
    "data.seed": _SEED,
    "data.dataloader_num_workers": _count("dataloader worker processes (0: in the trainer)", low=0),
    "data.filter_overlong_prompts_workers": _count("prompt-length filter worker processes (0: in the trainer)", low=0),
    "data.train_max_samples": NumberRule(int, low=1, special=((-1, "all"),), nullable=True, why="training rows used"),
    "data.val_max_samples": NumberRule(int, low=1, special=((-1, "all"),), nullable=True, why="validation rows used"),
    "trainer.total_training_steps": _count("steps (null: total_epochs of the data)", nullable=True),
    "trainer.total_epochs": _count("passes over the training data"),
    "trainer.save_freq": _count("a checkpoint every k steps (0 or -1: none)", low=-1),
    "trainer.test_freq": _count("validation every k steps (0 or -1: none)", low=-1),
    "trainer.max_actor_ckpt_to_keep": _count("checkpoints kept (null: all)", nullable=True),
    "trainer.log_val_generations": _count("validation generations logged", low=0),
    "trainer.nnodes": _count("nodes"),
    "trainer.n_gpus_per_node": _count("GPUs per node"),
    "ray_kwargs.ray_init.num_cpus": _count("Ray's logical CPUs (null: the machine's)", nullable=True),
    "ray_kwargs.ray_init.num_gpus": _count("Ray's GPUs (null: the machine's)", nullable=True, low=0),
    "reward.num_workers": _count("reward worker processes"),
    "transfer_queue.backend.SimpleStorage.num_data_storage_units": _count("TransferQueue storage units"),
}


def _number_rules(cfg: Any) -> list[Finding]:
    """:data:`NUMBER_RULES` on the keys ``cfg`` has."""
    out = []
    for key, rule in NUMBER_RULES.items():
        value = _raw(cfg, key)
        if value is not _ABSENT and rule.broken_by(value):
            out.append(Finding("error", key, f"{value!r} {rule.describe()}"))
    return out


_ABSENT = object()


def _raw(cfg: Any, key: str) -> Any:
    """The value at ``key`` (None kept as None), or :data:`_ABSENT` when a level is missing."""
    node, parts = cfg, key.split(".")
    for depth, part in enumerate(parts, 1):
        try:
            node = node[part]
        except Exception:  # KeyError, TypeError, omegaconf's errors for a missing key
            return _ABSENT
        if node is None:
            return None if depth == len(parts) else _ABSENT
    return node


def override_rules(overrides: Sequence[str]) -> list[Finding]:
    """Findings only the overrides show: an algorithm named twice (``algorithm=[e3,e3]``: Hydra composes the
    overlay twice into one config, so the composed config cannot tell it from ``algorithm=e3``)."""
    out = []
    for override in overrides:
        key, sep, value = str(override).partition("=")
        if not sep or key.lstrip("+~") != "algorithm":
            continue
        names = [n.strip().strip("'\"") for n in value.strip().strip("[]").split(",") if n.strip()]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            out.append(Finding("error", "algorithm", f"{value!r} names {', '.join(twice)} more than once: each "
                               "algorithm is one overlay, enabled once (algorithm=[e3,passk])"))
    return out


@functools.lru_cache(maxsize=1)
def known_top_level_keys() -> frozenset[str]:
    """The top-level keys of verl's own trainer configs plus :data:`EXTRA_TOP_LEVEL` (read once per process)."""
    import yaml

    import verl.trainer.config as verl_config

    folder = Path(verl_config.__file__).parent
    keys = set(EXTRA_TOP_LEVEL)
    for path in sorted(folder.glob("_generated_ppo*_trainer.yaml")):
        keys |= set(yaml.safe_load(path.read_text()) or {})
    return frozenset(keys)


def _quiet_import(module: str) -> Any:
    """Import ``module`` with what verl prints at import (accelerator warnings) held back."""
    import importlib

    with held_back_console():
        return importlib.import_module(module)


def _registered_estimators(name: str) -> list[str]:
    """verl's registered advantage estimators; rlec's plugin is imported when ``name`` is not among verl's own."""
    core_algos = _quiet_import("verl.trainer.ppo.core_algos")
    if name not in core_algos.ADV_ESTIMATOR_REGISTRY:
        _quiet_import(PLUGIN_MODULE)  # registers rlec's estimators (rlec_passk)
    return sorted(core_algos.ADV_ESTIMATOR_REGISTRY)


def _verl_rules(cfg: Any, k: VerlKeys) -> list[Finding]:
    out: list[Finding] = []

    def error(key: str, value: Any, rule: str) -> None:
        out.append(Finding("error", key, f"{value!r} {rule}"))

    unknown = sorted(set(cfg.keys()) - known_top_level_keys()) if hasattr(cfg, "keys") else []
    for key in unknown:  # the raw tree's own top-level keys, walked (no named key to read: the value is the tree's)
        error(key, cfg[key], "is not a key of verl's trainer config or rlec's: verl would ignore it (a typo?)")
    estimator = k.adv_estimator
    registered = _registered_estimators(str(estimator))
    if str(estimator) not in registered:
        error("algorithm.adv_estimator", estimator, f"must be a registered verl advantage estimator: one of {registered}")
    loss_mode = k.policy_loss_mode
    losses = sorted(_quiet_import("verl.trainer.ppo.core_algos").POLICY_LOSS_REGISTRY)
    if str(loss_mode) not in losses:
        error(f"{ACTOR}.policy_loss.loss_mode", loss_mode, f"must be a registered verl policy loss: one of {losses}")
    agg = k.loss_agg_mode
    actor_config = _quiet_import("verl.workers.config.actor").ActorConfig
    try:  # verl's own list of aggregation modes lives in ActorConfig.__post_init__
        actor_config(strategy="megatron", rollout_n=1, ppo_micro_batch_size_per_gpu=1, loss_agg_mode=str(agg))
    except ValueError:
        error(f"{ACTOR}.loss_agg_mode", agg, "must be a loss aggregation mode verl's ActorConfig accepts "
              "(token-mean, token-sum, seq-mean-token-sum, seq-mean-token-mean, ...)")
    from rlec.flags import RESUME_MODES

    resume = k.resume_mode
    if str(resume) not in RESUME_MODES:  # verl logs "Unknown resume mode" and fails on an unbound name, after Ray started
        error("trainer.resume_mode", resume, f"must be one of verl's resume modes {list(RESUME_MODES)}")
    elif str(resume) == "resume_path":
        error_ = _resume_path_rule(k.resume_from_path, k.default_local_dir)
        if error_:
            error("trainer.resume_from_path", k.resume_from_path, error_)
    clip = k.clip_grad
    if isinstance(clip, bool) or not isinstance(clip, (int, float)) or not math.isfinite(clip) or clip <= 0:
        error(f"{ACTOR}.optim.clip_grad", clip, "must be a finite gradient-norm bound > 0")
    if k.async_save is True and k.checkpoint_manifest:
        error(f"{ACTOR}.checkpoint.async_save", True, "with rlec.checkpoint.manifest=true: the manifest is written right "
              "after verl's save and needs its files complete (synchronous saves); set async_save=false, or "
              "rlec.checkpoint.manifest=false to train without the checkpoint integrity check")
    return out


def _resume_path_rule(path: Any, root: Any) -> str | None:
    """The rule ``trainer.resume_from_path`` breaks with ``resume_mode=resume_path``, or None: a ``global_step_<N>`` folder
    inside ``trainer.default_local_dir`` (verl asserts a string naming a step, inside Ray; rlec's resume rules read the
    run's records, rlec_run.json and rlec_layout.json, beside the checkpoints)."""
    if not isinstance(path, str) or not re.fullmatch(r"global_step_\d+", os.path.basename(os.path.normpath(path))):
        return "must name a global_step_<N> checkpoint folder with trainer.resume_mode=resume_path"
    if root is None or os.path.normpath(os.path.dirname(os.path.normpath(path))) != os.path.normpath(str(root)):
        return (f"must be a folder inside trainer.default_local_dir ({root}): the run's settings and layout records there "
                "are what a resume is checked against")
    return None


def settings_rules(run: RunConfig) -> list[Finding]:
    """Every finding of the early rule set (module docstring) on a composed config; errors only.

    Args:
        run: the process's :class:`rlec.run_config.RunConfig` of the composed trainer config.

    Returns:
        One ``error`` :class:`Finding` per refused setting under its full key, message ``"<value> <rule>"``.
    """
    out: list[Finding] = []
    cfg, keys = run.tree, run.keys  # once: the verl keys these rules judge (the number rules walk the raw tree)
    try:
        settings = run.rlec
    except SettingError as exc:
        out.append(Finding("error", exc.key, f"{exc.value!r} {exc.rule}"))
    else:
        out += _schedule_rules(cfg, settings) + _cpu_wing_rules(settings, keys)
    return (out + _section_rules(cfg) + _verl_rules(cfg, keys) + _number_rules(cfg) + _threshold_rules(keys)
            + _betas_rule(cfg) + _batch_rules(cfg) + _length_rules(cfg))


def early_errors(run: RunConfig, overrides: Sequence[str] = ()) -> list[Finding]:
    """The errors a run is refused for before any work: :func:`override_rules` (when the caller has the overrides),
    :func:`settings_rules`, then, when those pass, every enabled algorithm's check
    (:func:`rlec.algorithms.registry.check_all`). What verl's trainer runs at construction and the demo before its
    first stage; DRY_RUN runs the same and more (:func:`rlec.cluster.config_check.run_checks`).

    Returns:
        The ``error`` findings, in that order (empty: the run may start).
    """
    from rlec.algorithms.registry import check_all

    errors = [f for f in override_rules(overrides) + settings_rules(run) if f.level == "error"]
    return errors or [f for f in check_all(run) if f.level == "error"]


BETAS_KEY = f"{ACTOR}.optim.betas"
STORAGE_KEY = "transfer_queue.backend.SimpleStorage.total_storage_size"


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _betas_rule(cfg: Any) -> list[Finding]:
    """Adam's ``(beta1, beta2)``: the decay rates of its moment averages, each in [0, 1) (Kingma & Ba 2015; torch.optim.Adam
    raises for others, but only when verl's worker builds the optimizer, after Ray and the model are up)."""
    betas = _raw(cfg, BETAS_KEY)
    if betas is _ABSENT or betas is None:
        return []
    values = list(betas) if hasattr(betas, "__len__") and not isinstance(betas, str) else [betas]
    if len(values) == 2 and all(_is_number(b) and 0 <= b < 1 for b in values):
        return []
    return [Finding("error", BETAS_KEY, f"{values!r} must be two numbers [beta1, beta2], each in [0, 1): the decay rates "
                    "of Adam's moment averages (1 or more never forgets, a negative one oscillates)")]


def _batch_rules(cfg: Any) -> list[Finding]:
    """``rollout.n`` against what a step can hold: verl's trainer puts a step's ``data.train_batch_size x rollout.n``
    rows into TransferQueue at once, whose storage holds ``total_storage_size`` rows (null: unbounded) and raises
    "Storage capacity exceeded" past it, after the whole rollout (``transfer_queue/storage/simple_storage.py``,
    ``StorageUnitData.put_data``). E3's budget moves responses between prompts but keeps that sum."""
    n, batch, capacity = _raw(cfg, f"{ROLLOUT}.n"), _raw(cfg, "data.train_batch_size"), _raw(cfg, STORAGE_KEY)
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in (n, batch, capacity)):
        return []  # the number rules name a bad value (null capacity: TransferQueue holds any number of rows)
    if batch * n <= capacity:
        return []
    return [Finding("error", f"{ROLLOUT}.n", f"{n!r} must be at most {STORAGE_KEY} / data.train_batch_size = {capacity} / "
                    f"{batch} = {capacity // batch}: a step's {batch} x {n} = {batch * n:,} responses go into TransferQueue "
                    f"at once, which holds {capacity:,} rows and fails the step after its rollout otherwise")]


def _length_rules(cfg: Any) -> list[Finding]:
    """``rollout.response_length`` (what the rollout generates) equals ``data.max_response_length`` (what verl's trainer
    pads and budgets a response to; the recipe interpolates one from the other): a shorter rollout truncates every
    response below the length the run was planned for, without a word; a longer one overflows the padding."""
    key, data_key = f"{ROLLOUT}.response_length", "data.max_response_length"
    rollout, data = _raw(cfg, key), _raw(cfg, data_key)
    if rollout is _ABSENT or data is _ABSENT or rollout == data:
        return []
    return [Finding("error", key, f"{rollout!r} must equal {data_key} ({data!r}): set MAX_RESPONSE_LENGTH "
                    f"(data.max_response_length) alone, and the rollout follows it")]


def _threshold_rules(k: VerlKeys) -> list[Finding]:
    """``rollout_is_threshold`` where importance sampling is on (its one rule: :func:`rlec.rules.moe.threshold_error`)."""
    if k.rollout_is is None:
        return []
    value = k.rollout_is_threshold
    why = threshold_error(value)
    return [Finding("error", f"{CORRECTION}.rollout_is_threshold", f"{value!r} {why}")] if why else []


# rlec.cpu's settings that switch a behaviour of the CPU wing on (scripted answers, the induced mismatch); the
# others (the noise's seed, the final evaluation) only shape a switched-on behaviour and are harmless elsewhere
CPU_WING_SWITCHES = ("scripted_fraction", "rollout_weight_noise")


def _cpu_wing_rules(settings: RlecSettings, keys: VerlKeys) -> list[Finding]:
    """``rlec.cpu``'s switches (:data:`CPU_WING_SWITCHES`) set off their defaults (:class:`rlec.settings.CpuSettings`'s)
    on a device other than the CPU: the CPU wing that implements them (:mod:`rlec.cpu`) is loaded only on the CPU
    platform (issue 59), so on a GPU they would be ignored without a word."""
    if str(keys.device) == "cpu":
        return []
    defaults = {f.name: f.default for f in fields(CpuSettings)}
    return [Finding("error", f"rlec.cpu.{name}", f"{value!r} is set on trainer.device={keys.device}, but the CPU wing "
                    "(rlec.cpu) that implements it is loaded only on the CPU platform (layout=cpu); a GPU run would "
                    "ignore it: remove the override")
            for name in CPU_WING_SWITCHES if (value := getattr(settings.cpu, name)) != defaults[name]]


def _schedule_rules(cfg: Any, settings: RlecSettings) -> list[Finding]:
    """The b schedule (``rlec.schedule``) spans more than one step: its end (``end_step``, else
    ``trainer.total_training_steps``) is after ``start_step`` (the schema checks an explicit end alone)."""
    schedule = settings.schedule
    total = cfg.get("trainer", {}).get("total_training_steps") if hasattr(cfg, "get") else None
    end = schedule.end_step if schedule.end_step is not None else total
    if end is None or isinstance(end, bool) or not isinstance(end, int) or end > schedule.start_step:
        return []
    if schedule.end_step is None and end < 1:
        return []  # a step count < 1 is refused as such by the run's own checks
    return [Finding("error", "rlec.schedule.end_step",
                    f"{end!r} the b schedule needs more than one step, but it would end at step {end} <= start_step "
                    f"{schedule.start_step}: with trainer.total_training_steps={total} set rlec.schedule.end_step >= "
                    f"{schedule.start_step + 1}")]


def _section_rules(cfg: Any) -> list[Finding]:
    """An ``rlec.<name>`` section that neither the schema nor a registered algorithm owns (a typo of a section
    name); an algorithm's section (its ``section``, e.g. ``rlec.e3``) is accepted without a
    change here (docs/adding_an_algorithm.md)."""
    from rlec.algorithms.registry import ALGORITHMS

    section = cfg.get("rlec") if hasattr(cfg, "get") else None
    if not hasattr(section, "keys"):
        return []
    owned = {cls.section.removeprefix("rlec.").split(".")[0] for cls in ALGORITHMS if cls.section.startswith("rlec.")}
    known = RlecSettings.sections() | owned
    return [Finding("error", f"rlec.{name}", f"{section[name]!r} is not an rlec section (known: {sorted(known)})")
            for name in section.keys() if name not in known]
