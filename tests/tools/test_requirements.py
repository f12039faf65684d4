"""The CPU set (requirements.txt), the GPU set (requirements-gpu.txt) and its locks agree, and the
GPU set resolves: the fast tests read the files; the slow one re-resolves from the registry."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LOCKS = {"3.12": ROOT / "requirements-gpu.lock", "3.11": ROOT / "requirements-gpu-py311.lock"}
DIFFERS = "# differs from CPU:"
DOCUMENTED_DIFFERENCES = {"torch", "fastapi", "numpy"}  # named in requirements-gpu.txt's header
PLATFORM = "x86_64-manylinux_2_28"
OFFLINE_SIGNS = ("dns error", "error sending request", "Failed to fetch", "client error (Connect)",
                 "Could not connect", "failed to lookup address", "operation timed out", "invalid peer certificate")


def pins(path: Path) -> dict[str, tuple[str, bool]]:
    """``{normalised name: (version, marked as differing from the CPU set)}`` of ``name==version`` lines."""
    out = {}
    for raw in path.read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        m = re.match(r"([A-Za-z0-9_.\-]+)(\[[^\]]*\])?==(\S+)$", line)
        if m:
            out[re.sub(r"[-_.]+", "-", m.group(1)).lower()] = (m.group(3), DIFFERS in raw)
    return out


def test_cpu_and_gpu_sets_agree_on_every_shared_pin_except_the_documented_ones() -> None:
    cpu, gpu = pins(ROOT / "requirements.txt"), pins(ROOT / "requirements-gpu.txt")
    shared = cpu.keys() & gpu.keys()
    assert {"verl", "transformers", "megatron-core", "mbridge", "math-verify", "uv"} <= shared
    differing = {name for name in shared if cpu[name][0] != gpu[name][0]}
    marked = {name for name, (_, mark) in gpu.items() if mark}
    assert differing == marked == DOCUMENTED_DIFFERENCES, (differing, marked)
    # every CPU pin is also pinned on the GPU side, so no shared package floats there
    assert set(cpu) - set(gpu) == set(), set(cpu) - set(gpu)


@pytest.mark.parametrize("python", sorted(LOCKS))
def test_locks_hold_the_gpu_pins_and_the_cpu_pins_they_share(python) -> None:
    lock, gpu, cpu = pins(LOCKS[python]), pins(ROOT / "requirements-gpu.txt"), pins(ROOT / "requirements.txt")
    header = LOCKS[python].read_text().splitlines()[:3]
    assert any(f"--python-platform {PLATFORM} --python-version {python}" in line for line in header), header
    for name, (version, _) in gpu.items():
        assert lock.get(name, ("missing",))[0] == version, (name, version, lock.get(name))
    for name, (version, _) in cpu.items():
        if name in lock and name not in DOCUMENTED_DIFFERENCES:
            assert lock[name][0] == version, (name, version, lock[name])
    assert "transformer-engine-cu13" in lock and "nvidia-cudnn-cu13" in lock and "nvidia-nccl-cu13" in lock


def _uv(*args: str, timeout: int = 900) -> subprocess.CompletedProcess:
    import os

    env = os.environ | {"UV_PYTHON_DOWNLOADS": "never"}  # keeps the machine's certificate and proxy settings
    return subprocess.run([sys.executable, "-m", "uv", *args], capture_output=True, text=True, timeout=timeout, env=env,
                          cwd=ROOT)


@pytest.mark.slow
@pytest.mark.parametrize("python", sorted(LOCKS))
def test_gpu_set_and_its_lock_resolve_from_the_registry(tmp_path, python) -> None:
    """`uv pip compile` resolves without installing: a conflict (like fastapi 0.165 against vLLM
    0.24's <0.137) fails here; the lock, resolved on its own, must reproduce itself exactly."""
    fresh = _uv("pip", "compile", "requirements-gpu.txt", "--python-platform", PLATFORM, "--python-version", python,
                "--no-header", "-q", "-o", str(tmp_path / "fresh.txt"))
    if fresh.returncode and any(sign in fresh.stderr for sign in OFFLINE_SIGNS):
        pytest.skip(f"the package registry is unreachable: {fresh.stderr.strip().splitlines()[-1]}")
    assert fresh.returncode == 0, fresh.stderr[-3000:]
    locked = _uv("pip", "compile", str(LOCKS[python]), "--python-platform", PLATFORM, "--python-version", python,
                 "--no-header", "-q", "-o", str(tmp_path / "locked.txt"))
    assert locked.returncode == 0, locked.stderr[-3000:]
    assert {k: v for k, (v, _) in pins(tmp_path / "locked.txt").items()} == {
        k: v for k, (v, _) in pins(LOCKS[python]).items()}
    fresh_pins = pins(tmp_path / "fresh.txt")
    for name, (version, _) in pins(ROOT / "requirements-gpu.txt").items():
        assert fresh_pins[name][0] == version, name
