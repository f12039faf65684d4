"""Drift guard: fails when a verl 0.9.1 symbol, signature, behaviour or config key rlec relies on
changes. Each assertion names what rlec uses it for."""

from __future__ import annotations

import importlib
import inspect

import pytest
from omegaconf import DictConfig, OmegaConf

from rlec.config import CONFIG_DIR

SYMBOLS = [
    ("verl.experimental.reward_loop.reward_manager", "register"),  # registers "rlec"
    ("verl.experimental.reward_loop.reward_manager", "get_reward_manager_cls"),  # workers resolve it
    ("verl.experimental.reward_loop.reward_manager.naive", "NaiveRewardManager"),  # our base class
    ("verl.experimental.reward_loop", "RewardLoopManager"),  # tested path
    ("verl.trainer.ppo.reward", "resolve_reward_manager_cls"),  # config_check's reward step
    ("verl.trainer.ppo.v1", "register_trainer"),
    ("verl.trainer.ppo.v1", "get_trainer_cls"),
    ("verl.trainer.ppo.v1", "PPOTrainerSync"),
    ("verl.trainer.ppo.v1", "PPOTrainerColocateAsync"),
    ("verl.trainer.ppo.v1", "PPOTrainerSeparateAsync"),
    ("verl.utils.config", "validate_config"),
    ("verl.utils.config", "omega_conf_to_dataclass"),
    ("verl.trainer.ppo.utils", "need_critic"),
    ("verl.trainer.ppo.utils", "need_reference_policy"),
    ("verl.utils.import_utils", "import_external_libs"),
    ("verl.trainer.constants_ppo", "get_ppo_ray_runtime_env"),
    ("transfer_queue", "kv_batch_get"),  # training metrics read reward_extra_info back
    ("transfer_queue", "KVBatchMeta"),
]


@pytest.mark.parametrize(("module", "name"), SYMBOLS, ids=[f"{m}.{n}" for m, n in SYMBOLS])
def test_symbol_exists(module, name):
    assert hasattr(importlib.import_module(module), name)


def params(func):
    return list(inspect.signature(func).parameters)


def test_signatures_rlec_overrides_or_calls():
    from verl.experimental.reward_loop.reward_manager.naive import NaiveRewardManager
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    assert params(NaiveRewardManager.__init__) == [
        "self", "config", "tokenizer", "compute_score", "reward_router_address", "reward_model_tokenizer"]
    assert params(NaiveRewardManager.run_single) == ["self", "data"]
    assert params(PPOTrainer._compute_metrics) == ["self", "batch", "metrics", "timing_raw", "global_steps", "epoch"]
    assert params(PPOTrainer._val_metrics_update)[:5] == [
        "self", "data_sources", "sample_uids", "reward_extra_infos_dict", "sample_turns"]


def test_megatron_lm_head_methods_rlec_cpu_wraps():
    """rlec.cpu.padded_forward's response_only_logits shim wraps MegatronEngineWithLMHead.forward_step and replaces
    the private _lm_head_logits_processor for the duration of a windowed forward: their signatures, and that the
    forward runs the model and the processor inside forward_step (where the window is set), must stay."""
    from verl.workers.engine.megatron.transformer_impl import MegatronEngineWithLMHead

    from rlec.cpu.padded_forward import _response_logits_apply  # noqa: F401  (what the pins below serve)

    def unwrapped(func):
        return getattr(func, "__wrapped__", func)

    assert params(unwrapped(MegatronEngineWithLMHead.forward_step)) == [
        "self", "batch_iter", "model", "logits_processor_func", "postprocess_micro_batch_func"]
    assert params(unwrapped(MegatronEngineWithLMHead._lm_head_logits_processor)) == [
        "self", "logits", "label", "temperature", "calculate_sum_pi_squared", "calculate_entropy",
        "distillation_use_topk", "distillation_only", "logits_processor_func", "batch", "data_format"]
    step = inspect.getsource(unwrapped(MegatronEngineWithLMHead.forward_step))
    assert "batch: TensorDict = next(batch_iter)" in step  # one micro-batch per call: the wrapper reads it first
    assert "self._lm_head_logits_processor," in step and "output = forward_fn(" in step
    engine_forward = source("verl.models.mcore.model_forward", "gptmodel_forward_model_engine")
    # BSHD rows right-padded from position 0; label and temperature padded like them, the processor's
    # outputs (b, s) mapped back per row: the window's positions and the scatter rely on this layout
    assert "output_dict = logits_processor(output_orig, **args)" in engine_forward
    assert "postprocess_bshd_engine(v, attention_mask_bshd, post_process=post_process)" in engine_forward
    bshd = source("verl.models.mcore.util", "preprocess_bshd_engine")
    assert "attention_mask[i, :seqlen_i] = True" in bshd and "input_ids_bshd[i, :seqlen_i] = input_ids[i]" in bshd


def source(module, attr=None):
    obj = importlib.import_module(module)
    return inspect.getsource(getattr(obj, attr) if attr else obj)


def test_behaviours_rlec_relies_on():
    naive = source("verl.experimental.reward_loop.reward_manager.naive")
    # async score functions run in the caller's task: the per-sample step in a ContextVar reaches them
    assert "result = await self.compute_score(" in naive
    # the trainer stamps the step on every batch; the agent loop passes non-tensor fields to the worker
    trainer = source("verl.trainer.ppo.v1.trainer_base")
    assert 'tu.assign_non_tensor_data(batch, "global_steps", self.global_steps)' in trainer
    agent_loop = source("verl.experimental.agent_loop.agent_loop")
    assert "**{k: np.array([v] * n) for k, v in kwargs.items()}" in agent_loop
    assert 'final_output.extra_fields["reward_extra_info"] = result["reward_extra_info"]' in agent_loop
    # schedule_length reads the step count the trainer writes before starting the reward workers
    init_dataloader = source("verl.trainer.ppo.v1.trainer_base", "PPOTrainer")
    writes_steps = "self.config.actor_rollout_ref.actor.optim.total_training_steps = optim_total_training_steps"
    assert writes_steps in init_dataloader
    assert init_dataloader.index("self._init_dataloader()") < init_dataloader.index("RewardLoopManager(")
    # registration through the environment
    assert 'os.getenv("VERL_USE_EXTERNAL_MODULES"' in source("verl")
    # verl's own EP rule for vLLM rollout, mirrored by rlec.rules.checks
    assert "expert_parallel_size must be equal to tensor_model_parallel_size * data_parallel_size" in source(
        "verl.workers.config.rollout")


FREE_FORM = {"override_transformer_config", "override_optimizer_config", "override_config", "env_vars", "ray_init",
             "apply_chat_template_kwargs"}


def leaf_keys(node, prefix=""):
    for key, value in node.items_ex(resolve=False):  # precision/fp8.yaml interpolates a key of the composed config
        path = f"{prefix}.{key}" if prefix else str(key)
        if key in FREE_FORM:
            yield path, True
        elif isinstance(value, DictConfig):
            yield from leaf_keys(value, path)
        else:
            yield path, False


@pytest.fixture(scope="module")
def verl_base_config():
    from hydra import compose, initialize_config_module
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    with initialize_config_module("verl.trainer.config", version_base=None):
        cfg = compose("ppo_trainer", overrides=["model_engine=megatron"])
    return OmegaConf.to_container(cfg, resolve=False, throw_on_missing=False)


def has_key(tree: dict, dotted: str) -> bool:
    for part in dotted.split("."):
        if not isinstance(tree, dict) or part not in tree:
            return False
        tree = tree[part]
    return True


# the verl configs
CONFIG_FILES = sorted(p.relative_to(CONFIG_DIR) for p in [CONFIG_DIR / "rlec.yaml", *CONFIG_DIR.glob("layout/*.yaml"),
                                                          *CONFIG_DIR.glob("precision/*.yaml"), *CONFIG_DIR.glob("moe/*.yaml")])


# RolloutConfig.custom ("Extension point for custom configurations", verl/workers/config/rollout.py): what
# rlec_hf's server reads of rlec.cpu (it receives the rollout section only)
ROLLOUT_CUSTOM = "actor_rollout_ref.rollout.custom"


@pytest.mark.parametrize("relpath", CONFIG_FILES, ids=[str(p) for p in CONFIG_FILES])
def test_every_key_we_set_exists_in_verl_config(verl_base_config, relpath):
    cfg = OmegaConf.load(CONFIG_DIR / relpath)
    missing = []
    for path, free_form in leaf_keys(cfg):
        if path.split(".")[0] in ("hydra", "defaults", "rlec"):
            continue
        if path.startswith(ROLLOUT_CUSTOM + "."):  # verl's extension dict: a RolloutConfig field its YAML leaves out
            from verl.workers.config.rollout import RolloutConfig

            if "custom" not in RolloutConfig.__dataclass_fields__:
                missing.append(path)
            continue
        # free-form dicts (Megatron overrides, env vars) may hold new keys; their parent must exist
        checked = path.rsplit(".", 1)[0] if free_form else path
        if not has_key(verl_base_config, checked):
            missing.append(path)
    assert missing == [], f"{relpath}: keys verl 0.9.1 does not define: {missing}"


def test_key_check_catches_removed_keys(verl_base_config):
    # actor.megatron.grad_offload was removed in verl 0.9.1 (0.9.0 example scripts still set it)
    assert not has_key(verl_base_config, "actor_rollout_ref.actor.megatron.grad_offload")
    assert has_key(verl_base_config, "actor_rollout_ref.actor.megatron.optimizer_offload")


def test_resume_reads_the_tracker_rlec_repairs():
    """rlec.verl_plugin.state.intact_checkpoint rewrites latest_checkpointed_iteration.txt before verl's
    _load_checkpoint; verl must still resume auto mode from that tracker and its global_step_<N> folders."""
    from verl.utils.checkpoint.checkpoint_manager import get_checkpoint_tracker_filename

    from rlec.verl_plugin.state import TRACKER

    trainer = source("verl.trainer.ppo.v1.trainer_base")
    assert "global_step_folder = find_latest_ckpt_path(checkpoint_folder)" in trainer
    assert get_checkpoint_tracker_filename("/r") == f"/r/{TRACKER}"
    assert 'directory_format="global_step_{}"' in source("verl.utils.checkpoint.checkpoint_manager")


def test_fit_logs_the_metrics_dict_step_fills_after_the_save():
    """CheckpointIntegrityMixin keeps the dict verl's fit hands to step() and logs it when the save fails on a full
    disk: fit must pass that dict to step, save, then log it."""
    fit = source("verl.trainer.ppo.v1.trainer_base", "PPOTrainer")
    at_step = fit.index("batch = self.step(metrics, self.timing_raw)")
    at_save = fit.index("self._save_checkpoint()", at_step)
    assert at_step < at_save < fit.index("self.logger.log(data=metrics, step=self.global_steps)", at_save)
