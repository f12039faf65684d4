"""What rlec's GPU plugins know of the CPU wing (:mod:`rlec.cpu`): names and one seed rule, no CPU code.

The CPU wing (verl's platform ``cpu``, its engine and shims, the ``rlec_hf`` rollout server, the scripted answers) is
imported only in a process that runs verl on CPU (``VERL_USE_EXTERNAL_MODULES=rlec.cpu,rlec.verl_plugin``, set by
``megatron_configs/layout/cpu.yaml`` and ``tools/run_megatron_rlec.sh``); ``rlec.verl_plugin`` never imports it
(import-linter contract "GPU plugins never import the CPU wing"). What both sides must agree on lives here:

- the platform switch (:data:`PLATFORM_ENV` = ``cpu``, :func:`cpu_requested`), which the local-spec bridge
  (:mod:`rlec.verl_plugin.local_spec`) reads to stand aside on the CPU platform;
- the rollout server's registered name (:data:`ROLLOUT_NAME`), its Ray actor names (:func:`server_name`) and the
  per-request sampling seed (:func:`request_seed`), which the probe set (:mod:`rlec.verl_plugin.probe`) uses to ask
  the server for its measurement.
"""

from __future__ import annotations

import hashlib
import os
from typing import Any

__all__ = ["PLATFORM_ENV", "PLATFORM_NAME", "ROLLOUT_NAME", "cpu_requested", "request_seed", "server_name"]

PLATFORM_NAME = "cpu"
PLATFORM_ENV = "VERL_PLATFORM"
ROLLOUT_NAME = "rlec_hf"
"""``actor_rollout_ref.rollout.name`` of the CPU rollout server (:class:`rlec.cpu.rollout_server.HFRolloutServer`)."""


def cpu_requested() -> bool:
    """Whether this process should run verl on CPU: ``VERL_PLATFORM=cpu`` and no CUDA device."""
    if os.environ.get(PLATFORM_ENV, "").strip().lower() != PLATFORM_NAME:
        return False
    import torch

    return not torch.cuda.is_available()


def server_name(replica_rank: int) -> str:
    """Ray actor name of replica ``replica_rank``'s server (how the trainer workers find it)."""
    return f"rlec_hf_server_{replica_rank}"


def request_seed(data_seed: Any, global_steps: Any, sample: Any, session: Any) -> int:
    """The sampling seed of one request: a hash of (data seed, global step, the prompt's sample index, session).

    The same sample of the same step gets the same seed in every run (a resumed one included), whatever
    the order the requests arrive in or the batch they are generated in; two samples never share one
    unless all four agree. A value in [0, 2**63).
    """
    text = f"{data_seed}/{global_steps}/{sample}/{session}"
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big") >> 1
