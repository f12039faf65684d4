"""RLVE driven by the generic algorithms mixin of rlec's verl trainers, the RLVE overlay through DRY_RUN's checks, and
drift guards for the verl 0.9.1 behaviour the RLVE path relies on."""

from __future__ import annotations

import importlib
import inspect

import pytest

pytest.importorskip("verl")

import transfer_queue as tq  # noqa: E402
from verl.trainer.ppo.v1 import PPOTrainerSync  # noqa: E402
from verl.utils.tensordict_utils import list_of_dict_to_tensordict  # noqa: E402

from rlec.cluster.config_check import run_checks  # noqa: E402
from rlec.config import CONFIG_DIR, cluster_layouts, gpu_precisions  # noqa: E402
from rlec.environments import EnvironmentSource  # noqa: E402
from rlec.algorithms.rlve.algorithm import RLVE as RLVEAlgorithm  # noqa: E402
from rlec.run_config import RunConfig  # noqa: E402
from rlec.verl_plugin import AlgorithmsMixin, RLECColocateAsyncTrainer, RLECSeparateAsyncTrainer, RLECSyncTrainer  # noqa: E402

# the override that selects megatron_configs/algorithm/rlve.yaml (appended to the defaults list)
RLVE = "algorithm=rlve"
LAYOUTS = cluster_layouts()
PRECISIONS = gpu_precisions()


class FakeDataset:
    def __init__(self, source):
        self.rlve_source = source


def agent_loop_fields(rows, outcomes):
    """What verl's agent loop stores per response in TransferQueue: the prompt row's fields
    (``field.update(kwargs)``) and ``extra_fields.reward_extra_info`` (rlec's reward record)."""
    fields = []
    for row, correct in zip(rows, outcomes):
        fields.append({"data_source": row["data_source"], "extra_info": row["extra_info"],
                       "extra_fields": {"reward_extra_info": {"correct": float(correct), "score": 0.5}}})
    return list_of_dict_to_tensordict(fields)


def trainer_with(source, monkeypatch, rows, outcomes, padding=()):
    from transfer_queue import KVBatchMeta

    keys = [f"k{i}" for i in range(len(rows))]
    batch = KVBatchMeta(keys=keys, tags=[{"is_padding": i in padding} for i in range(len(rows))], partition_id="train")
    calls = []

    def fake_step(self, metrics, timing_raw):
        metrics["actor/entropy"] = 1.0
        return batch

    def fake_get(keys, partition_id, select_fields):
        calls.append((list(keys), partition_id, list(select_fields)))
        return agent_loop_fields(rows, outcomes)

    monkeypatch.setattr(PPOTrainerSync, "step", fake_step)
    monkeypatch.setattr(tq, "kv_batch_get", fake_get)
    trainer = RLECSyncTrainer.__new__(RLECSyncTrainer)  # step() and the mixin use no other trainer state
    trainer.train_dataset = FakeDataset(source)
    trainer.rlec_algorithms = [RLVEAlgorithm(source)] if source is not None else []  # what on_init_end builds
    return trainer, batch, calls


def test_every_rlec_trainer_carries_the_mixin():
    for cls in (RLECSyncTrainer, RLECColocateAsyncTrainer, RLECSeparateAsyncTrainer):
        mro = cls.__mro__
        assert AlgorithmsMixin in mro
        assert mro.index(AlgorithmsMixin) < mro.index(next(c for c in mro if c.__name__.startswith("PPOTrainer")))


def test_step_feeds_every_sample_to_the_controllers_and_logs_rlve_metrics(monkeypatch):
    source = EnvironmentSource({"environments": ["maze", "sorting"], "samples_per_prompt": 1, "min_samples_factor": 4})
    rows = [source.next_row() for _ in range(12)]
    static = {"data_source": "math_dapo", "extra_info": {"question_id": "q", "target_p": 0.2}}
    rows = rows + [static, static]
    outcomes = [True] * 12 + [False, False]
    trainer, batch, calls = trainer_with(source, monkeypatch, rows, outcomes, padding=(13,))
    metrics = {}
    assert trainer.step(metrics, {}) is batch
    assert calls == [(batch.keys, "train", ["extra_info", "extra_fields"])]
    counts = {n: sum(r["extra_info"].get("environment") == n for r in rows) for n in ("maze", "sorting")}
    assert metrics["actor/entropy"] == 1.0  # verl's own metrics untouched
    assert metrics["rlve/share"] == 12 / 13  # the padding sample is not counted
    for name, n in counts.items():
        assert metrics[f"rlve/{name}/share"] == n / 13
        raised = n >= 4  # all at h = 0, all correct
        assert metrics[f"rlve/{name}/difficulty"] == float(raised) and source.controllers[name].h == int(raised)
        assert metrics[f"rlve/{name}/accuracy_at_h"] == 1.0


def test_step_is_a_no_op_without_an_environment_dataset(monkeypatch):
    trainer, batch, calls = trainer_with(None, monkeypatch, [], [])
    trainer.train_dataset = object()
    metrics = {}
    assert trainer.step(metrics, {}) is batch and calls == [] and metrics == {"actor/entropy": 1.0}


def test_enabled_without_the_dataset_is_refused_at_init(compose_rlec, monkeypatch):
    synced = []
    monkeypatch.setattr(PPOTrainerSync, "on_init_end", lambda self: synced.append(True))  # verl's weight sync
    trainer = RLECSyncTrainer.__new__(RLECSyncTrainer)
    def fresh(config, dataset):
        trainer.config, trainer.train_dataset, trainer.rlec_algorithms = config, dataset, None
        trainer.rlec_run = RunConfig(config)  # what the trainer's construction converts

    fresh(compose_rlec(RLVE), object())
    with pytest.raises(ValueError, match="data.custom_cls.path=pkg://rlec.verl_plugin.rlve_dataset"):
        trainer.on_init_end()
    assert synced == []  # refused before verl starts syncing weights
    fresh(compose_rlec(), object())
    trainer.on_init_end()  # not enabled: nothing to check, verl's hook runs
    fresh(compose_rlec(RLVE), FakeDataset(EnvironmentSource({"samples_per_prompt": 1})))
    trainer.on_init_end()
    assert synced == [True, True]


# ---- the overlay and the config check ----

@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_overlay_composes_with_every_layout_and_passes_the_checks(compose_rlec, fp8_model, layout, precision):
    cfg = compose_rlec(f"layout={layout}", f"precision={precision}", RLVE, *fp8_model(layout, precision))
    findings, _, _ = run_checks(RunConfig(cfg), check_paths=False)
    assert [str(f) for f in findings if f.level == "error"] == []
    assert cfg.data.dataloader_num_workers == 0  # also over tiny_1gpu's 2
    assert cfg.data.custom_cls.name == "RLVEDataset" and cfg.data.rlve.enable is True
    assert cfg.data.rlve.samples_per_prompt == cfg.actor_rollout_ref.rollout.n


# the settings' findings name the full key (issue 35: RLVESettings.check), not the section rlec.rlve
RLVE_INVALID = [
    (("data.dataloader_num_workers=2",), "data.dataloader_num_workers", "RLVE needs 0"),
    (("data.custom_cls.name=RLHFDataset",), "data.custom_cls", "RLVE needs path="),
    (("rlec.rlve.environments=[maze,nope]",), "rlec.rlve.environments", "unknown environment 'nope'"),
    (("rlec.rlve.window=0",), "rlec.rlve.window", "window must be an int >= 1"),
    (("rlec.rlve.rows_per_epoch=-5",), "rlec.rlve.rows_per_epoch", "rows_per_epoch must be >= 1"),
    (("data.val_files=${data.train_files}",), "data.val_files", "must differ from data.train_files"),
    (("trainer.v1.trainer_mode=sync",), "trainer.v1.trainer_mode", "only rlec's trainers"),
]


@pytest.mark.parametrize(("overrides", "key", "message"), RLVE_INVALID, ids=[m for _, _, m in RLVE_INVALID])
def test_rlve_rule_refuses_what_would_break_the_controllers(compose_rlec, overrides, key, message):
    findings = RLVEAlgorithm.check(RunConfig(compose_rlec(RLVE, *overrides)))
    assert any(f.level == "error" and f.key == key and message in f.message for f in findings), [str(f) for f in findings]


def test_rlve_rule_is_silent_when_disabled_and_warns_for_async_modes(compose_rlec):
    assert RLVEAlgorithm.check(RunConfig(compose_rlec("data.dataloader_num_workers=2"))) == []
    findings = RLVEAlgorithm.check(RunConfig(compose_rlec(RLVE, "trainer.v1.trainer_mode=rlec_colocate_async")))
    assert [f.level for f in findings] == ["warning"] and "exact in rlec_sync" in findings[0].message


# ---- drift: the verl 0.9.1 behaviour the RLVE path relies on ----

def source(module, attr=None):
    obj = importlib.import_module(module)
    return inspect.getsource(getattr(obj, attr) if attr else obj)


def test_drift_trainer_step_and_checkpoint_order():
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    assert list(inspect.signature(PPOTrainer.step).parameters) == ["self", "metrics", "timing_raw"]
    assert list(inspect.signature(PPOTrainer.on_init_end).parameters) == ["self"]
    fit = source("verl.trainer.ppo.v1.trainer_base", "PPOTrainer")
    # the controllers are updated at the end of step(), before the checkpoint of the same step
    body = fit[fit.index("def fit("):]
    assert body.index("batch = self.step(metrics, self.timing_raw)") < body.index("self._save_checkpoint()")
    assert "self.on_init_end()" in fit and "self._init_dataloader()" in fit
    # the dataloader state (our dataset's state_dict) is what data.pt holds, and it is restored
    assert "torch.save(self.train_dataloader.state_dict(), dataloader_local_path)" in fit
    assert "self.train_dataloader.load_state_dict(dataloader_state_dict)" in fit
    # custom dataset classes: built by create_rl_dataset with these keyword arguments, for train and val
    assert "num_workers=self.config.data[\"dataloader_num_workers\"]" in fit
    utils = source("verl.trainer.ppo.utils", "create_rl_dataset")
    assert "data_files=data_paths" in utils and "config=data_config" in utils and "max_samples=max_samples" in utils


def test_drift_agent_loop_stores_the_prompt_fields_with_every_response():
    tq_loop = source("verl.trainer.ppo.v1.agent_loop_tq")  # AgentLoopWorkerTQ is a Ray actor class
    assert "field.update(kwargs)" in tq_loop and "list_of_dict_to_tensordict(fields)" in tq_loop
    assert list(inspect.signature(tq.kv_batch_get).parameters) == ["keys", "partition_id", "select_fields"]


def test_drift_stateful_dataloader_saves_a_stateful_map_dataset():
    from torchdata.stateful_dataloader.stateful import Stateful

    from rlec.verl_plugin.rlve_dataset import RLVEDataset

    assert issubclass(RLVEDataset, Stateful)
    loader = source("torchdata.stateful_dataloader.stateful_dataloader")
    assert "dataset_state = try_to_serialize(self._dataset_fetcher.dataset)" in loader


def test_overlay_values_are_the_python_defaults(compose_rlec):
    import dataclasses

    from omegaconf import OmegaConf

    from rlec.environments import SourceConfig
    from rlec.algorithms.rlve.settings import DEFAULT_ROWS_PER_EPOCH

    settings = OmegaConf.to_container(compose_rlec(RLVE).rlec.rlve, resolve=True)
    assert settings.pop("enable") is True and settings.pop("rows_per_epoch") == DEFAULT_ROWS_PER_EPOCH
    assert settings.pop("environments") == ["all"]
    defaults = {f.name: f.default for f in dataclasses.fields(SourceConfig) if f.name != "environments"}
    defaults["difficulty"] = {}
    defaults["samples_per_prompt"] = 8  # the interpolation of actor_rollout_ref.rollout.n in rlec.yaml
    defaults["max_prompt_tokens"] = 2048  # the interpolation of data.max_prompt_length (recipe.yaml)
    defaults["lookahead"] = 256  # the interpolation of data.train_batch_size (recipe.yaml)
    assert settings == defaults


def test_overlay_sets_only_keys_verl_defines_plus_data_rlve():
    from hydra import compose, initialize_config_module
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf

    GlobalHydra.instance().clear()
    with initialize_config_module("verl.trainer.config", version_base=None):
        verl_cfg = compose("ppo_trainer", overrides=["model_engine=megatron"])
    GlobalHydra.instance().clear()

    def leaves(node, prefix=""):
        for key, value in node.items():
            path = f"{prefix}.{key}" if prefix else str(key)
            yield from leaves(value, path) if isinstance(value, dict) else [path]

    overlay = OmegaConf.to_container(OmegaConf.load(CONFIG_DIR / "algorithm" / "rlve.yaml"), resolve=False)
    ours = [p for p in leaves(overlay) if not p.startswith("rlec.") and p != "data.rlve"]
    assert ours and all(OmegaConf.select(verl_cfg, p, default="<missing>") != "<missing>" for p in ours), ours
    assert OmegaConf.select(verl_cfg, "data.rlve", default="<missing>") == "<missing>"  # our key never shadows verl's


def test_drift_rlhf_dataset_methods_the_rlve_dataset_overrides_or_calls():
    from verl.utils.dataset.rl_dataset import RLHFDataset

    # overridden: an empty training file list (environments only) skips reading
    assert list(inspect.signature(RLHFDataset._read_files_and_tokenize).parameters) == ["self"]
    init = source("verl.utils.dataset.rl_dataset", "RLHFDataset")
    assert "self._read_files_and_tokenize()" in init[init.index("def __init__"):init.index("def _download")]
    # called for environment rows, as RLHFDataset.__getitem__ does (the row comparison test checks the rest)
    assert list(inspect.signature(RLHFDataset._build_messages).parameters) == ["self", "example", "key"]
    assert 'row_dict["raw_prompt"] = self._build_messages(row_dict, key=self.prompt_key)' in init
