"""Expert and tensor parallel through verl's own worker on CPU (issue 31 item 5): ``NPROC``, ``TP``, ``EP``, ``ETP``,
``PP`` of ``TRAINER=verl bash tools/run_megatron_rlec.sh`` without CUDA.

The fast tests run the launcher with a stand-in interpreter that records the arguments it hands the config check, then
run rlec's real config check (``rlec.cluster.config_check.main``, what DRY_RUN and every launch run before Ray
starts) on them in this process: the variables reach verl's keys, and bad values are refused naming the key, the
value and the rule (the early rule set's integer rules, the layout rules' world-size and model divisibility).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.minutes(6.5)  # tests/conftest.py: the longest modules start first

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "tools" / "run_megatron_rlec.sh"
MEGATRON = "actor_rollout_ref.actor.megatron"

# a stand-in interpreter: real Python for rlec.flags, no CUDA, and a config check that records its arguments
RECORDING_PYTHON = """#!/usr/bin/env bash
case "$1 $2" in
  "-m rlec.flags") exec "$REAL_PYTHON" "$@" ;;
  "-c "*) exit 1 ;;
  "-m rlec.cluster.config_check") shift 2; printf '%s\\n' "$@" > "$ARGS_FILE"; exit 0 ;;
  *) echo "unexpected: $*" >&2; exit 3 ;;
esac
"""


def check_args(tmp_path: Path, **env_vars: str) -> list[str]:
    """The arguments ``TRAINER=verl DRY_RUN=1`` (no CUDA) hands ``rlec.cluster.config_check`` under ``env_vars``."""
    stand_in = tmp_path / "python"
    stand_in.write_text(RECORDING_PYTHON)
    stand_in.chmod(0o755)
    data = tmp_path / "data"
    data.mkdir(exist_ok=True)
    for name in ("train.parquet", "test.parquet"):
        (data / name).touch()
    args_file = tmp_path / "args.txt"
    env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "HOME": os.environ.get("HOME", "/tmp"),
           "PYTHON": str(stand_in), "REAL_PYTHON": sys.executable, "ARGS_FILE": str(args_file),
           "TRAINER": "verl", "DRY_RUN": "1", "SKIP_PATH_CHECKS": "1", "OUTPUT_DIR": str(tmp_path / "run"),
           "MODEL_PATH": str(tmp_path / "no_model"), "DATA_DIR": str(data), "DRY_RUN_CONFIG": str(tmp_path / "dry.yaml"),
           **env_vars}
    proc = subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return args_file.read_text().splitlines()


@pytest.fixture
def cpu_plugin(monkeypatch):
    """What rlec's plugin does in every process of a CPU run (verl's fp32 check passed): the config check's own
    import of ``VERL_USE_EXTERNAL_MODULES`` does it when the launcher has set ``VERL_PLATFORM=cpu``."""
    monkeypatch.setenv("VERL_PLATFORM", "cpu")
    from rlec.cpu import enable_cpu

    enable_cpu(force=True)


def test_nproc_tp_ep_etp_pp_reach_verls_keys_and_tp2_ep2_passes_every_check(tmp_path, capsys, cpu_plugin):
    from omegaconf import OmegaConf

    from rlec.cluster.config_check import main

    args = check_args(tmp_path, NPROC="4", TP="2", EP="2")
    for expected in ("layout=cpu", "trainer.n_gpus_per_node=4", "ray_kwargs.ray_init.num_gpus=4",
                     "actor_rollout_ref.rollout.data_parallel_size=4", "ray_kwargs.ray_init.num_cpus=17",
                     f"{MEGATRON}.tensor_model_parallel_size=2", f"{MEGATRON}.expert_model_parallel_size=2",
                     f"{MEGATRON}.sequence_parallel=true", "actor_rollout_ref.ref.megatron.expert_model_parallel_size=2"):
        assert expected in args, (expected, args)
    assert not any("pipeline_model_parallel_size" in a or "expert_tensor_parallel_size" in a for a in args)  # unset: the layout's
    assert main(args) == 0, capsys.readouterr().err[-3000:]
    verdict = capsys.readouterr().err
    assert "layout  4 GPUs: TP 2 PP 1 CP 1 DP 2 | EP 2 ETP 1 | rollout TP 1 DP 4 EP 1" in verdict, verdict
    cfg = OmegaConf.load(tmp_path / "dry.yaml")
    assert cfg.trainer.n_gpus_per_node == 4 and cfg.ray_kwargs.ray_init.num_gpus == 4
    assert cfg.actor_rollout_ref.actor.megatron.sequence_parallel is True

    # the defaults: one process, the layout's sizes (NPROC=1: 8 logical CPUs, as layout/cpu.yaml declares)
    plain = check_args(tmp_path)
    assert "trainer.n_gpus_per_node=1" in plain and "ray_kwargs.ray_init.num_cpus=8" in plain
    assert not any("parallel_size=" in a and "megatron" in a or "sequence_parallel" in a for a in plain), plain
    # ETP and PP reach both owners of the Megatron sizes
    sized = check_args(tmp_path, NPROC="2", PP="2", ETP="1")
    for owner in ("actor", "ref"):
        assert f"actor_rollout_ref.{owner}.megatron.pipeline_model_parallel_size=2" in sized
        assert f"actor_rollout_ref.{owner}.megatron.expert_tensor_parallel_size=1" in sized


# (variables, exit status, the refusal: key, value and rule)
REFUSED = [
    # not integers: the early rule set (exit 2, before any other check)
    ({"NPROC": "4", "TP": "1.5"}, 2, f"refused: ERROR [{MEGATRON}.tensor_model_parallel_size] 1.5 must be an integer >= 1"),
    ({"NPROC": "two"}, 2, "refused: ERROR [trainer.n_gpus_per_node] 'two' must be an integer >= 1"),
    ({"NPROC": "4", "EP": "0"}, 2, f"refused: ERROR [{MEGATRON}.expert_model_parallel_size] 0 must be an integer >= 1"),
    # TP x PP not dividing NPROC, EP not dividing the experts: the layout rules (exit 1)
    ({"NPROC": "3", "TP": "2"}, 1, "ERROR [trainer.nnodes x trainer.n_gpus_per_node] world size 3 is not a multiple of "
                                   "TP x PP x CP = 2 x 1 x 1 = 2"),
    ({"NPROC": "4", "TP": "2", "PP": "4"}, 1, "world size 4 is not a multiple of TP x PP x CP = 2 x 4 x 1 = 8"),
    ({"NPROC": "3", "EP": "3"}, 1, f"ERROR [{MEGATRON}.expert_model_parallel_size] EP 3 must divide the 8 experts "
                                   "(num_experts)"),
    ({"NPROC": "2", "PP": "2", "ETP": "3"}, 1, f"ERROR [{MEGATRON}.expert_tensor_parallel_size] ETP 3 must divide the 64 "
                                               "expert intermediate size"),
]


@pytest.mark.parametrize(("env_vars", "status", "message"), REFUSED)
def test_bad_parallel_sizes_are_refused_before_ray_starts_naming_key_value_and_rule(tmp_path, capsys, cpu_plugin, env_vars,
                                                                                    status, message):
    from rlec.cluster.config_check import main

    args = check_args(tmp_path, **env_vars)
    assert main(args) == status
    err = capsys.readouterr().err
    assert message in err, err[-3000:]
    assert not (tmp_path / "dry.yaml").exists()  # nothing written


# The first step on one batch, as a function of the initial weights and that batch only:
# - one mini-batch per step (ppo_mini_batch_size = train_batch_size = 8). With the layout's 2 mini-batches the second is
#   taken after Adam's first step, whose update lr x g / (|g| + eps) turns last-bit differences of near-zero gradients into
#   whole-lr weight differences (measured TP1 vs TP2 x EP2 with 2 mini-batches: pg_loss 0.335320 vs 0.335158, grad_norm
#   0.49269 vs 0.49496);
# - no MoE load-balancing loss (moe_aux_loss_coeff=0; the recipe's is 1e-3). Megatron computes it per micro-batch, from the
#   micro-batch's own expert counts (padding included), and at DP 2 the micro-batches hold other rows: with it on, TP1 vs
#   TP2 x EP2 grad_norm 0.4019451 vs 0.4018855 (1.5e-4 relative), pg_loss unchanged.
SAME_BATCH = ("trainer.test_freq=-1", "rlec.schedule.end_step=2", "rlec.cpu.scripted_fraction=0.25",
              "actor_rollout_ref.actor.ppo_mini_batch_size=8",
              f"{MEGATRON}.override_transformer_config.moe_aux_loss_coeff=0.0")
# TRAINER=verl NPROC=1 STEPS=1 with SAME_BATCH, the tiny model of seed 0 (tiny_moe_dir) and the sample data
TP1_STEP1 = {"actor/pg_loss": 0.33512609684839845, "actor/grad_norm": 0.4021123016707464}
# relative; measured at NPROC=4 TP=2 EP=2: pg_loss 0.3351260982453823 (4.2e-9), grad_norm 0.40211372837091414 (3.5e-6): fp32
# sums in another order (TP's split matmuls and all-reduces, EP's all-to-all, DP's gradient reduction); 2e-5 is ~6x the
# larger of the two and ~7x below the load-balancing loss's layout effect above
TOLERANCE = 2e-5


def _launch_command(out: Path, data: Path, model: Path, steps: int, **env_vars: str) -> tuple[list[str], dict[str, str]]:
    env = {**os.environ, "TRAINER": "verl", "STEPS": str(steps), "OUTPUT_DIR": str(out), "DATA_DIR": str(data),
           "MODEL_PATH": str(model), "EVAL_AT_END": "0", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "PYTHON": os.environ.get("PYTHON", "python"), **env_vars}
    env.pop("RLEC_VERBOSE", None)
    venv_bin = REPO / ".venv" / "bin"
    if venv_bin.is_dir():
        env["PATH"], env["PYTHON"] = f"{venv_bin}:{env['PATH']}", str(venv_bin / "python")
    return ["bash", str(SCRIPT), *SAME_BATCH], env


def _launch(out: Path, data: Path, model: Path, steps: int, **env_vars: str) -> subprocess.CompletedProcess:
    argv, env = _launch_command(out, data, model, steps, **env_vars)
    return subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=1500)


def _text(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _interrupted_launch(out: Path, data: Path, model: Path, steps: int, **env_vars: str) -> tuple[int, str, str]:
    """The launch, with Ctrl-C once step 1 is complete (checkpointed, then logged: verl logs a step after its save) and
    step 2 runs: SIGINT to the launcher's whole process group, as a terminal sends it. Returns (exit status, console,
    the launch's verl.log)."""
    import signal
    import time

    argv, env = _launch_command(out, data, model, steps, **env_vars)
    # SIGINT's default disposition, as under a terminal: a shell's background job (`make test &`) ignores it, and an
    # ignored SIGINT stays ignored across exec
    proc = subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    saved, deadline = out / "global_step_1" / "rlec_manifest.json", time.monotonic() + 1200
    try:
        while not (saved.exists() and '"step": 1' in _text(out / "metrics.jsonl")):  # step 2 then takes ~a minute
            assert proc.poll() is None and time.monotonic() < deadline, "the run ended or stalled before step 1's end"
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGINT)
        console, _ = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    (log,) = (out / "launches").glob("*/verl.log")
    return proc.returncode, console, log.read_text(errors="replace")


def _metrics(out: Path) -> dict[int, dict]:
    import json

    return {row["step"]: row for row in map(json.loads, (out / "metrics.jsonl").read_text().splitlines())}


@pytest.mark.slow  # two launches of verl's trainer with 4 Megatron workers: ~8 min on a loaded 2-core box
def test_tp2_ep2_through_verls_worker_trains_resumes_and_matches_tp1_on_the_first_step(tmp_path, tiny_moe_dir, capsys,
                                                                                      cpu_plugin, sample_data_dir):
    """``NPROC=4 TP=2 EP=2``: 4 Megatron ranks over gloo in verl's worker group (TP 2 with sequence parallel, EP 2,
    DP 2), one rlec_hf rollout replica over them. Two steps, checkpointed every step, stopped with Ctrl-C in step 2
    (issue 55 item 3: SIGINT to the launcher's process group gives one line, status 130, no traceback in verl.log, no
    Ray process left 10 s later); the same command again resumes after step 1 (every rank reading its own checkpoint
    shards: the ``parallel_checkpoint_load`` shim) and trains step 2. Step 1's batch is the TP1 run's (same seed, data,
    model, per-request rollout seeds): its loss and gradient norm (taken before the update: the step count does not
    change them) equal the TP1 figures within TOLERANCE. A relaunch of the same folder under NPROC=1 is refused before
    Ray starts."""
    import time

    from rlec.rules.resume import launch_processes

    # the sample data prepared once per session (what the launcher prepares into a fresh DATA_DIR, byte for byte)
    out, data = tmp_path / "run", sample_data_dir
    status, console, verl_log = _interrupted_launch(out, data, tiny_moe_dir, 2, NPROC="4", TP="2", EP="2", SAVE_FREQ="1")
    assert status == 130, console[-6000:]
    assert "layout  4 GPUs: TP 2 PP 1 CP 1 DP 2 | EP 2 ETP 1 | rollout TP 1 DP 4 EP 1" in console, console[-3000:]
    said = [line for line in console.splitlines() if "interrupted" in line]
    assert said == ["interrupted at step 2; rerun the same command to resume from step 1's checkpoint"], console[-3000:]
    assert "Traceback" not in console and "Traceback" not in verl_log, verl_log[-6000:]
    time.sleep(10)
    assert launch_processes(out) == [], "Ray processes of the interrupted launch still run 10 s after it"
    m = _metrics(out)
    assert sorted(m) == [1] and (out / "latest_checkpointed_iteration.txt").read_text().strip() == "1"
    for key, want in TP1_STEP1.items():
        assert abs(m[1][key] - want) <= TOLERANCE * abs(want), (key, m[1][key], want)
    assert abs(m[1]["rollout_corr/kl"]) < 1e-6  # the trainer's old log-probs are the rollout's, at TP 2 x EP 2 too
    step1 = (out / "metrics.jsonl").read_text().splitlines()

    second = _launch(out, data, tiny_moe_dir, 2, NPROC="4", TP="2", EP="2", SAVE_FREQ="1")  # the same command
    log = second.stdout + second.stderr
    assert second.returncode == 0, log[-6000:]
    assert "resumed after step 1" in second.stdout and "step 1/2" not in second.stdout, second.stdout[-3000:]
    m = _metrics(out)
    assert sorted(m) == [1, 2] and (out / "metrics.jsonl").read_text().splitlines()[:1] == step1
    assert m[2]["actor/grad_norm"] > 0 and (out / "global_step_2" / "actor").is_dir()
    assert (out / "hf_final" / "rlec_step.txt").read_text().strip() == "2"

    # the checkpoints are TP 2 x EP 2 shards: another layout is refused by the config check, before Ray starts
    from rlec.cluster.config_check import main

    (tmp_path / "check").mkdir()
    args = check_args(tmp_path / "check", NPROC="1", OUTPUT_DIR=str(out), MODEL_PATH=str(tiny_moe_dir), DATA_DIR=str(data))
    capsys.readouterr()
    assert main(args) == 1
    err = capsys.readouterr().err
    assert "holds checkpoints written under layout" in err and "(world_size, tp, ep differ)" in err, err[-3000:]
