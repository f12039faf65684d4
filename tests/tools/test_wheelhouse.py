"""tools/wheelhouse.sh / tools/wheelhouse.py and `tools/setup_gpu_env.sh --offline` on CPU, with tiny fake wheels made
here (never the real multi-GB GPU set): the manifest, the split into parts and their reassembly with checksums, the
refusal of a missing or damaged part by name, and an offline install refused before anything is written when the
wheels are for another Python, a wheel's tags do not fit, or the node has no CUDA (issue 58)."""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
WHEELHOUSE_SH, HELPER, SETUP = ROOT / "tools" / "wheelhouse.sh", ROOT / "tools" / "wheelhouse.py", ROOT / "tools" / "setup_gpu_env.sh"
HERE = f"{sys.version_info[0]}.{sys.version_info[1]}"
OTHER = "3.12" if HERE != "3.12" else "3.11"


def run(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(list(args), capture_output=True, text=True, timeout=120, cwd=ROOT,
                          env=os.environ | {"PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}", **env})


def helper(*args: str) -> subprocess.CompletedProcess:
    return run(sys.executable, str(HELPER), *args)


def fake_wheels(folder: Path, files: dict[str, int], requires: dict[str, list[str]] | None = None) -> dict[str, bytes]:
    """Tiny wheel archives: a .dist-info/METADATA (with ``requires[file]`` as Requires-Dist) and a payload of about
    ``size`` seeded random bytes, stored uncompressed."""
    import io
    import zipfile

    folder.mkdir(parents=True, exist_ok=True)
    out = {}
    for i, (file, size) in enumerate(files.items()):
        name, version = file.split("-")[:2]
        meta = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
        meta += "".join(f"Requires-Dist: {r}\n" for r in (requires or {}).get(file, []))
        payload = (hashlib.sha256(str(i).encode()).digest() * (size // 32 + 1))[:size]
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as archive:
            archive.writestr(f"{name}-{version}.dist-info/METADATA", meta)
            archive.writestr(f"{name}/payload.bin", payload)
        (folder / file).write_bytes(buffer.getvalue())
        out[file] = buffer.getvalue()
    return out


WHEELS = {"alpha-1.0-py3-none-any.whl": 30_000, "beta_pkg-2.3.4-py3-none-any.whl": 12_345, "gamma-0.1-py2.py3-none-any.whl": 777}


@pytest.fixture
def house(tmp_path: Path) -> Path:
    folder = tmp_path / "wheels"
    fake_wheels(folder, WHEELS)
    proc = helper("manifest", str(folder), "--python", HERE, "--missing", "flash-attn==2.8.3=sdist only")
    assert proc.returncode == 0, proc.stderr
    return folder


def test_manifest_lists_name_version_sha256_and_size_of_every_wheel(house: Path):
    manifest = json.loads((house / "wheelhouse.json").read_text())
    assert manifest["schema"] == "rlec-wheelhouse/1" and manifest["python"] == HERE
    rows = {w["file"]: w for w in manifest["wheels"]}
    assert set(rows) == set(WHEELS)
    beta = rows["beta_pkg-2.3.4-py3-none-any.whl"]
    data = (house / beta["file"]).read_bytes()
    assert (beta["name"], beta["version"], beta["bytes"]) == ("beta-pkg", "2.3.4", len(data))
    assert beta["sha256"] == hashlib.sha256(data).hexdigest()
    assert manifest["missing"] == [{"name": "flash-attn", "version": "2.8.3", "reason": "sdist only"}]


def test_manifest_refuses_two_wheels_of_one_project(tmp_path: Path):
    fake_wheels(tmp_path, {"alpha-1.0-py3-none-any.whl": 10, "alpha-1.1-py3-none-any.whl": 10})
    proc = helper("manifest", str(tmp_path), "--python", HERE)
    assert proc.returncode == 1 and "two wheels of alpha" in proc.stderr and not (tmp_path / "wheelhouse.json").exists()


def test_split_then_join_restores_the_wheelhouse_byte_for_byte(house: Path, tmp_path: Path):
    parts = tmp_path / "parts"
    proc = helper("split", str(house), "--out", str(parts), "--part-mib", str(10_000 / 2**20))  # 10,000-byte parts
    assert proc.returncode == 0, proc.stderr
    listing = json.loads((parts / "parts.json").read_text())
    files = sorted(p.name for p in parts.glob("wheelhouse.tar.part*"))
    assert [p["file"] for p in listing["parts"]] == files
    # a tar of 4 files (3 wheels + the manifest): > 43,122 bytes of payload alone, so at least 5 parts of 10,000 bytes
    assert len(files) >= 5 and all(p["bytes"] == 10_000 for p in listing["parts"][:-1]) and listing["parts"][-1]["bytes"] <= 10_000
    assert listing["total_bytes"] == sum(p["bytes"] for p in listing["parts"]) and listing["python"] == HERE
    for part in listing["parts"]:
        assert part["sha256"] == hashlib.sha256((parts / part["file"]).read_bytes()).hexdigest()
    assert (parts / "parts.sha256").read_text().splitlines()[0] == f"{listing['parts'][0]['sha256']}  {files[0]}"
    out = tmp_path / "joined"
    proc = helper("join", str(parts), "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    for name in [*WHEELS, "wheelhouse.json"]:
        assert (out / name).read_bytes() == (house / name).read_bytes()
    # deterministic: the same folder gives the same parts
    assert helper("split", str(house), "--out", str(tmp_path / "again"), "--part-mib", str(10_000 / 2**20)).returncode == 0
    assert json.loads((tmp_path / "again" / "parts.json").read_text())["sha256"] == listing["sha256"]


@pytest.mark.parametrize("damage", ["missing", "flipped", "truncated"])
def test_join_refuses_a_missing_or_damaged_part_by_name_and_writes_nothing(house: Path, tmp_path: Path, damage: str):
    parts = tmp_path / "parts"
    assert helper("split", str(house), "--out", str(parts), "--part-mib", str(10_000 / 2**20)).returncode == 0
    victim = parts / "wheelhouse.tar.part002"
    if damage == "missing":
        victim.unlink()
        expected = "part wheelhouse.tar.part002 is missing"
    elif damage == "flipped":
        data = bytearray(victim.read_bytes())
        data[100] ^= 0xFF
        victim.write_bytes(bytes(data))
        expected = "part wheelhouse.tar.part002 is damaged: sha256"
    else:
        victim.write_bytes(victim.read_bytes()[:-1])
        expected = "part wheelhouse.tar.part002 is damaged: 9999 bytes, parts.json says 10000"
    out = tmp_path / "joined"
    proc = helper("join", str(parts), "--out", str(out))
    assert proc.returncode == 1 and expected in proc.stderr, proc.stderr
    assert not out.exists()


def test_verify_names_a_damaged_or_unlisted_wheel(house: Path):
    assert helper("verify", str(house)).returncode == 0
    (house / "alpha-1.0-py3-none-any.whl").write_bytes(b"x" * (house / "alpha-1.0-py3-none-any.whl").stat().st_size)
    proc = helper("verify", str(house))
    assert proc.returncode == 1 and "alpha-1.0-py3-none-any.whl: damaged" in proc.stderr


def test_offline_install_refuses_another_python_before_writing(tmp_path: Path):
    parts, target = tmp_path / "parts", tmp_path / "site"
    folder = tmp_path / "wheels"
    fake_wheels(folder, WHEELS)
    assert helper("manifest", str(folder), "--python", OTHER).returncode == 0
    for source in (folder, parts):
        if source == parts:
            assert helper("split", str(folder), "--out", str(parts)).returncode == 0
        proc = run("bash", str(SETUP), "--offline", str(source), "--target", str(target), PYTHON=sys.executable)
        assert proc.returncode == 1, proc.stdout + proc.stderr
        assert f"the wheels are for Python {OTHER}; this Python ({sys.executable}) is {HERE}" in proc.stderr
        assert not target.exists() and not Path(f"{target}.wheels").exists()


def test_offline_install_refuses_a_wheel_whose_tags_do_not_fit_this_python(tmp_path: Path):
    folder = tmp_path / "wheels"
    fake_wheels(folder, {**WHEELS, "native-1.0-cp39-cp39-manylinux_2_28_x86_64.whl": 64})
    assert helper("manifest", str(folder), "--python", HERE).returncode == 0
    proc = helper("plan", str(folder))
    assert proc.returncode == 1 and "native-1.0-cp39-cp39-manylinux_2_28_x86_64.whl: none of its tags (cp39-cp39-" in proc.stderr


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="this machine has an NVIDIA driver: the refusal is for nodes without")
def test_offline_install_on_a_node_without_cuda_is_refused_before_anything_is_written(house: Path, tmp_path: Path):
    target, parts = tmp_path / "site", tmp_path / "parts"
    assert helper("split", str(house), "--out", str(parts)).returncode == 0
    for source in (house, parts):
        proc = run("bash", str(SETUP), "--offline", str(source), "--target", str(target), PYTHON=sys.executable)
        assert proc.returncode == 1 and "no NVIDIA driver on this node" in proc.stderr and "nothing installed" in proc.stderr
        assert not target.exists() and not Path(f"{target}.wheels").exists()  # the parts were not even joined


def test_offline_check_prints_the_plan_keeps_the_nodes_own_and_installs_nothing(tmp_path: Path):
    folder, target = tmp_path / "wheels", tmp_path / "site"
    pytest_version = importlib.metadata.version("pytest")
    torch_version = importlib.metadata.version("torch").split("+")[0]
    fake_wheels(folder, {**WHEELS, f"pytest-{pytest_version}-py3-none-any.whl": 50,
                         f"torch-{torch_version}.post9-py3-none-any.whl": 50})
    assert helper("manifest", str(folder), "--python", HERE).returncode == 0
    proc = run("bash", str(SETUP), "--offline", str(folder), "--target", str(target), "--check", PYTHON=sys.executable)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "install: 3" in out and "alpha-1.0-py3-none-any.whl" in out
    assert f"node has it: 1\n  pytest {pytest_version} (node: {pytest_version})" in out
    assert "the node's own kept: 1\n  torch " in out  # another version, but the node's torch stays
    assert "would install 3 wheel(s)" in out and not target.exists()


def test_wheelhouse_script_parses_explains_itself_and_refuses_unknown_commands():
    assert run("bash", "-n", str(WHEELHOUSE_SH)).returncode == 0
    text = WHEELHOUSE_SH.read_text()
    assert text.startswith("#!/usr/bin/env bash\n") and "set -euo pipefail" in text
    helped = run("bash", str(WHEELHOUSE_SH), "--help")
    assert helped.returncode == 0 and "download" in helped.stdout and "--part-mib" in helped.stdout
    assert run("bash", str(WHEELHOUSE_SH), "bogus").returncode == 2
    assert run("bash", str(WHEELHOUSE_SH), "download", "--python", "twelve").returncode == 2


SMOKE = ROOT / "tools" / "gpu_smoke.sh"


def test_gpu_smoke_offline_dry_run_checks_the_wheelhouse_and_prints_every_step(house: Path, tmp_path: Path):
    site, out = tmp_path / "site", tmp_path / "out"
    proc = run("bash", str(SMOKE), "--offline", str(house), "--dry-run", PYTHON=sys.executable, GPU_SITE=str(site), OUT=str(out))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = {line.split(" | ")[0].lstrip("| "): line for line in proc.stdout.splitlines() if line.startswith("| ")}
    assert list(rows)[1:] == ["install", "gpu-tests", "inputs", "convert", "train-bf16", "train-resume", "router-replay", "throughput"]
    assert "install: 3" in proc.stdout and "would install 3 wheel(s)" in proc.stdout
    assert "planned (limit 240 s)" in rows["install"] and f"--offline {house} --target {site}" in rows["install"]
    assert '-k not _te_ and not vllm' in rows["gpu-tests"]
    assert "--spec local --dtype bf16 --verify" in rows["convert"]
    train = rows["train-bf16"]
    assert "actor_rollout_ref.rollout.name=rlec_hf" in train and "TOTAL_TRAINING_STEPS=2" in train and "RESUME=auto" in train
    # no Transformer Engine here: the local spec in verl's engine, in the launcher's environment and every Ray worker's
    assert "RLEC_LAYER_SPEC=local " in train and "++ray_kwargs.ray_init.runtime_env.env_vars.RLEC_LAYER_SPEC=local" in train
    assert "actor_rollout_ref.actor.megatron.use_remove_padding=false" in train
    assert "will be skipped: verl 0.9.1 replays routes on packed sequences" in rows["router-replay"]
    assert "--sections update --spec local --layers 2 --precisions bf16" in rows["throughput"]
    assert not site.exists()


def test_gpu_smoke_offline_refuses_a_damaged_part_before_anything_else(house: Path, tmp_path: Path):
    parts = tmp_path / "parts"
    assert helper("split", str(house), "--out", str(parts), "--part-mib", str(10_000 / 2**20)).returncode == 0
    (parts / "wheelhouse.tar.part001").write_bytes(b"\0" * 10_000)
    proc = run("bash", str(SMOKE), "--offline", str(parts), "--dry-run", PYTHON=sys.executable, GPU_SITE=str(tmp_path / "site"),
               OUT=str(tmp_path / "out"))
    assert proc.returncode == 1 and "part wheelhouse.tar.part001 is damaged" in proc.stderr
    assert "| install |" not in proc.stdout


@pytest.mark.parametrize("args", [["--offline", "x", "--check"], ["--dry-run"], ["--offline", "x", "--gpus", "8"], ["--offline"]])
def test_gpu_smoke_offline_argument_rules(args):
    assert run("bash", str(SMOKE), *args).returncode == 2


LOCK = """\
# This file was autogenerated by uv
fastapi==0.136.3
    # via
    #   -r requirements-gpu.txt
    #   vllm
torch==2.11.0
    # via
    #   -r requirements-gpu.txt
    #   vllm
vllm==0.24.0
    # via -r requirements-gpu.txt
xgrammar==0.2.3
    # via vllm
tilelang==0.1.9
    # via
    #   vllm
    #   xgrammar
jinja2==3.1.6
    # via
    #   fastapi
    #   torch
nvidia-nccl-cu13==2.28.9
    # via torch
"""


def test_pins_skip_a_package_and_what_only_it_needs(tmp_path: Path):
    from importlib.util import module_from_spec, spec_from_file_location

    spec = spec_from_file_location("wheelhouse_helper", HELPER)
    module = module_from_spec(spec)
    spec.loader.exec_module(module)
    every = ["fastapi==0.136.3", "torch==2.11.0", "vllm==0.24.0", "xgrammar==0.2.3", "tilelang==0.1.9", "jinja2==3.1.6",
             "nvidia-nccl-cu13==2.28.9"]
    assert module.lock_pins(LOCK) == every
    # vLLM out: xgrammar and tilelang (only vLLM's, also through xgrammar) go; fastapi and torch are asked for directly
    assert module.lock_pins(LOCK, ["vllm"]) == ["fastapi==0.136.3", "torch==2.11.0", "jinja2==3.1.6", "nvidia-nccl-cu13==2.28.9"]
    # the node's torch stack out too: NCCL (torch's only) goes, jinja2 stays for fastapi
    assert module.lock_pins(LOCK, ["vllm", "torch", "nvidia-*"]) == ["fastapi==0.136.3", "jinja2==3.1.6"]
    lock = tmp_path / "x.lock"
    lock.write_text(LOCK)
    proc = helper("pins", str(lock), "--skip", "vllm,torch")
    assert proc.returncode == 0 and proc.stdout.split() == ["fastapi==0.136.3", "jinja2==3.1.6"]


def test_manifest_keep_missing_drops_the_entries_a_build_filled(house: Path):
    """wheelhouse.sh build-gpu rewrites the manifest: a built wheel leaves the no-wheel list, the others stay."""
    assert helper("manifest", str(house), "--python", HERE, "--missing", "flash-attn==2.8.3=sdist only",
                  "--missing", "transformer-engine-torch==2.11.0=sdist only").returncode == 0
    fake_wheels(house, {"flash_attn-2.8.3-cp312-cp312-linux_x86_64.whl": 100})
    assert helper("manifest", str(house), "--python", HERE, "--keep-missing").returncode == 0
    manifest = json.loads((house / "wheelhouse.json").read_text())
    assert [m["name"] for m in manifest["missing"]] == ["transformer-engine-torch"]
    assert "flash_attn-2.8.3-cp312-cp312-linux_x86_64.whl" in {w["file"] for w in manifest["wheels"]}


def test_offline_plan_refuses_a_requirement_that_is_neither_carried_nor_on_the_node(tmp_path: Path):
    """--no-deps resolves nothing: everything a wheel to install needs must be carried or already on the node."""
    folder = tmp_path / "wheels"
    pytest_version = importlib.metadata.version("pytest")
    requires = {"alpha-1.0-py3-none-any.whl": ["beta_pkg>=2", f"pytest=={pytest_version}", "gamma<1; python_version < '3'",
                                              "nothere>=1; extra == 'dev'"]}
    fake_wheels(folder, WHEELS, requires)
    assert helper("manifest", str(folder), "--python", HERE).returncode == 0
    assert helper("plan", str(folder)).returncode == 0  # carried (beta 2.3.4), on the node (pytest), markers false
    requires["alpha-1.0-py3-none-any.whl"] += ["zzz-not-installed-anywhere>=1", "beta-pkg<2"]
    fake_wheels(folder, WHEELS, requires)
    assert helper("manifest", str(folder), "--python", HERE).returncode == 0
    proc = helper("plan", str(folder))
    assert proc.returncode == 1, proc.stdout
    assert "alpha-1.0-py3-none-any.whl needs zzz-not-installed-anywhere>=1: not in the wheelhouse and not installed here" in proc.stderr
    assert "2 unmet requirement(s): alpha-1.0-py3-none-any.whl needs beta-pkg<2: the wheelhouse has beta-pkg 2.3.4" in proc.stderr
    allowed = helper("plan", str(folder), "--allow-unmet")
    assert allowed.returncode == 0 and "unmet requirements (--allow-unmet): 2" in allowed.stdout
