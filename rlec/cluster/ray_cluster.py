"""One Ray cluster shared by several CPU launches (an experiment's arm-seeds), started and stopped by their caller.

A CPU launch (``tools/run_megatron_rlec.sh`` without a GPU) otherwise starts a Ray head of its own in verl's
``ray.init`` (the GCS, the raylet, two idle default workers) and stops it at its end: 4.3 s of every launch on a
2-core box at load 3-9, 24 s at load 24-36 (measured 2026-12-07, docs/experiments.md "The launch"). With
``RAY_ADDRESS`` set, the launcher connects verl's driver to an existing cluster instead (it then passes no
``num_cpus`` / ``num_gpus``: Ray refuses them when connecting); :func:`shared_cluster` starts that cluster once in
the calling process with the logical resources a CPU launch declares (:func:`cpu_launch_resources`) and stops it
when the block ends, also on Ctrl-C or an error: nothing of it is left running.

Each launch is still its own Ray job (a new driver, its own anonymous namespace, actors and placement groups), so it
computes what a launch with its own cluster computes (``tests/experiments/test_quick_rlec.py`` compares the metrics);
Ray kills a job's actors when its driver exits. The raylet and GCS do not carry a launch's ``RLEC_RUN_FOLDER``; the
job's workers still do (the launcher hands it to them through ``ray_init.runtime_env``), so a rerun into the same
folder still finds and waits for what a killed launch left behind (:func:`rlec.rules.resume.launch_processes`).
"""

from __future__ import annotations

import contextlib
import os
from typing import Iterator

__all__ = ["ADDRESS_ENV", "cpu_launch_resources", "shared_cluster"]

ADDRESS_ENV = "RAY_ADDRESS"  # Ray's own variable: ray.init() without an address connects to it


def cpu_launch_resources(nproc: int) -> tuple[int, int]:
    """The logical ``(CPUs, GPUs)`` a CPU launch of ``nproc`` Megatron worker processes declares to Ray.

    The launcher's rule (``tools/run_megatron_rlec.sh``, ``NPROC``): 3 CPUs per worker bundle (verl's
    ``max_colocate_count``), TransferQueue's controller and one storage unit (2), actor creation and headroom (3);
    one logical GPU per worker process. ``nproc`` = 1 gives (8, 1), ``megatron_configs/layout/cpu.yaml``'s values.

    Raises:
        ValueError: ``nproc`` < 1.
    """
    if nproc < 1:
        raise ValueError(f"cpu_launch_resources: NPROC must be >= 1, got {nproc}")
    return 5 + 3 * nproc, nproc


@contextlib.contextmanager
def shared_cluster(num_cpus: int, num_gpus: int) -> Iterator[str]:
    """A local Ray cluster for the block: yields its GCS address (the value launches get as ``RAY_ADDRESS``).

    Started in this process (``ray.init``, no dashboard: its metrics agent times out on a loaded 2-core box), so this
    process owns it: ``ray.shutdown()`` when the block ends, however it ends, stops the GCS, the raylet and every
    worker (Ray's reaper does the same if this process is killed). Inside the block ``RAY_ADDRESS`` is not set in this
    process's environment: pass the address to each launch explicitly.

    Raises:
        RuntimeError: Ray is already initialised in this process (another cluster would be stopped with this one).
    """
    import ray

    if ray.is_initialized():
        raise RuntimeError("shared_cluster: Ray is already initialised in this process")
    from rlec.megatron.compat import ray_start_retried, ray_start_timeout_needed

    retried = ray_start_retried(say=lambda line: print(f"rlec: {line}", flush=True)) \
        if ray_start_timeout_needed() else contextlib.nullcontext()  # the raylet's fixed 30 s wait, on a loaded box
    saved = os.environ.pop(ADDRESS_ENV, None)  # start a new cluster, never connect to one named by the caller's env
    try:
        with retried:
            context = ray.init(num_cpus=num_cpus, num_gpus=num_gpus, include_dashboard=False, log_to_driver=False)
    finally:
        if saved is not None:
            os.environ[ADDRESS_ENV] = saved
    try:
        yield str(context.address_info["gcs_address"])
    finally:
        ray.shutdown()
