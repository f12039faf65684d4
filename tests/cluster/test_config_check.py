"""Every committed megatron_configs combination composes on verl's config and passes verl's and
rlec's checks (or, for the tiny model in FP8, is refused with the sizes); the overlays inherit
instead of copying; impossible layouts are refused with a message that names the limit; the
paths a run reads and writes are checked unless skipped."""

from __future__ import annotations

import pytest

from rlec.cluster.config_check import main, report, run_checks
from rlec.config import CONFIG_DIR, cluster_layouts, gpu_precisions
from rlec.run_config import RunConfig

LAYOUTS = cluster_layouts()
PRECISIONS = gpu_precisions()
VERL_STEPS = {"VERL_USE_EXTERNAL_MODULES", "validate_config", "algorithm", "actor_rollout_ref.rollout",
              "rollout.checkpoint_engine", "reward_manager", "trainer.v1.trainer_mode"}
MOE_ROUTER = {"moe_router_load_balancing_type": "aux_loss", "moe_aux_loss_coeff": 0.001, "moe_router_dtype": "fp32",
              "moe_token_dispatcher_type": "alltoall", "moe_grouped_gemm": True, "moe_permute_fusion": True}
# (nodes, GPUs per node, TP, EP, ETP, rollout TP, rollout EP in bf16 / fp8, vLLM share, GPU GiB) per layout
EXPECTED = {
    "qwen3_30b_a3b_4x8": (4, 8, 4, 8, 1, 4, (1, 4), 0.55, 80),
    "qwen3_30b_a3b_1x8": (1, 8, 4, 8, 1, 4, (1, 4), 0.6, 141),
    "tiny_1gpu": (1, 1, 1, 1, 1, 1, (1, 1), 0.3, 80),
    "qwen3_30b_a3b_2l_1gpu": (1, 1, 1, 1, 1, 1, (1, 1), 0.3, 80),
}


def errors(findings):
    return [str(f) for f in findings if f.level == "error"]


def test_committed_overlays_exist():
    assert set(EXPECTED) == set(LAYOUTS)
    assert {"bf16", "fp8"} == set(PRECISIONS)


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_every_combination_composes_to_the_intended_values(compose_rlec, layout, precision):
    """One value, one place: the MoE router block comes from moe/qwen3_moe.yaml, the 1x8 layout
    inherits the 4x8 one, FP8 sets rollout expert parallel to TP."""
    cfg = compose_rlec(f"layout={layout}", f"precision={precision}")
    nodes, per_node, tp, ep, etp, rollout_tp, rollout_ep, share, gib = EXPECTED[layout]
    meg, rollout = cfg.actor_rollout_ref.actor.megatron, cfg.actor_rollout_ref.rollout
    assert (cfg.trainer.nnodes, cfg.trainer.n_gpus_per_node) == (nodes, per_node)
    assert (meg.tensor_model_parallel_size, meg.expert_model_parallel_size, meg.expert_tensor_parallel_size) == (tp, ep, etp)
    assert rollout.tensor_model_parallel_size == rollout_tp and rollout.data_parallel_size == 1
    assert rollout.expert_parallel_size == rollout_ep[precision == "fp8"]
    assert (rollout.gpu_memory_utilization, cfg.rlec.check.gpu_memory_gib) == (share, gib)
    assert {k: meg.override_transformer_config[k] for k in MOE_ROUTER} == MOE_ROUTER
    assert rollout.quantization == ("fp8" if precision == "fp8" else None)


def test_layouts_do_not_copy_each_other(repo_root):
    """The MoE router keys live in one file; the 1x8 layout lists only what differs from 4x8."""
    texts = {p.stem: p.read_text() for p in (CONFIG_DIR / "layout").glob("*.yaml")}
    assert all("moe_router_load_balancing_type" not in t for t in texts.values())
    assert (CONFIG_DIR / "moe/qwen3_moe.yaml").read_text().count("moe_router_load_balancing_type") == 1
    one_node = [line for line in texts["qwen3_30b_a3b_1x8"].splitlines() if line.strip() and not line.lstrip().startswith("#")]
    assert "  - qwen3_30b_a3b_4x8" in one_node
    assert "tensor_model_parallel_size" not in texts["qwen3_30b_a3b_1x8"]


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_every_combination_passes_verl_and_rlec_checks(compose_rlec, layout, precision):
    cfg = compose_rlec(f"layout={layout}", f"precision={precision}")
    findings, est, context = run_checks(RunConfig(cfg), check_paths=False)
    if (layout, precision) == ("tiny_1gpu", "fp8"):
        # the tiny model's K/V (2 x 32) and experts (64) are not whole 128-blocks: refused, with the sizes
        found = errors(findings)
        assert found and all("FP8 rollout quantizes weights in 128 x 128 blocks" in e for e in found)
        assert any("= 64 with rollout EP 1" in e for e in found)
        return
    assert errors(findings) == []
    assert set(context["verl_passed"]) - {"actor_rollout_ref.model"} == VERL_STEPS  # + the model check where the folder exists
    assert est is not None and est.train_total < context["fraction"] * context["gpu_memory_gib"] * 2**30
    assert cfg.reward.reward_manager.name == "rlec" and cfg.trainer.v1.trainer_mode == "rlec_sync"
    assert cfg.actor_rollout_ref.actor.strategy == "megatron"
    assert cfg.algorithm.adv_estimator == "grpo" and cfg.algorithm.norm_adv_by_std_in_grpo is False


def test_tiny_layout_in_fp8_passes_with_the_fp8_capable_tiny_model(compose_rlec):
    """What tools/gpu_smoke.sh runs for FP8: the same layout, a model whose slices are whole blocks."""
    cfg = compose_rlec("layout=tiny_1gpu", "precision=fp8", "rlec.check.model_shape=tiny_qwen3_moe_fp8")
    findings, _, context = run_checks(RunConfig(cfg), check_paths=False)
    assert errors(findings) == []
    assert context["source"].endswith("tiny_qwen3_moe_fp8.json")


def test_fp8_memory_differs_from_bf16_only_in_vllm_weights(compose_rlec):
    """docs/hyperparameters.md: FP8 leaves the update phase as it is and halves vLLM's linear weights."""
    _, bf16, _ = run_checks(RunConfig(compose_rlec("precision=bf16")), check_paths=False)
    _, fp8, _ = run_checks(RunConfig(compose_rlec("precision=fp8")), check_paths=False)
    assert fp8.train_total == bf16.train_total and fp8.rollout_total == bf16.rollout_total
    assert (bf16.as_gib()["vllm_weights"], fp8.as_gib()["vllm_weights"]) == (14.2, 7.3)
    assert fp8.kv_cache > bf16.kv_cache


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
    findings, est, context = run_checks(RunConfig(cfg), check_paths=False)
    assert errors(findings) == []
    assert "actor_rollout_ref.model" in context["verl_passed"]  # verl's HFModelConfig loaded the folder
    assert context["source"] == str(tiny_moe_dir / "config.json")


INVALID = [
    (("actor_rollout_ref.actor.megatron.tensor_model_parallel_size=8",), "TP 8 must divide the 4 KV heads"),
    (("actor_rollout_ref.actor.megatron.expert_model_parallel_size=3",), "EP 3 must divide the 128 experts"),
    (("trainer.nnodes=1", "trainer.n_gpus_per_node=6"),
     "[trainer.nnodes x trainer.n_gpus_per_node] world size 6 is not a multiple of TP x PP x CP = 4 x 1 x 1 = 4"),
    (("actor_rollout_ref.actor.megatron.pipeline_model_parallel_size=5",), "PP 5 must divide the 48 layers"),
    (("layout=qwen3_30b_a3b_1x8", "actor_rollout_ref.actor.megatron.expert_tensor_parallel_size=2"),
     "EP x ETP = 8 x 2 must divide the 8 GPUs of a pipeline stage"),
    (("actor_rollout_ref.rollout.expert_parallel_size=3",), "rollout EP must be 1 or TP x DP = 4 x 1 = 4"),
    (("precision=fp8", "actor_rollout_ref.rollout.expert_parallel_size=1"),
     "[actor_rollout_ref.rollout.expert_parallel_size] FP8 rollout quantizes weights in 128 x 128 blocks and vLLM needs "
     "each GPU's slice of every quantized weight to be a multiple of 128: expert intermediate size / rollout TP = "
     "768 / 4 = 192 with rollout EP 1"),
    (("precision=fp8", "actor_rollout_ref.rollout.data_parallel_size=2"),  # fp8 sets EP = TP, not TP x DP
     "rollout EP must be 1 or TP x DP = 4 x 2 = 8 (verl's RolloutConfig), got 4"),
    (("actor_rollout_ref.rollout.tensor_model_parallel_size=3",), "rollout TP 3 must divide the 32 attention heads"),
    (("actor_rollout_ref.actor.ppo_mini_batch_size=48",), "256 must be a multiple of actor.ppo_mini_batch_size 48"),
    (("actor_rollout_ref.actor.ppo_mini_batch_size=4", "actor_rollout_ref.rollout.n=3"),
     "must split evenly over the 8"),
    (("actor_rollout_ref.rollout.n=1",), "a group of one has no baseline"),
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
    findings, _, _ = run_checks(RunConfig(compose_rlec(*overrides)), check_paths=False)
    assert any(message in e for e in errors(findings)), errors(findings)


def test_rope_theta_must_match_model(compose_rlec, tiny_moe_dir):
    cfg = compose_rlec("layout=tiny_1gpu", f"actor_rollout_ref.model.path={tiny_moe_dir}",
                       "actor_rollout_ref.model.override_config.rope_theta=10000")
    findings, _, _ = run_checks(RunConfig(cfg), check_paths=False)
    assert any("mbridge 0.15.1 reads hf_config.rope_theta" in e for e in errors(findings))


def test_verl_own_validation_is_reported(compose_rlec):
    # a layout error verl itself catches (RolloutConfig.__post_init__), reported under verl:
    findings, _, _ = run_checks(RunConfig(compose_rlec("actor_rollout_ref.rollout.expert_parallel_size=3")), check_paths=False)
    assert any(e.startswith("ERROR [verl:actor_rollout_ref.rollout]") for e in errors(findings))


def test_changed_algorithm_is_a_warning_not_an_error(compose_rlec):
    findings, _, _ = run_checks(RunConfig(compose_rlec("algorithm.norm_adv_by_std_in_grpo=true")), check_paths=False)
    assert errors(findings) == []
    assert any(f.level == "warning" and f.key == "algorithm.norm_adv_by_std_in_grpo" for f in findings)


@pytest.mark.slow  # each case is `python -m verl.trainer.main_ppo` (~6-10 CPU-s of imports)
@pytest.mark.parametrize("overrides", [["layout=tiny_1gpu", "precision=fp8"], ["layout=tiny_1gpu", "algorithm=[e3,passk]"]])
def test_verl_entry_point_composes_exactly_what_config_check_validates(compose_rlec, repo_root, overrides):
    """The launcher trains with `python -m verl.trainer.main_ppo --config-path megatron_configs
    --config-name rlec ...`; Hydra's `--cfg job` prints that config without starting anything
    (a precision overlay and the algorithm group, whose list value Hydra must compose the same way)."""
    import os
    import subprocess
    import sys

    from omegaconf import OmegaConf

    proc = subprocess.run(
        [sys.executable, "-m", "verl.trainer.main_ppo", "--config-path", str(CONFIG_DIR), "--config-name", "rlec",
         *overrides, "--cfg", "job", "--resolve"],
        env=os.environ | {"PYTHONPATH": str(repo_root)}, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout == OmegaConf.to_yaml(compose_rlec(*overrides), resolve=True)


# --- paths (DRY_RUN checks what it can see) ---------------------------------------------------

_ROWS = [
    {"data_source": "math_dapo", "prompt": [{"role": "user", "content": "What is 1 + 1?"}],
     "reward_model": {"ground_truth": "2", "style": "rule"},
     "extra_info": {"question_id": "q1", "target_p": 0.3, "objective": "rlec"}},
    {"data_source": "hotpotqa", "prompt": [{"role": "user", "content": "Who wrote Emma?"}],
     "reward_model": {"ground_truth": "Jane Austen", "style": "rule"},
     "extra_info": {"question_id": "q2", "target_p": 0.0, "objective": "binary"}},
]


def write_prepared(path, rows=None):
    """A parquet file in rlec's data contract (verl's schema), written by hand."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = rows if rows is not None else _ROWS
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


@pytest.fixture()
def run_paths(tmp_path, tiny_moe_dir):
    # 32 rows: layout tiny_1gpu's 4 steps of 8 prompts (rlec.cluster.paths.steps_findings)
    rows = [{**row, "extra_info": {**row["extra_info"], "question_id": f"q{i}"}} for i, row in enumerate(_ROWS * 16)]
    train, val = write_prepared(tmp_path / "train.parquet", rows), write_prepared(tmp_path / "test.parquet")
    return [f"actor_rollout_ref.model.path={tiny_moe_dir}", f"data.train_files={train}", f"data.val_files={val}",
            f"trainer.default_local_dir={tmp_path / 'ckpt' / 'run1'}"]


def test_paths_that_exist_pass_and_are_summarised(compose_rlec, run_paths, tiny_moe_dir):
    cfg = compose_rlec("layout=tiny_1gpu", *run_paths)
    findings, est, context = run_checks(RunConfig(cfg))
    assert errors(findings) == []
    assert context["paths"] == [f"model {tiny_moe_dir} (1 safetensors)", "train.parquet 32 rows", "test.parquet 2 rows",
                                f"checkpoints {run_paths[3].split('=', 1)[1]} (will be created)"]
    assert "paths   model " in report(findings, est, context, cfg)


def test_missing_paths_are_refused_one_line_each(compose_rlec, tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    cfg = compose_rlec("layout=tiny_1gpu", f"actor_rollout_ref.model.path={tmp_path / 'no_model'}",
                       f"data.train_files={tmp_path / 'no_train.parquet'}", f"data.val_files={tmp_path}",
                       f"trainer.default_local_dir={blocker / 'ckpt'}")
    found = errors(run_checks(RunConfig(cfg))[0])
    assert f"ERROR [actor_rollout_ref.model.path] model folder {tmp_path / 'no_model'}: does not exist" in found[0]
    assert f"ERROR [data.train_files] {tmp_path / 'no_train.parquet'}: does not exist" in found[1]
    assert f"ERROR [data.val_files] {tmp_path}: is a folder, expected a parquet file" in found[2]
    assert f"ERROR [trainer.default_local_dir] {blocker / 'ckpt'}: {blocker} is not a folder" in found[3]
    assert all("\n" not in line for line in found)


def test_data_breaking_the_contract_names_file_row_and_key(compose_rlec, run_paths, tmp_path):
    bad = write_prepared(tmp_path / "bad.parquet", [
        {"data_source": "math_dapo", "prompt": [{"role": "user", "content": "q"}],
         "reward_model": {"ground_truth": "1"}, "extra_info": {"question_id": "a"}},
        {"data_source": "math_dapo", "prompt": [{"role": "user", "content": "q"}],
         "reward_model": {"ground_truth": " "}, "extra_info": {"question_id": "b"}},
    ])
    cfg = compose_rlec("layout=tiny_1gpu", *run_paths[:1], f"data.train_files={bad}", *run_paths[2:])
    found = errors(run_checks(RunConfig(cfg))[0])
    assert found == [f"ERROR [data.train_files] {bad}: row 1: key 'reward_model.ground_truth' must be a non-empty "
                     "string, got ' ' (the data contract: docs/data.md)"]


def test_model_folder_without_tokenizer_or_weights_is_refused(compose_rlec, run_paths, tmp_path, tiny_moe_dir):
    import shutil

    model = tmp_path / "model"
    model.mkdir()
    shutil.copy(tiny_moe_dir / "config.json", model / "config.json")
    cfg = compose_rlec("layout=tiny_1gpu", f"actor_rollout_ref.model.path={model}", *run_paths[1:])
    found = errors(run_checks(RunConfig(cfg))[0])
    assert any("no tokenizer file (tokenizer.json or tokenizer.model or vocab.json)" in e for e in found)
    assert any("no *.safetensors weights" in e for e in found)
    # a dist checkpoint replaces the weights, and must be one
    cfg = compose_rlec("layout=tiny_1gpu", f"actor_rollout_ref.model.path={model}", *run_paths[1:],
                       "actor_rollout_ref.actor.megatron.use_dist_checkpointing=true",
                       f"actor_rollout_ref.actor.megatron.dist_checkpointing_path={tmp_path}")
    found = errors(run_checks(RunConfig(cfg))[0])
    assert not any("safetensors" in e for e in found)
    assert any(f"[actor_rollout_ref.actor.megatron.dist_checkpointing_path] {tmp_path}: not a Megatron dist "
               "checkpoint (no metadata.json" in e for e in found)


def test_cli_is_quiet_writes_config_only_when_ok_and_says_when_paths_are_skipped(tmp_path, capsys, run_paths):
    out = tmp_path / "resolved.yaml"
    assert main(["layout=tiny_1gpu", "--skip-path-checks", "--output", str(out)]) == 0
    captured = capsys.readouterr()
    assert captured.out == ""  # no config dump, no verl progress lines
    lines = captured.err.strip().splitlines()
    assert lines[0].startswith("model   qwen3_moe") and lines[-1] == "result  OK"
    assert len(lines) <= 9, lines
    assert any(line.startswith("paths   SKIPPED") for line in lines)
    assert f"config  resolved config ({out.read_text().count(chr(10))} lines) written to {out}" in captured.err
    assert "trainer_mode: rlec_sync" in out.read_text()
    # refused: nothing written
    out2 = tmp_path / "refused.yaml"
    assert main(["layout=tiny_1gpu", "--output", str(out2), "actor_rollout_ref.model.path=/nonexistent"]) == 1
    assert not out2.exists()
    assert "ERROR [actor_rollout_ref.model.path] model folder /nonexistent: does not exist" in capsys.readouterr().err
    # --print shows the config on stdout
    assert main(["layout=tiny_1gpu", "--print", "--skip-path-checks"]) == 0
    assert "trainer_mode: rlec_sync" in capsys.readouterr().out


def test_hyperparameters_doc_states_the_figures_dry_run_prints(compose_rlec, repo_root):
    """docs/hyperparameters.md once said tiny_1gpu needs "< 1 GiB" while DRY_RUN printed 5.3."""
    from rlec.cluster.config_check import load_model_config
    from rlec.rules.checks import check_layout
    from rlec.model_shape import ModelShape

    doc = (repo_root / "docs/hyperparameters.md").read_text()
    update = next(line for line in doc.splitlines() if line.startswith("| update phase per GPU (estimate)")).split("|")[2:5]
    rollout = next(line for line in doc.splitlines() if line.startswith("| rollout phase per GPU (estimate)")).split("|")[2:5]
    weights = next(line for line in doc.splitlines() if line.startswith("| vLLM weights / KV cache per GPU")).split("|")[2:5]
    for column, layout in enumerate(["qwen3_30b_a3b_4x8", "qwen3_30b_a3b_1x8", "tiny_1gpu"]):
        for precision in ("bf16", "fp8"):
            cfg = compose_rlec(f"layout={layout}", f"precision={precision}")
            hf, source, _ = load_model_config(RunConfig(cfg))
            _, est = check_layout(RunConfig(cfg), ModelShape.from_hf_config(hf, source), cfg.rlec.check.gpu_memory_gib,
                                  megatron_fields=None)
            g = est.as_gib()
            assert f"{g['train_total']} of " in update[column], (layout, g["train_total"], update[column])
            assert f"= {g['rollout_total']} of " in rollout[column], (layout, g["rollout_total"], rollout[column])
            pair = f"{g['vllm_weights']} / {g['kv_cache']}"
            assert pair in weights[column] or layout == "tiny_1gpu" and precision == "fp8", (layout, precision, pair)


def test_verl_on_cpu_layout_passes_verl_and_rlec_checks(compose_rlec, monkeypatch):
    """layout=cpu precision=fp32 (TRAINER=verl without a GPU) passes the same checks as the cluster layouts."""
    monkeypatch.setenv("VERL_PLATFORM", "cpu")
    from rlec.cpu import enable_cpu

    enable_cpu(force=True)  # what the plugin does in every process of that run (fp32 Megatron parameters)
    cfg = compose_rlec("layout=cpu", "precision=fp32")
    findings, _, context = run_checks(RunConfig(cfg), check_paths=False)
    assert errors(findings) == []
    assert set(context["verl_passed"]) >= VERL_STEPS
    assert cfg.actor_rollout_ref.rollout.name == "rlec_hf" and cfg.trainer.device == "cpu"


def test_fixed_warmup_as_long_as_the_run_is_refused_naming_both_keys(compose_rlec):
    cfg = compose_rlec("layout=tiny_1gpu", "precision=bf16", "actor_rollout_ref.actor.optim.lr_warmup_steps=10",
                       "trainer.total_training_steps=2")
    found = errors(run_checks(RunConfig(cfg), check_paths=False)[0])
    assert any("lr_warmup_steps" in e and "trainer.total_training_steps = 2" in e for e in found), found
    # the recipe's default (a ratio of the run) passes at 2 steps, as the GPU smoke test runs
    ok = compose_rlec("layout=tiny_1gpu", "precision=bf16", "trainer.total_training_steps=2")
    assert not [e for e in errors(run_checks(RunConfig(ok), check_paths=False)[0]) if "warm" in e]


def test_ray_cpu_demand_beyond_the_declared_cpus_is_refused_with_the_numbers(compose_rlec):
    cfg = compose_rlec("layout=tiny_1gpu", "precision=bf16", "+ray_kwargs.ray_init.num_cpus=4")
    found = errors(run_checks(RunConfig(cfg), check_paths=False)[0])
    # TransferQueue 1 + 8 storage units, 3 for the one worker, 1 to create actors: 13 > 4
    assert any("Ray needs 13 logical CPUs" in e and "4 are declared" in e for e in found), found


def test_verdict_names_the_enabled_algorithms_with_their_figures(compose_rlec):
    from rlec.cluster.config_check import algorithms_line

    plain = algorithms_line(RunConfig(compose_rlec("layout=tiny_1gpu", "precision=bf16")))
    assert plain.startswith("algo    RLEC (") and "mean-only" in plain and "E3" not in plain and "Pass@k" not in plain
    line = algorithms_line(RunConfig(compose_rlec("layout=tiny_1gpu", "precision=bf16", "algorithm=[rlve,e3,passk]")))
    assert "E3 (temperature" in line and "Pass@k (k 2" in line and "RLVE (" in line


def test_dry_run_with_overlays_keeps_the_plain_runs_resolved_config(tmp_path):
    import subprocess

    script = (CONFIG_DIR.parent / "tools" / "run_megatron_rlec.sh").read_text()
    assert 'ALGO_TAG=$(printf' in script and "${ALGO_TAG:+_$ALGO_TAG}" in script
    tag = subprocess.run(["bash", "-c", "printf '%s\\n' \"$@\" | sed -n 's/^algorithm=//p' | tr -d '[] ' | tr ',' '_' | tail -n 1",
                          "_", "layout=cpu", "algorithm=[rlve,e3,passk]"], capture_output=True, text=True).stdout.strip()
    assert tag == "rlve_e3_passk"


def test_a_checkpoint_folder_that_cannot_be_written_is_one_error_line_even_with_path_checks_skipped(tmp_path, capsys,
                                                                                                     monkeypatch):
    """Issue 55 item 4: the launcher's check before it builds the tiny model in OUTPUT_DIR (``--skip-path-checks
    --check-checkpoint-folder``) refuses a folder it cannot write in one ``error:`` line, exit 2: a file, a folder
    under a file, and a read-only folder (probed by writing, so root, whom permission bits do not stop, is refused on
    a read-only mount too: the mount is simulated here, EROFS from the probe)."""
    import errno
    import tempfile

    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    for folder, why in ((blocker, f"{blocker}: {blocker} is not a folder"),
                        (blocker / "run", f"{blocker / 'run'}: {blocker} is not a folder")):
        assert main(["layout=tiny_1gpu", "--skip-path-checks", "--check-checkpoint-folder",
                     f"trainer.default_local_dir={folder}"]) == 2
        err = capsys.readouterr().err
        assert err == f"rlec.cluster.config_check: error: trainer.default_local_dir: {why}\n"
    read_only = tmp_path / "read_only"
    read_only.mkdir()

    def erofs(*args, **kwargs):
        if kwargs.get("dir") == read_only:
            raise OSError(errno.EROFS, "Read-only file system")
        return temporary_file(*args, **kwargs)

    temporary_file = tempfile.TemporaryFile
    monkeypatch.setattr(tempfile, "TemporaryFile", erofs)
    for folder, why in ((read_only, "is not writable"), (read_only / "run", f"cannot be created: {read_only} is not writable")):
        assert main(["layout=tiny_1gpu", "--skip-path-checks", "--check-checkpoint-folder",
                     f"trainer.default_local_dir={folder}"]) == 2
        err = capsys.readouterr().err
        assert err == f"rlec.cluster.config_check: error: trainer.default_local_dir: {folder}: {why} (Read-only file system)\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a_file", "read_only"] and not any(read_only.iterdir())
