"""The configuration of one process, read once into typed objects: :class:`RunConfig` (issue 59 item 1).

A process reads the composed config (verl's trainer config with rlec's ``rlec.*`` sections) once into a
:class:`RunConfig` and hands that object, not the config tree, to rlec's code: the algorithms' class methods
(:mod:`rlec.algorithms.base`: ``enabled`` / ``check`` / ``from_config`` / ``verdict``), the early rules, the trainer's
mixins. It carries

- :attr:`RunConfig.keys`: :class:`VerlKeys`, every verl key rlec reads, raw as composed (a rule or an algorithm's check
  must see a bad value to refuse it naming its key; verl's dataclasses, :mod:`rlec.verl_plugin.typed_config`, would
  raise on the first one);
- :attr:`RunConfig.rlec`: :class:`rlec.settings.RlecSettings`, rlec's own sections, parsed on first use;
- :meth:`RunConfig.section`: a settings dataclass of one section (``rlec.e3`` as ``E3Settings``:
  :func:`rlec.settings.read_section`), parsed once per object;
- :meth:`RunConfig.plain`: a section as plain containers, for the keys the algorithms add to verl's sections
  (``algorithm.passk``, ``data.rlve``: their ``verl_keys``), which no dataclass of verl's knows;
- :meth:`RunConfig.enabled`: an algorithm's switch ``<section>.enable``; :attr:`RunConfig.trainer_mode`: rlec's trainer
  mode (:func:`rlec.config_writes.rlec_trainer_mode`).

A process converts its config once, where it gets it, and hands the object on: verl's trainer at construction, after
the resume rules wrote what they pin (``rlec_run`` of :class:`rlec.verl_plugin.trainers.AlgorithmsMixin`, which every
mixin reads), the reward manager at construction, DRY_RUN's check and the launcher's tools at their start. Each
section is parsed at most once per object, on first use; a parse error is raised on every access (never kept).
verl builds an agent loop per sample from its worker's config, so the agent loops share one conversion per config
object (:func:`worker_run_config`): the one cache of a conversion. Nothing else keeps one (:mod:`rlec.settings`
parses on every call). This module, with :mod:`rlec.settings` and :mod:`rlec.config_writes`, is where rlec reads the
config tree (tests/test_config_reads.py); it imports neither verl nor torch.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, field
from typing import Any, TypeVar

from rlec.config_base import select
from rlec.config_writes import rlec_trainer_mode, verl_base_mode
from rlec.settings import RlecSettings, plain, read_section

T = TypeVar("T")

ACTOR = "actor_rollout_ref.actor"
MEGATRON = f"{ACTOR}.megatron"
ROLLOUT = "actor_rollout_ref.rollout"
ENV_VARS = "ray_kwargs.ray_init.runtime_env.env_vars"
CORRECTION = "algorithm.rollout_correction"

__all__ = ["ACTOR", "CORRECTION", "ENV_VARS", "MEGATRON", "ROLLOUT", "RunConfig", "VerlKeys", "worker_run_config"]


def _key(dotted: str, default: Any = None) -> Any:
    """A :class:`VerlKeys` field: verl's dotted key and the value a missing (or null) key reads as."""
    return field(metadata={"key": dotted, "default": default})


@dataclass(frozen=True)
class VerlKeys:
    """The verl keys rlec reads (its rules, the algorithms' checks and builds, the trainer, the reward manager, the
    report), each read once (:meth:`read`), raw as composed; a missing or null key is the field's default
    (``rlec.config_base.select``'s rule). A field's verl key: :meth:`key_of`."""

    # layout and batches (rlec.rules.checks)
    sequence_parallel: Any = _key(f"{MEGATRON}.sequence_parallel", False)
    n_gpus_per_node: Any = _key("trainer.n_gpus_per_node", 1)
    rollout_pp: Any = _key(f"{ROLLOUT}.pipeline_model_parallel_size", 1)
    rollout_n: Any = _key(f"{ROLLOUT}.n", 1)
    rollout_name: Any = _key(f"{ROLLOUT}.name", "vllm")
    train_batch_size: Any = _key("data.train_batch_size")  # None when unset (the rules count it as 1)
    ppo_mini_batch_size: Any = _key(f"{ACTOR}.ppo_mini_batch_size", 1)
    use_dynamic_bsz: Any = _key(f"{ACTOR}.use_dynamic_bsz", False)
    ppo_max_token_len_per_gpu: Any = _key(f"{ACTOR}.ppo_max_token_len_per_gpu")
    log_prob_max_token_len_per_gpu: Any = _key(f"{ROLLOUT}.log_prob_max_token_len_per_gpu")
    ppo_micro_batch_size_per_gpu: Any = _key(f"{ACTOR}.ppo_micro_batch_size_per_gpu")
    # the run's length and warm-up
    total_training_steps: Any = _key("trainer.total_training_steps")
    # verl's trainer writes it (steps x local updates) before it starts the reward workers (rlec.reward.schedule)
    optim_total_training_steps: Any = _key(f"{ACTOR}.optim.total_training_steps")
    # rlec's key, raw: the resume rules compare a saved run's with this launch's (rlec.config.pinned_schedule_end)
    schedule_end_step: Any = _key("rlec.schedule.end_step")
    lr_warmup_steps: Any = _key(f"{ACTOR}.optim.lr_warmup_steps", -1)
    lr_warmup_steps_ratio: Any = _key(f"{ACTOR}.optim.lr_warmup_steps_ratio", 0.0)
    resume_mode: Any = _key("trainer.resume_mode", "auto")
    resume_from_path: Any = _key("trainer.resume_from_path")
    default_local_dir: Any = _key("trainer.default_local_dir")
    # the early rules' registries and ranges (rlec.rules.settings_rules)
    policy_loss_mode: Any = _key(f"{ACTOR}.policy_loss.loss_mode", "vanilla")
    loss_agg_mode: Any = _key(f"{ACTOR}.loss_agg_mode", "token-mean")
    clip_grad: Any = _key(f"{ACTOR}.optim.clip_grad", 1.0)
    async_save: Any = _key(f"{ACTOR}.checkpoint.async_save", False)
    # rlec's key, raw: the early rules judge it beside verl's async_save before rlec's settings are known valid
    checkpoint_manifest: Any = _key("rlec.checkpoint.manifest", True)
    # wiring: the plugin, the weight bridge, FP8, Megatron's overrides
    env_vars: Any = _key(ENV_VARS, {})
    # trainer.v1.trainer_mode as the config holds it when read: rlec's (rlec_sync) until rlec's trainer writes verl's
    # base mode (sync) there, so rlec_sync in the trainer's own RunConfig (built before that write); rlec's mode in
    # either case is RunConfig.trainer_mode, verl's base mode rlec.config_writes.verl_base_mode of it
    verl_trainer_mode: Any = _key("trainer.v1.trainer_mode", "")
    reward_manager: Any = _key("reward.reward_manager.name")
    use_mbridge: Any = _key(f"{MEGATRON}.use_mbridge", False)
    vanilla_mbridge: Any = _key(f"{MEGATRON}.vanilla_mbridge", False)
    rope_theta: Any = _key("actor_rollout_ref.model.override_config.rope_theta")
    override_transformer_config: Any = _key(f"{MEGATRON}.override_transformer_config", {})
    override_optimizer_config: Any = _key(f"{ACTOR}.optim.override_optimizer_config", {})
    optimizer_fp8_recipe: Any = _key(f"{ACTOR}.optim.override_optimizer_config.fp8_recipe")
    optimizer_cpu_offload: Any = _key(f"{ACTOR}.optim.override_optimizer_config.optimizer_cpu_offload", False)
    # the keys rlec's group advantage sets (rlec.rules.checks._algorithm_rules)
    adv_estimator: Any = _key("algorithm.adv_estimator")
    norm_adv_by_std_in_grpo: Any = _key("algorithm.norm_adv_by_std_in_grpo")
    use_kl_in_reward: Any = _key("algorithm.use_kl_in_reward")
    use_kl_loss: Any = _key(f"{ACTOR}.use_kl_loss")
    # rollout correction and routing replay (rlec.rules.moe)
    rollout_is: Any = _key(f"{CORRECTION}.rollout_is")
    rollout_rs: Any = _key(f"{CORRECTION}.rollout_rs")
    rollout_is_threshold: Any = _key(f"{CORRECTION}.rollout_is_threshold", 2.0)
    bypass_mode: Any = _key(f"{CORRECTION}.bypass_mode", False)
    correction_loss_type: Any = _key(f"{CORRECTION}.loss_type", "ppo_clip")
    calculate_log_probs: Any = _key(f"{ROLLOUT}.calculate_log_probs", False)
    router_replay_mode: Any = _key(f"{MEGATRON}.router_replay.mode", "disabled")
    rollout_routing_replay: Any = _key(f"{ROLLOUT}.enable_rollout_routing_replay", False)
    use_remove_padding: Any = _key(f"{MEGATRON}.use_remove_padding", True)
    device: Any = _key("trainer.device", "cuda")
    # the launcher's paths (rlec.cluster.paths): the model folder, the data files and how verl filters them
    model_path: Any = _key("actor_rollout_ref.model.path", "")
    use_dist_checkpointing: Any = _key(f"{MEGATRON}.use_dist_checkpointing", False)
    dist_checkpointing_path: Any = _key(f"{MEGATRON}.dist_checkpointing_path", "")
    train_files: Any = _key("data.train_files")
    val_files: Any = _key("data.val_files")
    gen_batch_size: Any = _key("data.gen_batch_size")
    total_epochs: Any = _key("trainer.total_epochs", 1)
    max_prompt_length: Any = _key("data.max_prompt_length")
    filter_overlong_prompts: Any = _key("data.filter_overlong_prompts", True)
    truncation: Any = _key("data.truncation", "error")
    trust_remote_code: Any = _key("data.trust_remote_code", False)
    apply_chat_template_kwargs: Any = _key("data.apply_chat_template_kwargs")
    # what the algorithms' checks and builds, the trainer, the reward manager and the report read (rlec.algorithms)
    rollout_temperature: Any = _key(f"{ROLLOUT}.temperature", 1.0)
    default_agent_loop: Any = _key(f"{ROLLOUT}.agent.default_agent_loop")
    dataloader_num_workers: Any = _key("data.dataloader_num_workers", 0)
    custom_cls_path: Any = _key("data.custom_cls.path")
    custom_cls_name: Any = _key("data.custom_cls.name")
    data_seed: Any = _key("data.seed", 0)
    custom_reward_function_path: Any = _key("reward.custom_reward_function.path")
    # Ray's logical CPUs (rlec.rules.resources)
    storage_units: Any = _key("transfer_queue.backend.SimpleStorage.num_data_storage_units", 8)
    ray_num_cpus: Any = _key("ray_kwargs.ray_init.num_cpus")

    @classmethod
    def read(cls, cfg: Any) -> "VerlKeys":
        """Every field's key of ``cfg`` (a composed ``DictConfig`` or nested dict), raw; reads only."""
        return cls(**{f.name: select(cfg, f.metadata["key"], f.metadata["default"]) for f in dataclasses.fields(cls)})

    @classmethod
    def key_of(cls, name: str) -> str:
        """verl's dotted key of the field ``name`` (what a finding names)."""
        return next(f.metadata["key"] for f in dataclasses.fields(cls) if f.name == name)


class RunConfig:
    """The composed config of one process, read once (module docstring): ``RunConfig(tree)``, where the process gets
    the tree; rlec's functions take the object, never a tree to convert.

    Attributes:
        tree: the config it was read from (``DictConfig`` or nested dict), for the readers that walk the raw tree
            (the early rules' number and unknown-key rules); rlec's code reads the fields below.
        keys: every verl key rlec reads (:class:`VerlKeys`), raw.
        trainer_mode: rlec's ``trainer.v1.trainer_mode`` ("" when absent), also once rlec's trainer wrote verl's
            base mode into the config (:func:`rlec.config_writes.rlec_trainer_mode`); the mode verl's trainer runs as
            is :func:`rlec.config_writes.verl_base_mode` of it. ``keys.verl_trainer_mode`` is the value the tree held
            when read: rlec's mode in the trainer's own ``rlec_run`` (built before verl's base mode is written).
    """

    def __init__(self, tree: Any) -> None:
        self.tree = tree
        self.keys = VerlKeys.read(tree)
        self.trainer_mode = rlec_trainer_mode(tree)
        self._sections: dict[tuple[type, str, str | None], Any] = {}
        self._plain: dict[str, dict[str, Any]] = {}

    @functools.cached_property
    def rlec(self) -> RlecSettings:
        """rlec's own sections (:meth:`rlec.settings.RlecSettings.from_config`), parsed on first use.

        Raises:
            rlec.settings.SettingError: an unknown ``rlec`` section or key, a wrong type, a value out of range.
        """
        return RlecSettings.from_config(self.tree)

    def section(self, cls: type[T], key: str, name: str | None = None) -> T:
        """The section ``key`` (dotted) as the settings dataclass ``cls`` (:func:`rlec.settings.read_section`: types
        checked, no range checks), parsed once per object.

        Args:
            cls: the settings dataclass.
            key: the section's dotted key (``rlec.e3``).
            name: the prefix of every key in an error (default ``key``; RLVE's copy ``data.rlve`` is named
                ``rlec.rlve``, the key users set).

        Raises:
            rlec.settings.SettingError: a key ``cls`` does not know, or a value of the wrong type.
        """
        memo = (cls, key, name)
        if memo not in self._sections:
            self._sections[memo] = read_section(cls, self.tree, key, name)
        return self._sections[memo]

    def plain(self, key: str) -> dict[str, Any]:
        """The section ``key`` as a plain dict (interpolations resolved; ``{}`` when absent): the keys an algorithm
        adds to verl's sections (its ``verl_keys``: ``algorithm.passk``, ``data.rlve``), which verl's dataclasses
        do not know.

        Raises:
            Exception: an interpolation that does not resolve, or a section that is no mapping (as OmegaConf raises).
        """
        if key not in self._plain:
            self._plain[key] = dict(plain(select(self.tree, key, {})) or {})
        return dict(self._plain[key])

    @property
    def parameter_sync_step(self) -> Any:
        """verl's ``trainer.v1.<mode>.parameter_sync_step`` of the mode verl's trainer runs as
        (:func:`rlec.config_writes.verl_base_mode` of :attr:`trainer_mode`, before or after rlec's trainer wrote it;
        ``sync`` when none; 1 when absent or null): local updates per training step, raw."""
        return select(self.tree, f"trainer.v1.{verl_base_mode(self.trainer_mode) or 'sync'}.parameter_sync_step") or 1

    def enabled(self, section: str) -> bool:
        """An algorithm's switch: ``<section>.enable`` of the config (false when absent), e.g. ``rlec.e3``."""
        return bool(select(self.tree, f"{section}.enable", False))


# the RunConfig of the config object verl hands its agent loops in this worker process (worker_run_config)
_WORKER_RUN: RunConfig | None = None


def worker_run_config(tree: Any) -> RunConfig:
    """The :class:`RunConfig` of ``tree``, the config verl hands an agent loop, converted once per config object.

    verl builds an agent loop per sample (``hydra.utils.instantiate`` in ``AgentLoopWorker._run_agent_loop``), each
    handed its worker's one config object, which nothing changes once the worker runs; this keeps the conversion
    (1.2 ms CPU: docs/speed.md) to one per worker instead of one per sample. Another object (another worker's, a
    test's) is converted afresh and replaces the one kept. rlec's one cache of a conversion (module docstring).
    """
    global _WORKER_RUN
    run = _WORKER_RUN
    if run is None or run.tree is not tree:
        run = _WORKER_RUN = RunConfig(tree)
    return run
