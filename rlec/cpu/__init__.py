"""The CPU wing: everything that exists only to run verl 0.9.1's own trainer on a machine without CUDA.

Loaded only on the CPU platform, as a second verl external module before rlec's plugin::

    VERL_USE_EXTERNAL_MODULES=rlec.cpu,rlec.verl_plugin

which ``megatron_configs/layout/cpu.yaml`` (Ray's runtime environment) and ``tools/run_megatron_rlec.sh`` (its shell
and the Ray overrides, ``TRAINER=verl`` on a machine without CUDA) set; a GPU launch names ``rlec.verl_plugin`` only.
The GPU plugins (:mod:`rlec.verl_plugin`, its agent loops, :mod:`rlec.megatron`) import nothing from here
(import-linter contract "GPU plugins never import the CPU wing"; ``tests/verl_plugin/test_gpu_without_cpu_wing.py``
imports them with this package unimportable); the wing imports them. The one exception: rlec's own Megatron processes
(the converter, the update benchmark) load :mod:`rlec.cpu.megatron_core` in
:func:`rlec.megatron.parallel.init_parallel`, and only when CUDA is absent.

The rooms:

- :mod:`rlec.cpu.platform`: verl platform ``cpu`` (torch CPU tensors, gloo) and verl's Megatron engines for device ``cpu``;
- :mod:`rlec.cpu.verl_shims`: the shims of verl and mbridge, :func:`enable_cpu` (platform, engines and each shim when
  the process imports its module), with :mod:`rlec.cpu.padded_forward` (the three of them that run verl's Megatron
  forward on padded batches) and :mod:`rlec.cpu.bshd_padding` (that forward's padding without a loop over the rows);
- :mod:`rlec.cpu.megatron_core`: megatron-core's CPU shims;
- :mod:`rlec.cpu.rollout_server`: the rollout ``rlec_hf`` (transformers behind verl's rollout-server interface), with
  :mod:`rlec.cpu.rollout_scores` (its teacher-forced log-probs, routes and entropies);
- :mod:`rlec.cpu.agent_loops`: the CPU run's agent loops (scripted answers, per-request seeds): ``rlec_scripted_agent``
  and the CPU variant of E3's ``rlec_e3_agent``;
- :mod:`rlec.cpu.induced_mismatch`: the induced train-inference mismatch (``rlec.cpu.rollout_weight_noise``) and the
  router disagreement it reports.

``docs/cpu.md`` lists every shim in one table, with those that change how verl runs rather than which device it runs on.

On import (every Ray process of a CPU launch): :func:`enable_cpu` (nothing without ``VERL_PLATFORM=cpu`` or with
CUDA), the ``rlec_hf`` rollout registered, and, each when the process imports the module concerned (a ``wrapt``
post-import hook), the agent loops (on ``verl.experimental.agent_loop``) and the router-disagreement metric (on
:mod:`rlec.verl_plugin.mismatch`).
"""

from __future__ import annotations

import importlib
from typing import Any

import wrapt

# first: verl's modules ask for the platform at import time
from rlec.cpu.verl_shims import enable_cpu

enable_cpu()

from rlec.cpu.rollout_server import register_rollout  # noqa: E402

AGENT_LOOPS = "rlec.cpu.agent_loops"

__all__ = ["AGENT_LOOPS", "enable_cpu"]


def _register_step_metrics(mismatch: Any) -> None:
    from rlec.cpu.induced_mismatch import step_router_disagreement

    if step_router_disagreement not in mismatch.STEP_METRICS:
        mismatch.STEP_METRICS.append(step_router_disagreement)


register_rollout()
# after rlec.verl_plugin.e3's registration of rlec_e3_agent (agent_loops imports it first), which it replaces here
wrapt.register_post_import_hook(lambda _module: importlib.import_module(AGENT_LOOPS), "verl.experimental.agent_loop")
wrapt.register_post_import_hook(_register_step_metrics, "rlec.verl_plugin.mismatch")
