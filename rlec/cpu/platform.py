"""verl's platform ``cpu`` and its Megatron engines: what verl 0.9.1's registries accept for a machine without CUDA.

verl has no CPU platform: its platform manager falls back to ``nvidia`` (``get_device_name()`` is ``cuda`` even with
``trainer.device=cpu``) and no Megatron engine is registered for device ``cpu``. :func:`register_platform` registers
:class:`CPUPlatform` (device ``cpu``, backend ``gloo``; Ray still schedules workers on a logical ``GPU`` resource,
which ``ray_init.num_gpus`` declares) and :func:`register_engines` verl's Megatron engine classes for device ``cpu``.
Both are called by :func:`rlec.cpu.verl_shims.enable_cpu`; the patches verl's code needs beyond its registries are the
shims of :mod:`rlec.cpu.verl_shims`.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator, Optional

import torch

from rlec.verl_plugin.cpu_interface import PLATFORM_NAME

__all__ = ["CPUDeviceModule", "CPUPlatform", "PLATFORM_NAME", "register_engines", "register_platform"]


def _platform_base() -> type:
    from verl.plugin.platform.platform_base import PlatformBase

    return PlatformBase


class CPUDeviceModule:
    """What verl calls on ``get_torch_device()`` (``torch.cuda`` on GPUs), answered for the CPU.

    Memory queries report the host's RAM (``mem_get_info``: available and total bytes; allocated /
    reserved: 0, torch does not track CPU allocations); synchronize, cache and profiler calls do
    nothing; RNG calls go to torch's CPU generator. Any other attribute is a no-op returning 0.
    """

    @staticmethod
    def mem_get_info(*args: Any, **kwargs: Any) -> tuple[int, int]:
        import psutil

        vm = psutil.virtual_memory()
        return int(vm.available), int(vm.total)

    @staticmethod
    def is_available() -> bool:
        return True

    @staticmethod
    def get_rng_state(*args: Any, **kwargs: Any) -> torch.Tensor:
        return torch.get_rng_state()

    @staticmethod
    def set_rng_state(state: torch.Tensor, *args: Any, **kwargs: Any) -> None:
        torch.set_rng_state(state)

    @staticmethod
    def manual_seed(seed: int) -> None:
        torch.manual_seed(seed)

    manual_seed_all = manual_seed

    @staticmethod
    def device_count() -> int:
        return 1

    @staticmethod
    def get_device_name(*args: Any, **kwargs: Any) -> str:
        return "CPU"  # verl's flops counter looks this up (no promised FLOP/s: MFU is not reported)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return lambda *args, **kwargs: 0


def _make_platform_class() -> type:
    base = _platform_base()

    class CPUPlatform(base):  # type: ignore[misc, valid-type]
        """verl platform ``cpu``: torch CPU tensors, gloo collectives, a logical Ray ``GPU`` per worker.

        Ray's placement groups (``RayResourcePool``) and verl's resource check count ``GPU``
        resources whatever the platform, so workers still ask for one logical GPU each; the launcher
        declares ``ray_init.num_gpus`` = the number of worker processes. Torch never sees a CUDA device.
        """

        @property
        def device_name(self) -> str:
            return "cpu"

        @property
        def vendor_name(self) -> str:
            return "cpu"

        @property
        def device_module(self) -> Any:
            return CPUDeviceModule()

        def is_available(self) -> bool:
            return True

        def is_platform_available(self, use_smi_check: bool = False) -> bool:
            return not torch.cuda.is_available()

        def current_device(self) -> Any:
            # verl moves tensors with .to(get_device_id()): an int would mean cuda:<int>
            return "cpu"

        def device_count(self) -> int:
            return 1

        def set_device(self, device_index: int) -> None:
            return None

        def synchronize(self, device_index: Optional[int] = None) -> None:
            return None

        def manual_seed(self, seed: int) -> None:
            torch.manual_seed(seed)

        def manual_seed_all(self, seed: int) -> None:
            torch.manual_seed(seed)

        def set_allocator_settings(self, settings: str) -> None:
            return None

        def empty_cache(self) -> None:
            return None

        def get_device_capability(self, device_index: int = 0) -> tuple[Optional[int], Optional[int]]:
            return None, None

        def communication_backend_name(self) -> str:
            return "gloo"

        def visible_devices_envvar(self) -> str:
            return "CUDA_VISIBLE_DEVICES"

        @contextlib.contextmanager
        def nvtx_range(self, msg: str) -> Iterator[None]:
            yield

        def profiler_start(self) -> None:
            return None

        def profiler_stop(self) -> None:
            return None

        def ray_resource_name(self) -> str:
            return "GPU"

        def ray_noset_envvars(self) -> list[str]:
            return []

        def is_ipc_supported(self) -> bool:
            return False

        def cudart(self) -> Any:
            return None

    return CPUPlatform


CPUPlatform: type | None = None


def register_platform() -> type:
    """Register :class:`CPUPlatform` as verl platform ``cpu`` (idempotent); returns the class."""
    global CPUPlatform
    from verl.plugin.platform.platform_manager import PlatformRegistry

    if CPUPlatform is None:
        CPUPlatform = _make_platform_class()
    if PlatformRegistry.get(PLATFORM_NAME) is not CPUPlatform:
        PlatformRegistry.register(platform=PLATFORM_NAME)(CPUPlatform)
    return CPUPlatform


def register_engines() -> list[str]:
    """Register verl's Megatron engines (language and value model) for device ``cpu``.

    Answers ``ValueError: No engine registered for device='cpu' ... backend='megatron'``
    (``verl/workers/engine/base.py``). Returns the model types registered now.
    """
    from verl.workers.engine.base import EngineRegistry
    from verl.workers.engine.megatron import transformer_impl as impl

    done = []
    for model_type, cls in (("language_model", impl.MegatronEngineWithLMHead), ("value_model", impl.MegatronEngineWithValueHead)):
        registry = EngineRegistry._engines.get(model_type, {}).get("megatron", {})
        if PLATFORM_NAME not in registry:
            EngineRegistry.register(model_type=model_type, backend="megatron", device=PLATFORM_NAME)(cls)
            done.append(model_type)
    return done
