"""The public API of rlec.megatron resolves to functions and classes, lazily (no Megatron import)."""

from __future__ import annotations

import importlib
import subprocess
import sys
import types
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_every_exported_name_is_a_function_or_class_even_after_submodule_imports() -> None:
    import rlec.megatron as api

    for module in ("parallel", "model", "hf_sync", "logprobs", "training", "checkpoint", "verify", "bridge", "preflight", "compat"):
        importlib.import_module(f"rlec.megatron.{module}")
    for name in api.__all__:
        value = getattr(api, name)
        assert not isinstance(value, types.ModuleType), f"rlec.megatron.{name} resolves to a module"
        assert callable(value), name


def test_importing_the_api_does_not_import_megatron() -> None:
    code = "import sys, rlec.megatron; from rlec.megatron import train_step, build_model; print('megatron' in sys.modules)"
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "False"
