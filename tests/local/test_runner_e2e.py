"""The main job end to end: `TRAINER=local tools/run_megatron_rlec.sh` on a machine without CUDA runs the local
RLEC training (rollout -> score -> mean-only advantage -> Megatron update -> weight sync).

Small settings keep each run to seconds of training; the start-up (imports, model build) dominates.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rlec.local.checkpoint import is_intact
from rlec.local.logger import read_metrics

ROOT = Path(__file__).resolve().parents[2]
LAUNCHER = ROOT / "tools" / "run_megatron_rlec.sh"
SMALL = ["data.train_batch_size=2", "actor_rollout_ref.rollout.n=4", "data.max_response_length=8",
         "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4", "actor_rollout_ref.actor.ppo_mini_batch_size=1",
         "rlec.local.scripted_fraction=0.5", "rlec.schedule.end_step=2", "rlec.local.threads=1"]
NO_EVAL = "rlec.local.eval.at_end=false"
EXPECTED_FIELDS = {"rlec/reward/mean", "rlec/b", "rlec/coverage", "rlec/abstention_rate", "rlec/accuracy", "actor/pg_loss",
                   "actor/grad_norm", "actor/entropy", "critic/advantages/max", "critic/score/mean", "timing_s/gen",
                   "timing_s/reward", "timing_s/update_actor", "timing_s/update_weights", "timing_s/step",
                   "rollout/tokens_per_s", "weight_sync/exact", "response_length/mean"}
VOLATILE = ("timing_s/", "timing_per_token_ms/", "rollout/tokens_per_s")


def launch(out: Path, data: Path, *overrides: str, nproc: int = 1, extra_env: dict[str, str] | None = None,
           timeout: int = 900) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHON": sys.executable, "OUTPUT_DIR": str(out), "DATA_DIR": str(data), "NPROC": str(nproc),
           "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "TRAINER": "local", **(extra_env or {})}
    for var in ("MODEL_PATH", "RESUME", "STEPS", "WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_PORT", "MASTER_ADDR"):
        if var not in (extra_env or {}):
            env.pop(var, None)
    return subprocess.run(["bash", str(LAUNCHER), *overrides], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def data_dir(sample_data_dir: Path) -> Path:
    return sample_data_dir  # prepared once per session (tests/conftest.py)


def _stable(record: dict) -> dict:
    return {k: v for k, v in record.items() if not k.startswith(VOLATILE)}


def _check_run(proc: subprocess.CompletedProcess, out: Path, steps: int) -> list[dict]:
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "running the local CPU profile" in proc.stderr
    records = read_metrics(out / "metrics.jsonl")
    assert [r["step"] for r in records] == list(range(1, steps + 1))
    for r in records:
        assert EXPECTED_FIELDS <= set(r), EXPECTED_FIELDS - set(r)
        for key in ("rlec/reward/mean", "actor/pg_loss", "actor/grad_norm", "actor/entropy"):
            assert isinstance(r[key], float) and math.isfinite(r[key]), (key, r[key])
        assert r["weight_sync/exact"] == 1.0
        assert r["critic/advantages/max"] > 0 > r["critic/advantages/min"]  # scripted answers give groups reward variance
        assert r["actor/grad_norm"] > 0  # so the update is real
    return records


@pytest.fixture(scope="module")
def world1_run(data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess, Path, list[dict]]:
    """Two uninterrupted steps at world size 1 (with the final evaluation), shared by the tests below."""
    full = tmp_path_factory.mktemp("full") / "run"
    proc = launch(full, data_dir, *SMALL, "trainer.total_training_steps=2", "trainer.save_freq=1",
                  "rlec.local.eval.max_questions=2", "rlec.local.eval.max_new_tokens=4")
    return proc, full, _check_run(proc, full, 2)


@pytest.fixture(scope="module")
def split_run(data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess, Path, list[dict]]:
    """One step, then a launch with 2 steps that resumes from its checkpoint (RESUME=auto: the default).

    The fallback test below then damages its folder (checkpoints of steps 1 and 2), which saves that test
    a two-step launch of its own; the resume test reads only the returned stderr and records."""
    split = tmp_path_factory.mktemp("split") / "run"
    first = launch(split, data_dir, *SMALL, "trainer.total_training_steps=1", NO_EVAL)
    _check_run(first, split, 1)
    resumed = launch(split, data_dir, *SMALL, "trainer.total_training_steps=2", NO_EVAL)
    return resumed, split, _check_run(resumed, split, 2)


@pytest.mark.slow
def test_two_steps_at_world_size_1_and_resume_reproduces_them(world1_run, split_run) -> None:
    proc, full, records = world1_run
    assert [r["rlec/b"] for r in records] == [0.0, 1.0]
    assert all(r["actor/optimizer_steps"] == 2.0 for r in records)  # two PPO mini-batches per step
    assert "## Training (local run)" in proc.stdout and "## Final evaluation" in proc.stdout
    assert json.loads((full / "eval" / "metrics" / "metrics.json").read_text())
    assert (full / "checkpoints" / "latest_checkpointed_iteration.txt").read_text().strip() == "2"
    assert (full / "hf_final" / "config.json").is_file() and (full / "training_curves.png").stat().st_size > 0

    resumed, _, again = split_run
    assert "resumed from" in resumed.stderr
    for got, want in zip(again, records):
        diff = {k: (got.get(k), want.get(k)) for k in set(_stable(got)) | set(_stable(want)) if got.get(k) != want.get(k)}
        assert not diff, diff


@pytest.mark.slow
def test_one_step_at_tp2_ep2_on_four_processes_matches_world_size_1(world1_run, data_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "tp2ep2"
    proc = launch(out, data_dir, *SMALL, "trainer.total_training_steps=1", NO_EVAL, nproc=4, extra_env={"TP": "2", "EP": "2"})
    (step1,) = _check_run(proc, out, 1)
    assert "'tp': 2, 'ep': 2" in proc.stderr and "'dp': 2" in proc.stderr
    reference = world1_run[2][0]  # same data, seed and rollout: only the update's layout differs
    assert step1["rlec/reward/mean"] == reference["rlec/reward/mean"]
    for key in ("actor/pg_loss", "actor/grad_norm", "actor/entropy", "critic/advantages/max"):
        assert step1[key] == pytest.approx(reference[key], rel=1e-4, abs=1e-6), key


BAD_INPUT = [
    ({"TP": "2"}, [], "does not fit 1 process(es)"),
    ({"MODEL_PATH": "__bert__"}, [], "model_type 'bert' is not supported; supported: qwen3, qwen3_moe"),
    ({}, ["rlec.local.prepare_data_if_missing=false", "data.train_files=/nonexistent/rlec-data/train.parquet"],
     "data.train_files=/nonexistent/rlec-data/train.parquet is missing"),
    ({"OUTPUT_DIR": "/proc/rlec-cannot-write/run"}, [], "is not writable"),
    ({}, ["rlec.local.threads=-1"], "ERROR [rlec.local.threads] -1 must be an integer >= 0"),
]


def _bad_input(env: dict, tmp_path: Path) -> tuple[dict, Path]:
    if env.get("MODEL_PATH") == "__bert__":
        bert = tmp_path / "bert"
        bert.mkdir()
        (bert / "config.json").write_text(json.dumps({"model_type": "bert"}))
        env = {"MODEL_PATH": str(bert)}
    env = dict(env)
    return env, Path(env.pop("OUTPUT_DIR", tmp_path / "out"))


def _check_refused(returncode: int, stderr: str, out: Path, message: str) -> None:
    assert returncode == 2, stderr[-3000:]
    assert "rlec.local: error:" in stderr and message in stderr, stderr[-3000:]
    assert "Traceback" not in stderr
    assert len(stderr.strip().splitlines()) <= 3 and not (out / "metrics.jsonl").exists()


@pytest.mark.slow
def test_bad_input_through_the_launcher_fails_before_work(data_dir: Path, tmp_path: Path) -> None:
    """One refusal through tools/run_megatron_rlec.sh (exit status 2 and the one line reach the caller);
    every refusal in-process below: each launch costs a Python start (~20 CPU-s) and checks nothing more."""
    env, out = _bad_input({"TP": "2"}, tmp_path)
    proc = launch(out, data_dir, "trainer.total_training_steps=1", "rlec.schedule.end_step=2", extra_env=env, timeout=300)
    _check_refused(proc.returncode, proc.stderr, out, "does not fit 1 process(es)")


@pytest.mark.parametrize(("env", "overrides", "message"), BAD_INPUT)
def test_bad_input_fails_before_work(data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys,
                                     env: dict, overrides: list, message: str) -> None:
    """The launcher's environment (as launch() sets it) and rlec.local.runner.main in this process:
    the refusals come from the config and the preflight, before threads, Megatron or any file."""
    from rlec.local.runner import main

    env, out = _bad_input(env, tmp_path)
    for var in ("MODEL_PATH", "RESUME", "STEPS", "WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_PORT", "MASTER_ADDR"):
        monkeypatch.delenv(var, raising=False)
    for var, value in {"OUTPUT_DIR": str(out), "DATA_DIR": str(data_dir), "NPROC": "1", **env}.items():
        monkeypatch.setenv(var, value)
    capsys.readouterr()
    returncode = main([*overrides, "trainer.total_training_steps=1", "rlec.schedule.end_step=2"])
    _check_refused(returncode, capsys.readouterr().err, out, message)


@pytest.mark.slow
def test_resuming_with_other_settings_is_refused_in_one_line(world1_run, data_dir: Path) -> None:
    _, full, _ = world1_run
    proc = launch(full, data_dir, *SMALL, "trainer.total_training_steps=2", extra_env={"SEED": "7"}, timeout=300)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "holds a run with other settings (actor_rollout_ref.rollout.seed: 42 -> 7; data.seed: 42 -> 7)" in proc.stderr


@pytest.mark.slow
def test_ctrl_c_stops_with_one_line_and_status_130(data_dir: Path, tmp_path: Path) -> None:
    import signal
    import time

    env = {**os.environ, "PYTHON": sys.executable, "OUTPUT_DIR": str(tmp_path / "run"), "DATA_DIR": str(data_dir),
           "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "TRAINER": "local"}
    # SIGINT handled as in a terminal even when the test itself runs in the background (where it is ignored)
    proc = subprocess.Popen(["bash", str(LAUNCHER), *SMALL, "trainer.total_training_steps=50", NO_EVAL], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.time() + 600
    while time.time() < deadline and not (tmp_path / "run" / "config.yaml").exists():
        time.sleep(1)
    time.sleep(3)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 130, err[-3000:]
    assert "Traceback" not in err and "rerun the same command to resume" in err
    assert not (tmp_path / "run" / "hf_final").exists()  # stopped, not finished


@pytest.mark.slow
def test_e3_and_passk_in_the_local_run(data_dir: Path, tmp_path: Path) -> None:
    """E3 with a target entropy above the measured one (T rises), exact budgets, and the pass@k estimator."""
    out = tmp_path / "e3"
    proc = launch(out, data_dir, *SMALL, "trainer.total_training_steps=3", NO_EVAL, "algorithm=[e3,passk]",
                  "rlec.e3.temperature.target_entropy=20.0", "rlec.e3.temperature.anneal.enable=false",
                  "rlec.e3.budget.n_min=2", "rlec.e3.budget.n_max=6")
    records = _check_run(proc, out, 3)
    temps = [r["e3/temperature"] for r in records]
    assert temps[0] == 1.0 and temps[0] < temps[1] < temps[2]  # entropy (~11.9 nats) below the target: hotter
    for r in records:
        assert r["e3/rollout_n/mean"] == 4.0 and 2 <= r["e3/rollout_n/min"] <= r["e3/rollout_n/max"] <= 6
        assert r["passk/active_k"] == 2.0 and r["e3/target_entropy"] == 20.0


def _rlve_state(checkpoint: Path) -> dict:
    """The environment source's state (row counter, controllers) saved in a local checkpoint's dataloader state."""
    import torch

    def find(node):
        if isinstance(node, dict):
            if "rlve" in node and isinstance(node["rlve"], dict) and "controllers" in node["rlve"]:
                return node["rlve"]
            for value in node.values():
                found = find(value)
                if found is not None:
                    return found
        return None

    common = torch.load(checkpoint / "common.pt", map_location="cpu", weights_only=False)
    state = find(common["rlec"]["user_state"]["loader"])
    assert state is not None, common["rlec"]["user_state"]
    return state


@pytest.mark.slow
def test_rlve_gym_environments_only_with_e3_below_its_target_and_resume(data_dir: Path, tmp_path: Path) -> None:
    """Two RLVE-Gym environments as the only prompt source (ENVIRONMENTS=rlve_gym:...), E3 cooling toward a
    low target entropy; step 1, then step 2 resumed from its checkpoint with the same controller state."""
    out = tmp_path / "rlve"
    gym = ("Division", "Multiplication")  # generation < 1 ms, integer answers that fit 24 response tokens
    # 24 tokens: a scripted reference answer or I don't know must fit, or it is cut and graded wrong
    run = [*SMALL, "data.max_response_length=24", NO_EVAL, "algorithm=[rlve,e3]", "trainer.save_freq=1",
           "rlec.rlve.seed=2",  # rows 0-3: Multiplication, Division | Division, Division
           "rlec.e3.temperature.target_entropy=2.0", "rlec.e3.budget.n_min=2"]
    extra_env = {"ENVIRONMENTS": ",".join(f"rlve_gym:{g}" for g in gym), "RLEC_GYM_WORKERS": "2"}
    first = launch(out, data_dir, *run, "trainer.total_training_steps=1", extra_env=extra_env)
    _check_run(first, out, 1)
    proc = launch(out, data_dir, *run, "trainer.total_training_steps=2", extra_env=extra_env)
    records = _check_run(proc, out, 2)
    assert f"resumed from {out / 'checkpoints' / 'global_step_1'} (step 1)" in proc.stderr
    assert records[1]["e3/temperature"] < records[0]["e3/temperature"] == 1.0
    for r in records:  # rows from RLVE-Gym, generated and verified in its pool (rlec's grading), counted per step
        assert r["rlve/share"] == 1.0 and sum(r[f"rlve/rlve_gym:{g}/share"] for g in gym) == pytest.approx(1.0)
        assert sum(r.get(f"rlve/gym/{g}/generated", 0) for g in gym) >= 2  # counters of the run's process, per environment seen
        assert all(r.get(f"rlve/gym/{g}/{c}", 0) == 0 for g in gym for c in ("gen_timeouts", "gen_failures", "skipped"))
    assert records[0]["rlve/rlve_gym:Division/share"] == records[0]["rlve/rlve_gym:Multiplication/share"] == 0.5
    assert sum(r.get(f"rlve/gym/{g}/verified", 0) for r in records for g in gym) >= 1  # the scripted gold answers at least
    # the resumed run continued the saved source: rows 2-3 after rows 0-1, the samples counted at h = 0 added up
    saved, resumed = (_rlve_state(out / "checkpoints" / f"global_step_{k}") for k in (1, 2))
    assert (saved["counter"], resumed["counter"]) == (2, 4)
    for g in gym:
        before, after = saved["controllers"][f"rlve_gym:{g}"], resumed["controllers"][f"rlve_gym:{g}"]
        assert before["h"] == after["h"] == 0 and records[1][f"rlve/rlve_gym:{g}/difficulty"] == 0.0
        step2 = round(records[1][f"rlve/rlve_gym:{g}/share"] * 8)  # 2 prompts x 4 responses, all at d = 0
        assert after["total_at_h"] == before["total_at_h"] + step2
        if after["total_at_h"]:
            assert records[1][f"rlve/rlve_gym:{g}/accuracy_at_h"] == pytest.approx(after["correct_at_h"] / after["total_at_h"])


@pytest.mark.slow
def test_a_shard_overwritten_on_disk_is_not_resumed_from_and_the_run_falls_back_loudly(world1_run, split_run,
                                                                                       data_dir: Path) -> None:
    """Issue 26, item 1: 1 MiB overwritten in the middle of the newest checkpoint's shard, then a longer run.

    Without the manifest the run resumed silently and trained on NaN; now the damaged checkpoint is named
    with the file, the previous one is resumed, and the replayed step equals the uninterrupted run's.
    The run damaged is split_run's (steps 1 and 2 checkpointed, as the test's own first launch did before)."""
    records = world1_run[2]
    out = split_run[1]
    assert {"global_step_1", "global_step_2"} <= {p.name for p in (out / "checkpoints").iterdir()}
    shard = out / "checkpoints" / "global_step_2" / "__0_0.distcp"
    size = shard.stat().st_size
    assert size > 3 * 2**20
    with open(shard, "r+b") as f:
        f.seek(size // 2 - 2**19)
        f.write(os.urandom(2**20))
    assert shard.stat().st_size == size
    proc = launch(out, data_dir, *SMALL, "trainer.total_training_steps=3", NO_EVAL)
    again = _check_run(proc, out, 3)
    assert f"WARNING: {shard.parent} is damaged (__0_0.distcp: content differs from the manifest (sha256))" in proc.stderr
    assert "resuming from the newest intact checkpoint, global_step_1" in proc.stderr
    assert f"resumed from {out / 'checkpoints' / 'global_step_1'} (step 1)" in proc.stderr
    assert _stable(again[1]) == _stable(records[1])  # step 2 replayed from step 1 as in the uninterrupted run
    assert (out / "checkpoints" / "latest_checkpointed_iteration.txt").read_text().strip() == "3"


FULL_DISK_AT_STEP_2 = """
import sys
from rlec import io as rio
from rlec.megatron import checkpoint as mc
original = mc.write_dist_checkpoint
def failing(policy, folder, **kw):
    if kw.get("step") == 2:  # what torch's zip writer raises on a full disk (issue 26), errno lost
        raise RuntimeError("Worker failure: [enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598")
    return original(policy, folder, **kw)
mc.write_dist_checkpoint = failing
rio._free_bytes = lambda path: 4096  # the filesystem is full while the partial checkpoint holds its space
from rlec.local.runner import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.slow
def test_a_full_disk_at_a_checkpoint_ends_with_one_line_after_the_steps_metrics(data_dir: Path, tmp_path: Path) -> None:
    """Issue 26, item 2: the finished step's metrics line first, one line naming the cause and the path,
    no partial checkpoint, and the tracker still on the previous complete one."""
    out = tmp_path / "run"
    env = {**os.environ, "OUTPUT_DIR": str(out), "DATA_DIR": str(data_dir), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1",
           "PYTHONPATH": str(ROOT)}
    for var in ("MODEL_PATH", "RESUME", "STEPS", "WORLD_SIZE", "RANK", "LOCAL_RANK"):
        env.pop(var, None)
    proc = subprocess.run([sys.executable, "-c", FULL_DISK_AT_STEP_2, *SMALL, "trainer.total_training_steps=2",
                           "trainer.save_freq=1", NO_EVAL], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 2, proc.stderr[-4000:]
    last = proc.stderr.strip().splitlines()[-1]
    path = out / "checkpoints" / "global_step_2"
    assert last.startswith("rlec.local: error: step 2 finished (metrics.jsonl has the step) but its checkpoint was not saved: "
                           f"[Errno 28] No space left on device (0.0 MiB free): '{path}'"), last
    assert last.endswith("the latest checkpoint is still global_step_1: free space, then rerun the same command to resume")
    assert "Traceback" not in proc.stderr
    assert [r["step"] for r in read_metrics(out / "metrics.jsonl")] == [1, 2]
    assert (out / "checkpoints" / "latest_checkpointed_iteration.txt").read_text().strip() == "1"
    assert sorted(p.name for p in (out / "checkpoints").iterdir() if p.is_dir()) == ["global_step_1"]  # no partial folder
    # issue 34 item 2: space freed, the same command resumes from the checkpoint before the full disk
    again = subprocess.run([sys.executable, "-m", "rlec.local.runner", *SMALL, "trainer.total_training_steps=2",
                            "trainer.save_freq=1", NO_EVAL], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert again.returncode == 0, again.stderr[-4000:]
    assert f"resumed from {out / 'checkpoints' / 'global_step_1'} (step 1)" in again.stderr
    assert (out / "checkpoints" / "latest_checkpointed_iteration.txt").read_text().strip() == "2"
    assert is_intact(out / "checkpoints" / "global_step_2")
