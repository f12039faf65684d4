"""rlec.cluster.ray_cluster: the logical resources a CPU launch declares, and the cluster an experiment's launches share
(started once, reachable by its address, stopped with nothing left running however the block ends)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from rlec.cluster.ray_cluster import cpu_launch_resources, shared_cluster

REPO = Path(__file__).resolve().parents[2]


def test_a_cpu_launch_declares_3_cpus_per_worker_plus_5_and_a_gpu_per_worker() -> None:
    ray_init = yaml.safe_load((REPO / "megatron_configs" / "layout" / "cpu.yaml").read_text())["ray_kwargs"]["ray_init"]
    assert cpu_launch_resources(1) == (ray_init["num_cpus"], ray_init["num_gpus"]) == (8, 1)
    assert cpu_launch_resources(4) == (17, 4)  # 3 x 4 worker bundles + TransferQueue 2 + creation and headroom 3
    with pytest.raises(ValueError, match="NPROC must be >= 1, got 0"):
        cpu_launch_resources(0)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.slow  # starts Ray (a few seconds; the suite counts Ray starts in unmarked tests)
def test_the_shared_cluster_serves_a_second_driver_and_is_gone_after_ctrl_c() -> None:
    """A launch connects by the address (as verl's ray.init does with RAY_ADDRESS set) and sees the declared resources;
    a KeyboardInterrupt inside the block stops the GCS, the raylet and the rest: no process of the cluster survives."""
    import ray

    with pytest.raises(KeyboardInterrupt):
        with shared_cluster(3, 1) as address:
            pids = [p.process.pid for procs in ray._private.worker._global_node.all_processes.values() for p in procs]
            assert pids and all(map(_alive, pids))
            probe = ("import ray; ray.init(include_dashboard=False); r = ray.cluster_resources(); "
                     "print(int(r['CPU']), int(r['GPU']))")
            env = {**os.environ, "RAY_ADDRESS": address}
            child = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=300)
            assert child.returncode == 0 and child.stdout.split() == ["3", "1"], child.stderr[-2000:]
            raise KeyboardInterrupt
    assert not ray.is_initialized()
    assert [p for p in pids if _alive(p)] == []
