"""tools/convert_hf_to_mcore.py end to end on CPU (torchrun over gloo), and its bad-input errors.

The heavy checks run as three launches (``tests/megatron/megatron_checks.py`` plans), because on 2
shared cores the per-process Megatron import dominates: 4 processes convert at TP2xEP2 and then
run the training-step check on that checkpoint; 2 processes convert at TP2 and at EP2; 1 process
converts at TP1, converts the dense Qwen3, runs a conversion that must fail verification, and
loads the TP2xEP2 checkpoint at TP1 through verl's loader for the negative controls. Conversions
call the tool's ``main(argv)``; the command line itself (exit status 2, ``--help``) is run as a
subprocess below.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.minutes(2.5)  # tests/conftest.py: the longest modules start first

REPO = Path(__file__).resolve().parents[2]
TOOL = REPO / "tools" / "convert_hf_to_mcore.py"
CHECKS = REPO / "tests" / "megatron" / "megatron_checks.py"
RESULT_PREFIX = "RESULT_JSON "


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONPATH=str(REPO), PYTHONWARNINGS="ignore")
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(key, None)
    env.update(extra)
    return env


def torchrun(script: Path, nproc: int, *args: str, timeout: int = 900, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run ``script`` under torchrun (one node, ``nproc`` processes, one thread each); one process runs plainly (the
    scripts start a one-process world themselves, at an in-memory store), sparing the launcher. ``--standalone``: the
    agent binds port 0 and hands its store to the workers, so no port is guessed (a ``--master_port`` that was free a
    moment ago could be taken by then: EADDRINUSE under load, issue 55 item 5)."""
    if nproc == 1:
        cmd = [sys.executable, str(script), *args]
    else:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(nproc), str(script), *args]
    return subprocess.run(cmd, cwd=REPO, env=_env(**(env or {})), capture_output=True, text=True, timeout=timeout)


def run_plan(nproc: int, steps: list[dict], env: dict[str, str] | None = None) -> tuple[list, str]:
    """Run a megatron_checks plan; returns (result of each step, stdout)."""
    proc = torchrun(CHECKS, nproc, json.dumps(steps), env=env)
    lines = [line for line in proc.stdout.splitlines() if line.startswith(RESULT_PREFIX)]
    assert proc.returncode == 0 and lines, f"rc={proc.returncode}\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    return json.loads(lines[-1][len(RESULT_PREFIX):]), proc.stdout


def _convert_argv(model: Path, out: Path, *extra: str) -> list[str]:
    return ["--hf-model-path", str(model), "--output-path", str(out), "--verify", *extra]


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("converted")


@pytest.fixture(scope="module")
def job4(tiny_moe_dir: Path, root: Path) -> dict:
    """4 processes: convert at TP2xEP2 (ETP2), then the training-step check on that checkpoint."""
    ckpt = root / "tp2ep2"
    results, stdout = run_plan(4, [
        {"convert": _convert_argv(tiny_moe_dir, ckpt, "--tp", "2", "--ep", "2")},
        {"train": {"hf": str(tiny_moe_dir), "ckpt": str(ckpt), "tp": 2, "ep": 2, "out": str(root / "resume")}},
    ])
    return {"convert": results[0], "train": results[1], "ckpt": ckpt, "stdout": stdout}


@pytest.fixture(scope="module")
def job2(tiny_moe_dir: Path, root: Path) -> dict:
    """2 processes: convert at TP2 and at EP2; the distributed optimizer at EP2 (dense DP2)."""
    results, stdout = run_plan(2, [
        {"convert": _convert_argv(tiny_moe_dir, root / "tp2", "--tp", "2")},
        {"convert": _convert_argv(tiny_moe_dir, root / "ep2", "--ep", "2")},
        {"distopt": {"hf": str(tiny_moe_dir), "ep": 2}},
    ])
    return {"tp2": results[0], "ep2": results[1], "distopt": results[2], "stdout": stdout}


@pytest.fixture(scope="module")
def job1(tiny_moe_dir: Path, tiny_dense_dir: Path, root: Path, job4: dict) -> dict:
    """1 process: TP1, dense Qwen3, a conversion that must fail verification, negative controls."""
    results, stdout = run_plan(1, [
        {"convert": _convert_argv(tiny_moe_dir, root / "tp1")},
        {"convert": _convert_argv(tiny_dense_dir, root / "dense")},
        # a bound no fp32 conversion meets (0 itself is refused at parsing: a bound must be > 0)
        {"convert": _convert_argv(tiny_moe_dir, root / "strict" / "out", "--atol", "1e-30", "--no-hash")},
        {"controls": {"hf": str(tiny_moe_dir), "ckpt": str(job4["ckpt"])}},
    ])
    return {"tp1": results[0], "dense": results[1], "strict": results[2], "controls": results[3], "stdout": stdout}


def _assert_verified(result: dict, out: Path, layout: dict[str, int]) -> dict:
    assert result == {"rc": 0}
    meta = json.loads((out / "rlec_checkpoint.json").read_text())
    report = meta["verification"]
    assert report["passed"] is True
    assert report["max_abs_logit_diff"] <= 1e-4
    assert report["top1_agreement"] == 1.0
    assert report["n_positions"] > 20
    assert report["export_tensors"] == meta["source"]["tensors"]
    assert report["export_mismatched"] == report["export_missing"] == report["export_unexpected"] == []
    for key, value in layout.items():
        assert meta["parallel"][key] == value
    assert meta["layer_spec"] == "local" and meta["dtype"] == "float32"
    assert {"torch", "megatron-core", "mbridge", "transformers"} <= set(meta["versions"])
    assert meta["checkpoint_bytes"] == sum(f.stat().st_size for f in out.rglob("*") if f.name != "rlec_checkpoint.json")
    source = Path(meta["source"]["path"])
    assert meta["source"]["sha256"]["model.safetensors"] == hashlib.sha256((source / "model.safetensors").read_bytes()).hexdigest()
    # The layout verl's loader reads: a dist checkpoint folder with the model's keys at the top level.
    assert (out / "metadata.json").is_file() and (out / "common.pt").is_file() and list(out.glob("*.distcp"))
    assert not list(out.parent.glob(f".{out.name}.tmp-*")), "temporary folder left behind"
    return meta


@pytest.mark.slow
def test_conversion_verifies_at_tp2_ep2(job4: dict) -> None:
    _assert_verified(job4["convert"], job4["ckpt"], {"tp": 2, "ep": 2, "etp": 2, "world_size": 4})
    assert "verification            PASSED" in job4["stdout"]


@pytest.mark.slow
@pytest.mark.parametrize(("name", "layout"), [("tp2", {"tp": 2, "ep": 1, "world_size": 2}), ("ep2", {"tp": 1, "ep": 2, "world_size": 2})])
def test_conversion_verifies_at_tp2_and_ep2(job2: dict, root: Path, name: str, layout: dict) -> None:
    _assert_verified(job2[name], root / name, layout)


@pytest.mark.slow
def test_conversion_verifies_at_tp1(job1: dict, root: Path) -> None:
    _assert_verified(job1["tp1"], root / "tp1", {"tp": 1, "ep": 1, "world_size": 1})


@pytest.mark.slow
def test_dense_qwen3_converts_and_verifies(job1: dict, root: Path) -> None:
    meta = _assert_verified(job1["dense"], root / "dense", {"tp": 1, "ep": 1, "world_size": 1})
    assert meta["source"]["model_type"] == "qwen3"


@pytest.mark.slow
def test_failed_verification_exits_1_and_leaves_nothing(job1: dict, root: Path) -> None:
    assert job1["strict"] == {"rc": 1}
    assert "verification FAILED" in job1["stdout"]
    assert list((root / "strict").iterdir()) == []  # neither the output nor its temporary folder


@pytest.mark.slow
def test_checkpoint_reshards_and_negative_controls_fail(job1: dict) -> None:
    result = job1["controls"]
    # Written at TP2xEP2, loaded at TP1 through verl's load_mcore_dist_weights: same logits, exact round trip.
    assert result["resharded"]["passed"] is True
    assert result["resharded"]["max_abs_logit_diff"] <= 1e-4
    # A wrong mapping (gate/up swapped in the experts' fused fc1) is caught by both checks.
    wrong = result["wrong_mapping"]
    assert wrong["passed"] is False
    assert wrong["max_abs_logit_diff"] > 100 * 1e-4
    assert len(wrong["export_mismatched"]) == 2 * 2 * 8  # gate and up of 8 experts in 2 layers
    # A 1e-6 change to one weight hides in the logits but not in the exact round trip.
    perturbed = result["perturbed"]
    assert perturbed["passed"] is False and perturbed["export_mismatched"] == ["model.norm.weight"]


@pytest.mark.slow
def test_distributed_optimizer_step_equals_the_plain_one(job2: dict) -> None:
    r = job2["distopt"]
    assert r["dp"] == 2  # dense parameters' optimizer state is sharded over 2 data-parallel ranks
    assert abs(r["loss"] - r["loss_distributed"]) <= 1e-6 * abs(r["loss"])
    assert abs(r["grad_norm"] - r["grad_norm_distributed"]) <= 1e-5 * r["grad_norm"]
    assert r["weight_max_diff"] <= 1e-6


@pytest.mark.slow
def test_megatron_train_step_matches_hf_autograd_at_tp2_ep2(job4: dict) -> None:
    r = job4["train"]
    assert abs(r["loss"] - r["ref_loss"]) <= 1e-5 * max(1.0, abs(r["ref_loss"]))
    assert r["log_prob_max_diff"] <= 1e-4
    assert r["n_grads"] == 69
    assert r["grad_max_diff"] <= 1e-5 * max(1.0, r["grad_max_abs"])
    assert abs(r["grad_norm"] - r["ref_grad_norm"]) <= 1e-5 * r["ref_grad_norm"]
    assert r["update_successful"] is True
    assert r["weight_max_diff_after_step"] <= 0.05 * r["lr"]  # Adam normalises: compare to the step size
    # Resume: weights and optimizer state come back exactly; the next step is identical.
    assert r["resumed_step"] == 1 and r["resumed_user_state"] == {"seed": 0}
    assert r["resumed_weight_max_diff"] == 0.0
    assert r["second_step_loss"] == r["second_step_loss_resumed"]
    assert r["second_step_weight_max_diff"] == 0.0


# ---- bad input: a clear error before any heavy work, exit status 2, nothing written -------------------


def _variant(src: Path, dst: Path, config: dict | None = None, weights: bytes | None = None, drop_weights: bool = False) -> Path:
    """A copy of a model folder (weights symlinked) with config keys replaced or weights replaced."""
    dst.mkdir()
    for f in src.iterdir():
        if f.name == "model.safetensors" and (weights is not None or drop_weights):
            continue
        if f.name == "config.json" and config is not None:
            cfg = json.loads(f.read_text())
            cfg.update(config)
            (dst / f.name).write_text(json.dumps(cfg))
        else:
            (dst / f.name).symlink_to(f)
    if weights is not None:
        (dst / "model.safetensors").write_bytes(weights)
    return dst


def _run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(TOOL), *args], cwd=REPO, env=_env(), capture_output=True, text=True, timeout=300)


BAD_INPUTS = {
    "unsupported_model_type": (dict(config={"model_type": "llama"}), [], "model_type 'llama' is not supported; supported: qwen3, qwen3_moe"),
    "missing_weights": (dict(drop_weights=True), [], "no *.safetensors weights found"),
    "corrupt_weights": (dict(weights=b"\x10\x00\x00\x00\x00\x00\x00\x00not json at all!"), [], "not a readable safetensors file"),
    "config_weights_disagree": (dict(config={"moe_intermediate_size": 96}), [], "shapes disagree with config.json"),
    "experts_missing": (dict(config={"num_experts": 16, "num_local_experts": 16}), [], "tensors missing from the safetensors"),
    "tp_does_not_divide_kv_heads": ({}, ["--tp", "4"], "config.json: --tp: TP 4 must divide the 2 KV heads (num_key_value_heads)"),
    "ep_does_not_divide_experts": ({}, ["--ep", "3"], "config.json: --ep: EP 3 must divide the 8 experts (num_experts)"),
    "pp_does_not_divide_layers": ({}, ["--pp", "3"], "config.json: --pp: PP 3 must divide the 2 layers (num_hidden_layers)"),
}


@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_bad_input_is_refused_before_heavy_work(case: str, tiny_moe_dir: Path, tmp_path: Path) -> None:
    from rlec.layout import ParallelLayout
    from rlec.megatron.preflight import ConversionInputError, check_conversion

    variant, flags, message = BAD_INPUTS[case]
    src = _variant(tiny_moe_dir, tmp_path / "model", **variant) if variant else tiny_moe_dir
    sizes = {"--tp": 1, "--ep": 1, "--pp": 1}
    sizes.update({flags[i]: int(flags[i + 1]) for i in range(0, len(flags), 2)})
    world = max(sizes["--tp"] * sizes["--pp"], sizes["--ep"] * sizes["--pp"] * sizes["--tp"])
    layout = ParallelLayout(tp=sizes["--tp"], ep=sizes["--ep"], pp=sizes["--pp"], world_size=world)
    with pytest.raises(ConversionInputError) as err:
        check_conversion(src, tmp_path / "out", layout)
    assert message in str(err.value)


def test_help_answers_without_importing_torch() -> None:
    """Issue 18: `--help` took ~10 s of imports; arguments are parsed before any heavy import."""
    code = ("import runpy, sys\nsys.argv = ['convert_hf_to_mcore.py', '--help']\n"
            f"try:\n    runpy.run_path({str(TOOL)!r}, run_name='__main__')\n"
            "except SystemExit as e:\n    print('exit', e.code, 'torch' in sys.modules, 'megatron' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.stdout.strip().splitlines()[-1] == "exit 0 False False", proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "--reference-device" in proc.stdout


@pytest.mark.slow  # the tool as a child process imports torch (~3.5 CPU-s); the refusals themselves: test_bad_input_is_refused_before_heavy_work
def test_cli_bad_input_exits_2_with_the_reason_and_writes_nothing(tiny_moe_dir: Path, tmp_path: Path) -> None:
    bad = _variant(tiny_moe_dir, tmp_path / "model", config={"model_type": "llama"})
    out = tmp_path / "out"
    proc = _run_cli("--hf-model-path", str(bad), "--output-path", str(out))
    assert proc.returncode == 2
    assert "model_type 'llama' is not supported; supported: qwen3, qwen3_moe" in proc.stderr
    assert not out.exists()
    # --tp 2 launched as one process: refused with the torchrun hint.
    proc = _run_cli("--hf-model-path", str(tiny_moe_dir), "--output-path", str(out), "--tp", "2")
    assert proc.returncode == 2
    assert "world size (torchrun --nproc_per_node): world size 1 is not a multiple of TP x PP x CP = 2 x 1 x 1" in proc.stderr
    assert "launch with `torchrun --nproc_per_node N`" in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]


def test_existing_output_is_refused_without_overwrite(tiny_moe_dir: Path, tmp_path: Path) -> None:
    from rlec.layout import ParallelLayout
    from rlec.megatron.preflight import ConversionInputError, check_conversion

    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("user data")
    with pytest.raises(ConversionInputError, match="exists \\(pass --overwrite to replace it\\)"):
        check_conversion(tiny_moe_dir, out, ParallelLayout())
    assert check_conversion(tiny_moe_dir, out, ParallelLayout(), overwrite=True).output == out
    assert (out / "keep.txt").read_text() == "user data"


def test_truncated_weights_are_refused(tiny_moe_dir: Path, tmp_path: Path) -> None:
    from rlec.layout import ParallelLayout
    from rlec.megatron.preflight import ConversionInputError, check_conversion

    data = (tiny_moe_dir / "model.safetensors").read_bytes()
    bad = _variant(tiny_moe_dir, tmp_path / "model", weights=data[: len(data) // 2])
    with pytest.raises(ConversionInputError, match="model.safetensors"):
        check_conversion(bad, tmp_path / "out", ParallelLayout())


@pytest.mark.parametrize(("flag", "value", "rule"), [
    ("--atol", "nan", "must be a finite logit bound > 0"), ("--atol", "inf", "must be a finite logit bound > 0"),
    ("--atol", "0", "must be a finite logit bound > 0"), ("--atol", "-1e-4", "must be a finite logit bound > 0"),
    ("--atol", "tiny", "is not a number"), ("--min-top1", "nan", r"must be a share of positions in \[0, 1\]"),
    ("--min-top1", "1.5", r"must be a share of positions in \[0, 1\]"),
])
def test_a_tolerance_that_can_never_pass_is_refused_at_parsing(flag: str, value: str, rule: str, capsys) -> None:
    """Issue 55: ``--verify --atol nan`` converted and verified for minutes, then failed (NaN compares false)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("convert_tool", TOOL)
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    with pytest.raises(SystemExit) as exit_:
        tool.parse_args(["--hf-model-path", "m", "--output-path", "o", "--verify", f"{flag}={value}"])
    err = capsys.readouterr().err.strip().splitlines()
    assert exit_.value.code == 2 and re.search(f"error: argument {flag}: '{value}' {rule}", err[-1]), err
    assert tool.parse_args(["--hf-model-path", "m", "--output-path", "o", "--atol", "1e-4", "--min-top1", "0"]).atol == 1e-4


def test_help_lists_every_option() -> None:
    proc = subprocess.run([sys.executable, str(TOOL), "--help"], cwd=REPO, env=_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0
    for flag in ("--hf-model-path", "--output-path", "--tp", "--ep", "--etp", "--pp", "--verify", "--overwrite", "--dtype"):
        assert flag in proc.stdout


@pytest.mark.slow  # the tool as a child process imports torch (~3.5 CPU-s); the refusals themselves: test_bad_input_is_refused_before_heavy_work
def test_unwritable_output_folder_is_refused_in_one_line(tiny_moe_dir: Path, tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("not a folder")
    out = tmp_path / "afile" / "ckpt"
    proc = _run_cli("--hf-model-path", str(tiny_moe_dir), "--output-path", str(out))
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"[convert] error: --output-path {out}: {tmp_path / 'afile'} is a file, not a folder"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]


# A conversion whose checkpoint writers (megatron forks one per write bucket) hang: killed mid-write.
HANGING_WRITERS = """
import runpy, sys, time
from megatron.core.dist_checkpointing.strategies.filesystem_async import FileSystemWriterAsync
FileSystemWriterAsync.write_preloaded_data = staticmethod(lambda *args, **kwargs: time.sleep(3600))
sys.argv = [sys.argv[1], *sys.argv[2:]]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def _children(pid: int) -> list[int]:
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid and fields[0] != "Z":
            out.append(int(stat.parent.name))
    return out


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc; PR_SET_PDEATHSIG is Linux-only")
def test_conversion_killed_mid_write_leaves_no_writer_and_the_rerun_removes_the_partial(tiny_moe_dir: Path, tmp_path: Path) -> None:
    """kill -9 while the dist-checkpoint writers run: they die with the converter; the hidden
    partial folder stays until the next conversion into that folder removes it and succeeds."""
    out = tmp_path / "ckpt" / "tiny"
    argv = [sys.executable, "-c", HANGING_WRITERS, str(TOOL), "--hf-model-path", str(tiny_moe_dir), "--output-path", str(out)]
    proc = subprocess.Popen(argv, cwd=REPO, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    writers: list[int] = []
    deadline = time.time() + 600
    while not writers:
        assert proc.poll() is None, proc.stderr.read()[-3000:]
        assert time.time() < deadline, "the conversion never reached its checkpoint writers"
        time.sleep(0.2)
        if list(out.parent.glob(".tiny.tmp-*")):
            writers = _children(proc.pid)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    deadline = time.time() + 15
    while any(_alive(pid) for pid in writers) and time.time() < deadline:
        time.sleep(0.1)
    assert not [pid for pid in writers if _alive(pid)], f"checkpoint writers {writers} outlived the killed converter"
    partial = [p for p in out.parent.iterdir() if p.is_dir()]
    assert len(partial) == 1 and partial[0].name.startswith(".tiny.tmp-") and not out.exists()

    rerun = _run_cli("--hf-model-path", str(tiny_moe_dir), "--output-path", str(out), "--no-hash")
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert f"removed {partial[0]}" in rerun.stderr and "partial folder left by an interrupted write" in rerun.stderr
    assert sorted(p.name for p in out.parent.iterdir()) == ["tiny"] and (out / "metadata.json").is_file()


# ---- GPU: the same verification with the Transformer Engine spec in bf16 --------------------------------


@pytest.mark.gpu
def test_gpu_te_bf16_conversion_verifies(tiny_moe_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "te"
    proc = torchrun(TOOL, 1, *_convert_argv(tiny_moe_dir, out))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    meta = json.loads((out / "rlec_checkpoint.json").read_text())
    assert meta["layer_spec"] == "transformer_engine" and meta["dtype"] == "bfloat16"
    assert meta["verification"]["passed"] is True


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
def test_gpu_local_spec_conversion_verifies(tiny_moe_dir: Path, tmp_path: Path, dtype: str) -> None:
    """The local (non-TE) spec on CUDA: the model must sit on the GPU, where NCCL scatters mbridge's shards
    (it stayed on the CPU and the load failed: "No backend type associated with device type cpu")."""
    out = tmp_path / f"local_{dtype}"
    proc = torchrun(TOOL, 1, *_convert_argv(tiny_moe_dir, out, "--spec", "local", "--dtype", dtype))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    meta = json.loads((out / "rlec_checkpoint.json").read_text())
    assert meta["layer_spec"] == "local" and meta["verification"]["passed"] is True


@pytest.mark.gpu
def test_gpu_te_model_loads_a_checkpoint_written_on_the_cpu_path(tiny_moe_dir: Path, tmp_path: Path) -> None:
    """A checkpoint converted on the CPU path (local spec, gloo) loads into the TE model through
    verl's own ``load_mcore_dist_weights`` and verifies there (bf16 tolerances)."""
    out = tmp_path / "cpu_path"
    proc = torchrun(TOOL, 1, "--hf-model-path", str(tiny_moe_dir), "--output-path", str(out), env={"CUDA_VISIBLE_DEVICES": ""})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads((out / "rlec_checkpoint.json").read_text())["layer_spec"] == "local"
    (result,), _ = run_plan(1, [{"controls": {"hf": str(tiny_moe_dir), "ckpt": str(out)}}])
    assert result["resharded"]["passed"] is True
    assert result["wrong_mapping"]["passed"] is False
