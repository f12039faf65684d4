"""The GPU plugins import and register without the CPU wing (issue 59 item 3).

The CPU emulation is one wing, :mod:`rlec.cpu`, loaded only on the CPU platform (``VERL_USE_EXTERNAL_MODULES=rlec.cpu,
rlec.verl_plugin`` in ``layout/cpu.yaml``). Before the issue ``rlec.verl_plugin`` imported the CPU backend on import,
E3's agent loop inherited the CPU run's scripted answers and the mismatch alarm imported the induced mismatch. Here a
fresh interpreter makes ``rlec.cpu`` unimportable (``sys.modules["rlec.cpu"] = None``: any import of it raises), imports
verl as a GPU worker does (``VERL_USE_EXTERNAL_MODULES=rlec.verl_plugin``, recipe.yaml's), every module of
``rlec.verl_plugin`` and ``rlec.megatron``, and the verl modules rlec's plugin registers with (reward manager, trainers,
estimator, E3's agent loop), and checks that E3's registered loop is the plain one. The static side is the
import-linter contract "GPU plugins never import the CPU wing" (pyproject.toml).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

CHILD = textwrap.dedent("""
    import importlib, json, pkgutil, sys
    sys.modules["rlec.cpu"] = None  # the CPU wing made unimportable: "import rlec.cpu..." raises ModuleNotFoundError
    import verl  # imports VERL_USE_EXTERNAL_MODULES=rlec.verl_plugin, as every Ray worker of a GPU launch
    # the verl modules whose import registers rlec's classes (the plugin's post-import hooks), first as in a worker
    import verl.experimental.reward_loop.reward_manager, verl.trainer.ppo.v1, verl.trainer.ppo.core_algos
    import verl.experimental.agent_loop
    import rlec.verl_plugin, rlec.megatron
    modules = []
    for package in (rlec.verl_plugin, rlec.megatron):
        for info in pkgutil.iter_modules(package.__path__):
            modules.append(importlib.import_module(f"{package.__name__}.{info.name}").__name__)
    from verl.experimental.agent_loop.agent_loop import _agent_loop_registry
    from verl.trainer.ppo.v1 import get_trainer_cls
    from rlec.verl_plugin import E3AgentLoop, mismatch
    print("RESULT " + json.dumps({
        "modules": modules,
        "wing_loaded": sorted(m for m, v in sys.modules.items() if m.startswith("rlec.cpu") and v is not None),
        "e3_target": _agent_loop_registry["rlec_e3_agent"]["_target_"],
        "scripted_registered": "rlec_scripted_agent" in _agent_loop_registry,
        "e3_bases": [c.__name__ for c in E3AgentLoop.__mro__],
        "trainer": get_trainer_cls("rlec_sync").__name__,
        "step_metrics": len(mismatch.STEP_METRICS),
    }))
""")


@pytest.mark.slow  # a fresh interpreter importing verl's trainer and agent loop, Megatron and mbridge: ~20 CPU-s
def test_the_gpu_plugins_import_and_register_with_the_cpu_wing_unimportable():
    env = {k: v for k, v in os.environ.items() if k not in ("VERL_PLATFORM", "RLEC_LAYER_SPEC")}
    env |= {"VERL_USE_EXTERNAL_MODULES": "rlec.verl_plugin", "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1",
            "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=600, cwd=ROOT, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.split("RESULT ", 1)[1])
    # every module of both GPU packages imported (the three of them that used to import the wing among them)
    for module in ("rlec.verl_plugin.e3", "rlec.verl_plugin.mismatch", "rlec.verl_plugin.probe", "rlec.verl_plugin.trainers",
                   "rlec.verl_plugin.local_spec", "rlec.megatron.parallel", "rlec.megatron.model", "rlec.megatron.compat"):
        assert module in out["modules"], module
    assert out["wing_loaded"] == []
    # E3's loop is the plain one: no scripted answers on a GPU; the CPU-only loop is not registered
    assert out["e3_target"] == "rlec.verl_plugin.e3.E3AgentLoop"
    assert "ScriptedAnswersMixin" not in out["e3_bases"] and not out["scripted_registered"]
    assert out["trainer"] == "RLECSyncTrainer"
    assert out["step_metrics"] == 0  # no rollout backend adds metrics to the mismatch alarm
