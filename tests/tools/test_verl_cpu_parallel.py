"""Expert and tensor parallel through verl's own worker on CPU (issue 31 item 5): ``NPROC``, ``TP``, ``EP``, ``ETP``,
``PP`` of ``TRAINER=verl bash tools/run_megatron_rlec.sh`` without CUDA.

The fast tests run the launcher with a stand-in interpreter that records the arguments it hands the config check, then
run rlec's real config check (``rlec.cluster.config_check.main``, what DRY_RUN and every launch run before Ray
starts) on them in this process: the variables reach verl's keys, and bad values are refused naming the key, the
value and the rule (the early rule set's integer rules, the layout rules' world-size and model divisibility).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

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
    from rlec.verl_plugin.cpu import enable_cpu

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
