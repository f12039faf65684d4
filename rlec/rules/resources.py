"""Ray's logical CPU demand of verl 0.9.1's trainer, computed from the config before Ray starts.

A Ray actor or placement group that asks for CPUs the node does not declare waits silently: with
the default 8 TransferQueue storage units on a 2-core box, ``main_ppo`` hung for 10 minutes with no
message (TransferQueue 0.1.11 waits on ``ray.get(pg.ready())`` without a timeout). What holds
logical CPUs for the whole run (read in verl 0.9.1 and TransferQueue 0.1.11):

- TransferQueue's controller actor (``@ray.remote(num_cpus=1)``, ``transfer_queue/controller.py``)
  and one placement-group bundle of 1 CPU per storage unit
  (``transfer_queue.backend.SimpleStorage.num_data_storage_units``, ``storage/simple_storage.py``);
- one bundle of ``max_colocate_count`` = 3 CPUs per trainer worker process (verl's
  ``ResourcePoolManager`` default, ``single_controller/ray/base.py``): nnodes x n_gpus_per_node;
- one more CPU at any moment to create the next actor (Ray schedules an actor's creation on 1 CPU
  and releases it afterwards: TaskRunner, agent-loop, reward-loop and rollout-server actors).

On a cluster the node's CPUs are Ray's own count; ``ray_kwargs.ray_init.num_cpus`` (the CPU run
declares 8) or ``rlec.check.cpus_per_node`` give the number the check compares against.
"""

from __future__ import annotations

from dataclasses import dataclass
from rlec.run_config import VerlKeys

COLOCATE_CPUS = 3  # verl ResourcePoolManager.max_colocate_count default

__all__ = ["COLOCATE_CPUS", "CpuDemand", "cpu_demand"]


@dataclass(frozen=True)
class CpuDemand:
    """Logical CPUs Ray must grant on the head node (all counts are CPUs).

    Attributes:
        transfer_queue: controller (1) + storage units (1 each).
        workers: trainer worker bundles on the head node (``COLOCATE_CPUS`` x the node's GPUs).
        creation: headroom to create the next actor.
        available: the CPUs declared (``ray_init.num_cpus`` or ``rlec.check.cpus_per_node``), None = unknown.
    """

    transfer_queue: int
    workers: int
    creation: int
    available: int | None

    @property
    def total(self) -> int:
        """CPUs needed at once on the head node."""
        return self.transfer_queue + self.workers + self.creation

    def message(self) -> str:
        """One line with the numbers, for a refusal."""
        return (f"Ray needs {self.total} logical CPUs on the head node (TransferQueue controller + storage units "
                f"{self.transfer_queue}, trainer worker bundles {self.workers}, actor creation {self.creation}) but "
                f"{self.available} are declared; actors would wait for them forever (raise ray_kwargs.ray_init.num_cpus "
                "or lower transfer_queue.backend.SimpleStorage.num_data_storage_units)")


def cpu_demand(keys: VerlKeys, cpus_per_node: int | None) -> CpuDemand:
    """:class:`CpuDemand` of a composed trainer config (see the module docstring for the sources).

    Args:
        keys: the config's verl keys (:meth:`rlec.run_config.VerlKeys.read`).
        cpus_per_node: ``rlec.check.cpus_per_node`` (:class:`rlec.settings.CheckSettings`), read when
            ``ray_kwargs.ray_init.num_cpus`` is unset.
    """
    units = int(keys.storage_units or 8)
    gpus = int(keys.n_gpus_per_node or 1)
    declared = keys.ray_num_cpus
    if declared is None:
        declared = cpus_per_node
    return CpuDemand(transfer_queue=1 + units, workers=COLOCATE_CPUS * gpus, creation=1,
                     available=None if declared is None else int(declared))
