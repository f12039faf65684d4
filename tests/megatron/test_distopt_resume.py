"""A resume with Megatron's distributed optimizer on CPU continues Adam exactly (issue 31 item 4, update side).

megatron-core 0.16.1's ``DistributedOptimizer.load_state_dict`` without Apex / TE hands every parameter's state
one shared ``step`` tensor; torch's Adam(W) advances each parameter's counter in place, so the shared one grew by
the number of parameters per step and a resumed run's updates left the uninterrupted run's (verl's trainer on
CPU: step 2's ``actor/grad_norm`` 0.0024945 vs 0.0024838). The shim ``distributed_optimizer_shared_step``
(``rlec.megatron.compat``) gives each parameter its own copy. And the counter's value: the per-parameter ``step`` is
saved as a ``LocalNonpersistentObject``, so the load's parameter-state copy put the fresh optimizer's own counter
(1, from the dummy init that shim ``distributed_optimizer_load`` runs) over the checkpoint's (kept in param_groups):
exact only for a checkpoint taken after ONE optimizer step, which is what this check did until 2026-12-03; verl's CPU
layout takes two per trainer step (step 2's ``actor/grad_norm`` 0.0024747 vs 0.0024838 after the shared-step fix).
Shim ``distributed_optimizer_step_value`` restores the checkpoint's counter. One plain process
(``megatron_checks.py`` plan ``distopt_resume``): two steps, checkpoint, a fresh model + optimizer loaded from it,
one more step on both.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # a fresh interpreter building two tiny Megatron models (~15 CPU-s)

REPO = Path(__file__).resolve().parents[2]
CHECKS = REPO / "tests" / "megatron" / "megatron_checks.py"
RESULT_PREFIX = "RESULT_JSON "


def test_a_resumed_distributed_optimizer_steps_as_the_uninterrupted_one(tiny_moe_dir, tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    env.update(OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONPATH=str(REPO), PYTHONWARNINGS="ignore")
    plan = [{"distopt_resume": {"hf": str(tiny_moe_dir), "out": str(tmp_path / "ckpt")}}]
    proc = subprocess.run([sys.executable, str(CHECKS), json.dumps(plan)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=900)
    lines = [line for line in proc.stdout.splitlines() if line.startswith(RESULT_PREFIX)]
    assert proc.returncode == 0 and lines, f"rc={proc.returncode}\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    (result,) = json.loads(lines[-1][len(RESULT_PREFIX):])
    assert result["parameters"] > 1, result  # a shared counter needs more than one parameter to show
    assert result["steps"] == [3.0], result  # three optimizer steps, one counter value per parameter
    # the checkpoint's counter (2 steps); without distributed_optimizer_step_value: 1, the fresh optimizer's own
    assert result["steps_loaded"] == [2.0], result
    # one counter per parameter, advanced once: distributed_optimizer_step_value gives each its own tensor (which also
    # covers distributed_optimizer_shared_step's case whenever the checkpoint's param_groups hold the step, as here)
    assert result["steps_resumed"] == [3.0], result
    assert result["weight_max_diff"] == 0.0, result
