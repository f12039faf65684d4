"""tools/run_megatron_rlec.sh: DRY_RUN from a clean environment, refusals, the no-GPU path, and
the launcher rules (set -euo pipefail, no pkill, no machine paths, each variable set once)."""

from __future__ import annotations

import glob
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.minutes(2)  # tests/conftest.py: the longest modules start first

SCRIPT = Path(__file__).resolve().parents[2] / "tools" / "run_megatron_rlec.sh"


def launch(*args: str, timeout: int = 600, **env: str) -> subprocess.CompletedProcess:
    """Run the launcher with only PATH (this interpreter first), HOME and ``env`` set."""
    clean = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "HOME": os.environ.get("HOME", "/tmp"),
             "HF_HUB_OFFLINE": "1", **env}
    return subprocess.run(["bash", str(SCRIPT), *args], env=clean, capture_output=True, text=True, timeout=timeout)


@pytest.mark.slow  # the launcher's Python imports verl (~8 CPU-s)
def test_dry_run_from_clean_env_is_quiet_and_writes_the_config(tmp_path):
    out_file = tmp_path / "dry.yaml"
    proc = launch(DRY_RUN="1", SKIP_PATH_CHECKS="1", DRY_RUN_CONFIG=str(out_file))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout == ""  # no 1,170-line config dump
    verdict = proc.stderr.strip().splitlines()
    assert len(verdict) <= 9, verdict  # model, layout, memory x2, paths, verl, config, result
    assert verdict[-1] == "result  OK" and any(line.startswith("memory  update:") for line in verdict)
    assert any(line.startswith("paths   SKIPPED") for line in verdict)
    text = out_file.read_text()
    for expected in ("name: rlec", "trainer_mode: rlec_sync", "VERL_USE_EXTERNAL_MODULES: rlec.verl_plugin",
                     "adv_estimator: grpo", "norm_adv_by_std_in_grpo: false", "clip_ratio_high: 0.28",
                     "tensor_model_parallel_size: 4", "expert_model_parallel_size: 8", "end_step: null"):
        assert expected in text, expected
    assert re.search(r"^rlec:\n  schedule:", text, re.M)


@pytest.mark.slow  # the launcher's Python imports verl (~8 CPU-s)
def test_dry_run_env_vars_and_overrides_reach_the_config(tmp_path):
    proc = launch("data.train_batch_size=64", DRY_RUN="1", SKIP_PATH_CHECKS="1", PRINT_CONFIG="1",
                  LAYOUT="qwen3_30b_a3b_1x8", PRECISION="fp8", GPU_MEMORY_GIB="141", TRAIN_BATCH_SIZE="128",
                  EXPERIMENT_NAME="exp1", CHECKPOINT_DIR="/tmp/ckpt", DRY_RUN_CONFIG=str(tmp_path / "c.yaml"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    assert "train_batch_size: 64" in out  # the command line wins over TRAIN_BATCH_SIZE
    assert "quantization: fp8" in out and "fp8_recipe: blockwise" in out
    assert "nnodes: 1" in out and "experiment_name: exp1" in out and "default_local_dir: /tmp/ckpt" in out
    assert "TENSORBOARD_DIR: /tmp/ckpt/tensorboard" in out


@pytest.mark.slow  # the launcher's Python imports verl (~8 CPU-s)
def test_dry_run_checks_the_paths_it_can_see(tmp_path):
    """Issue 11: DRY_RUN with a missing model and data said `result OK`; now each is named, exit 1,
    nothing written."""
    out_file = tmp_path / "dry.yaml"
    proc = launch(DRY_RUN="1", TRAIN_FILES="/nonexistent.parquet", MODEL_PATH="/nonexistent",
                  DRY_RUN_CONFIG=str(out_file))
    assert proc.returncode == 1
    assert "ERROR [actor_rollout_ref.model.path] model folder /nonexistent: does not exist" in proc.stderr
    assert "ERROR [data.train_files] /nonexistent.parquet: does not exist" in proc.stderr
    assert "result  OK" not in proc.stderr and not out_file.exists()


@pytest.mark.slow  # the launcher's Python imports verl (~8 CPU-s)
def test_dry_run_refuses_impossible_layout_with_message(tmp_path):
    proc = launch("actor_rollout_ref.actor.megatron.tensor_model_parallel_size=8", DRY_RUN="1", SKIP_PATH_CHECKS="1",
                  DRY_RUN_CONFIG=str(tmp_path / "c.yaml"))
    assert proc.returncode == 1
    assert "TP 8 must divide the 4 KV heads" in proc.stderr


def test_config_check_reports_bad_override_as_usage_error(capsys):
    from rlec.cluster.config_check import main

    assert main(["layout=no_such_layout"]) == 2
    assert "cannot compose" in capsys.readouterr().err


def test_help_prints_the_launchers_settings_and_builds_nothing(tmp_path):
    """``--help`` used to build the tiny model and the sample data, then print config_check's usage."""
    proc = launch("layout=cpu", "--help", OUTPUT_DIR=str(tmp_path / "out"), timeout=60)
    assert proc.returncode == 0 and proc.stderr == ""
    text = proc.stdout
    assert text.startswith("Train RLEC with verl 0.9.1's Megatron backend")
    for var in ("DRY_RUN=1", "MODEL_PATH", "OUTPUT_DIR", "STEPS", "ENVIRONMENTS", "RESUME", "EVAL_AT_END", "PRINT_CONFIG=1"):
        assert var in text, var
    assert "set -euo" not in text and not (tmp_path / "out").exists()


@pytest.mark.parametrize(("env", "message"), [
    ({"TRAINER": "local"}, "TRAINER=local: the local loop is retired"),
    ({"TRAINER": "fsdp"}, "TRAINER=fsdp: expected verl"),
    # the retired local loop's own variables: named with what does it now, never silently ignored
    ({"SEED": "3"}, "SEED is not read (a name of the retired local loop): use data.seed=N"),
    ({"SAVE_EVERY": "2"}, "use SAVE_FREQ"), ({"PROMPTS_PER_STEP": "4"}, "use TRAIN_BATCH_SIZE"),
    ({"MAX_NEW_TOKENS": "8"}, "use MAX_RESPONSE_LENGTH"),
    # the local loop refused an empty list; verl's path passed rlec.rlve.environments=[,] on to Hydra's parser
    ({"ENVIRONMENTS": " , "}, "ENVIRONMENTS=' , ' names no environment: list them (maze,sorting) or all"),
])
def test_the_retired_local_loop_and_its_variables_are_refused_before_anything_starts(tmp_path, env, message):
    proc = launch(OUTPUT_DIR=str(tmp_path / "out"), timeout=120, **env)
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr[-2000:]
    assert not (tmp_path / "out").exists()


@pytest.mark.slow  # the launcher's Python imports torch and verl (~12 CPU-s per case)
@pytest.mark.parametrize(("overrides", "status", "message"), [
    (["rlec.grading.timeout_s=0"], 2, "refused: ERROR [rlec.grading.timeout_s] 0.0 must be a finite number"),
    # issue 24: refused only after 44 s, with the 166 MB tiny model already in OUTPUT_DIR
    (["algorithm=e3", "rlec.e3.budget.n_min=20", "rlec.e3.budget.n_max=4"], 1, "ERROR [rlec.e3]"),
])
def test_verl_on_cpu_checks_the_config_before_building_the_model_and_data(tmp_path, overrides, status, message):
    out, data = tmp_path / "run", tmp_path / "data"
    # no TRAINER: verl's trainer is the default without CUDA (make run, issue 31 item 2)
    proc = launch(*overrides, OUTPUT_DIR=str(out), DATA_DIR=str(data), PYTHON=sys.executable)
    assert proc.returncode == status, proc.stderr[-3000:]
    assert message in proc.stderr and "nothing written" in proc.stderr
    assert "building the tiny Qwen3-MoE" not in proc.stderr and "preparing the sample data" not in proc.stderr
    assert not out.exists() and not data.exists()


@pytest.mark.slow  # the warm start's build (torch, the compact tokenizer) and the launcher's Python importing verl
def test_make_runs_default_task_builds_the_upcycled_warm_start_and_its_addition_data(tmp_path):
    """Issue 54 item 5: without TASK and MODEL_PATH, make run's launcher builds the demo's warm start upcycled to
    Qwen3-MoE with the compact tokenizer and the addition data, and trains with the addition task's settings (the
    command line still wins); TASK=sample keeps the tiny random model's path; another TASK is refused."""
    import json

    out, data = tmp_path / "run", tmp_path / "data"
    proc = launch("actor_rollout_ref.actor.optim.lr=2e-4", DRY_RUN="1", TRAINER="verl", PRINT_CONFIG="1",
                  OUTPUT_DIR=str(out), DATA_DIR=str(data), PYTHON=sys.executable, DRY_RUN_CONFIG=str(tmp_path / "c.yaml"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "building the warm start (shipped weights, upcycled to Qwen3-MoE)" in proc.stderr
    config = json.loads((out / "warm_start" / "config.json").read_text())
    tokenizer = json.loads((out / "warm_start" / "tokenizer.json").read_text())
    # transformers 5 saves Qwen3-MoE's expert count as num_local_experts (hub files: num_experts)
    assert config["model_type"] == "qwen3_moe" and config.get("num_experts", config.get("num_local_experts")) == 4
    assert config["vocab_size"] == len(tokenizer["model"]["vocab"]) + len(tokenizer["added_tokens"]) < 300
    assert (data / "train.parquet").is_file() and (data / "test.parquet").is_file()
    text = proc.stdout
    from rlec.demo import quick

    for expected in (f"total_training_steps: {quick.STEPS}", "train_batch_size: 16", "top_k: -1", "goal_check: true",
                     "max_questions: 60", "lr: 0.0002", "scripted_fraction: 0.0", "bypass_mode: true"):
        assert expected in text, expected
    proc = launch(DRY_RUN="1", TRAINER="verl", TASK="nonsense", OUTPUT_DIR=str(out), PYTHON=sys.executable)
    assert proc.returncode == 2 and "TASK=nonsense: expected addition (the default) or sample" in proc.stderr


@pytest.mark.slow  # the launcher's Python imports torch and verl (~12 CPU-s)
def test_an_output_dir_that_is_a_file_is_one_error_line_before_the_tiny_model_is_built(tmp_path):
    """Issue 55 item 4: with MODEL_PATH unset (make run), OUTPUT_DIR a file gave a FileExistsError traceback from
    rlec.models while building the tiny model in it (the check before the build skipped every path)."""
    out, data = tmp_path / "run", tmp_path / "data"
    out.write_text("a user's file")
    proc = launch(OUTPUT_DIR=str(out), DATA_DIR=str(data), PYTHON=sys.executable)
    assert proc.returncode == 2, proc.stderr[-3000:]
    errors = [line for line in proc.stderr.splitlines() if "error:" in line]
    assert errors == [f"rlec.cluster.config_check: error: trainer.default_local_dir: {out}: {out} is not a folder"], proc.stderr
    assert "Traceback" not in proc.stderr and "building the tiny Qwen3-MoE" not in proc.stderr
    assert "building the warm start" not in proc.stderr  # make run's default task builds no model there either
    assert out.read_text() == "a user's file" and not data.exists()


def test_launcher_rules():
    text = SCRIPT.read_text()
    assert text.startswith("#!/usr/bin/env bash\n")
    assert "set -euo pipefail" in text
    assert "pkill" not in text and "killall" not in text
    assert not re.search(r"(?<![\w$])/(work|root|home)/", text)
    names = re.findall(r"^([A-Z_]+)=", text, re.M)
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)
    user_vars = [n for n in names if re.search(rf"^{n}=\$\{{{n}:-", text, re.M)]
    assert {"MODEL_PATH", "NNODES", "NGPUS_PER_NODE", "CHECKPOINT_DIR", "DRY_RUN", "TRAIN_FILES"} <= set(user_vars)
    for line in text.splitlines():
        if re.search(r"-m (\S*main_ppo|\S*ENTRY|rlec\.cluster\.config_check)", line):
            assert '"$@"' in line or line.rstrip().endswith("\\"), line
    assert text.count('"${OVERRIDES[@]}" "$@"') == 2  # command line last in every invocation (DRY_RUN's, the launch's)


STAND_IN_PYTHON = """#!/usr/bin/env bash
# a stand-in interpreter for the launcher: real Python for rlec.flags, a CUDA machine, and a trainer
# (its checks included: one process, --launch-check) that records its command line and stops on a full disk
case "$1 $2" in
  "-m rlec.flags") exec "$REAL_PYTHON" "$@" ;;
  "-c "*) exit 0 ;;
  *) printf '%s\\n' "$@" > "$ARGS_FILE"
     echo "rlec.cluster.main_ppo: error: ... [Errno 28] No space left on device: '/ckpt/global_step_3' ..." >&2
     exit 2 ;;
esac
"""


def test_the_launcher_trains_through_rlec_entry_and_keeps_its_exit_code_2(tmp_path):
    """Issue 34 item 2 (verl's path): the launcher ran ``python -m verl.trainer.main_ppo``, whose full
    disk ended in Ray's traceback and exit 1; it now runs ``rlec.cluster.main_ppo`` with the same Hydra
    arguments (after its checks, ``--launch-check``, in the same process), and its exit 2 (one line naming ENOSPC)
    is the launcher's: no pipe stands between them (the console is copied to train.log inside the process)."""
    stand_in = tmp_path / "python"
    stand_in.write_text(STAND_IN_PYTHON)
    stand_in.chmod(0o755)
    args_file, ckpt = tmp_path / "args.txt", tmp_path / "ckpt"
    proc = launch("trainer.total_training_steps=3", TRAINER="verl", PYTHON=str(stand_in), REAL_PYTHON=sys.executable,
                  ARGS_FILE=str(args_file), CHECKPOINT_DIR=str(ckpt), GPU_ARCH="90", MODEL_PATH=str(tmp_path),
                  RLEC_PROBE_CUDA="1", timeout=120)
    assert proc.returncode == 2, proc.stderr[-3000:]
    args = args_file.read_text().splitlines()
    assert args[:3] == ["-m", "rlec.cluster.main_ppo", "--launch-check"], args[:3]  # the checks, then verl, one process
    hydra = args[args.index("--") + 1:]
    assert hydra[:4] == ["--config-path", str(SCRIPT.parents[1] / "megatron_configs"), "--config-name", "rlec"]
    assert hydra[-1] == "trainer.total_training_steps=3"  # the command line last, as before
    assert "No space left on device" in proc.stderr  # the trainer's one line, its exit status the launcher's
    assert "verl.trainer.main_ppo" not in SCRIPT.read_text()


NO_CUDA_PYTHON = STAND_IN_PYTHON.replace('"-c "*) exit 0 ;;', '"-c "*) exit 1 ;;').replace(
    "printf '%s\\n' \"$@\" > \"$ARGS_FILE\"", "{ printf '%s\\n' \"$@\"; echo \"RLEC_VERL_LOG=$RLEC_VERL_LOG\"; } > \"$ARGS_FILE\"")
assert "RLEC_VERL_LOG" in NO_CUDA_PYTHON and '"-c "*) exit 1' in NO_CUDA_PYTHON


def _empty_model_and_data(tmp_path: Path) -> tuple[Path, Path]:
    """A model folder (an empty config) and a data folder (empty parquet files): what the launcher's path checks see."""
    model, data = tmp_path / "model", tmp_path / "data"
    model.mkdir()
    (model / "config.json").write_text("{}")
    data.mkdir()
    for name in ("train.parquet", "test.parquet"):
        (data / name).write_text("")
    return model, data


def _launch_with_stand_in_trainer(tmp_path, **env: str):
    """The launcher without CUDA, its Python replaced by a stand-in that records the trainer's arguments and exits 2.
    Returns (the process, the arguments file, the output folder)."""
    stand_in = tmp_path / "python"
    stand_in.write_text(NO_CUDA_PYTHON)
    stand_in.chmod(0o755)
    (model, data), out = _empty_model_and_data(tmp_path), tmp_path / "run"
    args_file = tmp_path / "args.txt"
    proc = launch(PYTHON=str(stand_in), REAL_PYTHON=sys.executable, ARGS_FILE=str(args_file), OUTPUT_DIR=str(out),
                  MODEL_PATH=str(model), DATA_DIR=str(data), timeout=120, **env)
    return proc, args_file, out


def test_without_cuda_the_default_is_verls_trainer_inside_make_runs_report(tmp_path):
    """Issue 31 item 2: no TRAINER and no CUDA = verl's main_ppo through rlec.verl_report (the quiet console,
    summary, hf_final and evaluation), the CPU layout, the full log beside the launch's config."""
    proc, args_file, out = _launch_with_stand_in_trainer(tmp_path)
    assert proc.returncode == 2, proc.stderr[-3000:]  # the stand-in trainer's exit
    args = args_file.read_text().splitlines()
    assert args[:2] == ["-m", "rlec.verl_report"], args[:2]
    assert "layout=cpu" in args and "precision=fp32" in args
    assert args[-1].startswith("RLEC_VERL_LOG=") and args[-1].endswith("/verl.log") and str(out / "launches") in args[-1]


@pytest.mark.parametrize("address, nproc", [(None, "1"), (None, "2"), ("192.0.2.2:6379", "1")])
def test_with_ray_address_the_cpu_launch_connects_and_declares_no_resources(tmp_path, address, nproc):
    """Issue 54 item 2: an experiment's launches connect to its one Ray cluster (``RAY_ADDRESS``, rlec.cluster.ray_cluster)
    instead of starting their own; Ray refuses ``num_cpus`` / ``num_gpus`` when connecting, so the launch passes null
    (the cluster declared them: ``cpu_launch_resources``), and without the variable it declares its own 8 CPUs and 1 GPU."""
    from rlec.cluster.ray_cluster import cpu_launch_resources

    proc, args_file, _ = _launch_with_stand_in_trainer(tmp_path, NPROC=nproc, **({"RAY_ADDRESS": address} if address else {}))
    assert proc.returncode == 2, proc.stderr[-3000:]  # the stand-in trainer's exit
    ray_args = [a for a in args_file.read_text().splitlines() if a.startswith("ray_kwargs.ray_init.num_")]
    cpus, gpus = cpu_launch_resources(int(nproc))  # the shared cluster's rule is the launcher's
    want = ["ray_kwargs.ray_init.num_cpus=null", "ray_kwargs.ray_init.num_gpus=null"] if address else \
        [f"ray_kwargs.ray_init.num_gpus={gpus}", f"ray_kwargs.ray_init.num_cpus={cpus}"]
    assert ray_args == want, ray_args


@pytest.mark.skipif(bool(glob.glob("/dev/nvidia[0-9]*")) or os.path.exists("/dev/kfd") or os.path.exists("/dev/dxg"),
                    reason="this machine has a GPU device node: the launcher asks torch, as it should")
def test_without_a_gpu_device_node_the_launcher_skips_torchs_cuda_probe(tmp_path):
    """The CUDA probe imported torch (4 s of every launch) on machines with no GPU at all: without an NVIDIA, ROCm or
    WSL device node the launcher now knows there is no CUDA and never runs ``python -c`` (a stand-in records it)."""
    stand_in = tmp_path / "python"
    stand_in.write_text(NO_CUDA_PYTHON.replace('"-c "*) exit 1 ;;', '"-c "*) touch "$ARGS_FILE.probed"; exit 1 ;;'))
    stand_in.chmod(0o755)
    model, data = _empty_model_and_data(tmp_path)
    args_file = tmp_path / "args.txt"
    proc = launch(PYTHON=str(stand_in), REAL_PYTHON=sys.executable, ARGS_FILE=str(args_file), OUTPUT_DIR=str(tmp_path / "run"),
                  MODEL_PATH=str(model), DATA_DIR=str(data), timeout=120)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert args_file.read_text().splitlines()[:2] == ["-m", "rlec.verl_report"]  # the CPU path, as with torch's answer
    assert not (tmp_path / "args.txt.probed").exists()
    # asked to probe regardless, the launcher runs torch's check (the stand-in's answer: no CUDA)
    launch(PYTHON=str(stand_in), REAL_PYTHON=sys.executable, ARGS_FILE=str(args_file), OUTPUT_DIR=str(tmp_path / "run2"),
           MODEL_PATH=str(model), DATA_DIR=str(data), RLEC_PROBE_CUDA="1", timeout=120)
    assert (tmp_path / "args.txt.probed").exists()
