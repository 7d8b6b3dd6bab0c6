"""verl 0.9.1 on a machine without a GPU, for the ``verl`` tests: verl detects only accelerator
platforms and registers its FSDP engine for cuda/npu, so this registers a CPU platform (gloo, the
``torch.cpu`` module with zero memory counters) and asks the engine registry for the cuda engine,
which then runs on CPU. Must run before ``verl.workers.engine`` is imported. Does nothing with CUDA."""

from __future__ import annotations

import os
from typing import Any

import torch


class CPUModule:
    """``torch.cpu`` plus the device-module calls verl makes that it lacks (memory counters: 0)."""

    def __getattr__(self, name: str) -> Any:
        if hasattr(torch.cpu, name):
            return getattr(torch.cpu, name)
        if name == "get_device_name":
            return lambda *a, **k: "CPU"
        if name == "mem_get_info":
            return lambda *a, **k: (0, 0)
        return lambda *a, **k: 0


def use_cpu_if_no_gpu() -> str:
    """Make verl train on CPU when there is no CUDA device; returns the device verl will use."""
    if torch.cuda.is_available():
        return "cuda"
    from verl.plugin.platform.platform_cuda import PlatformCUDA
    from verl.plugin.platform.platform_manager import set_platform

    class PlatformCPU(PlatformCUDA):
        device_name = "cpu"  # type: ignore[assignment]
        vendor_name = "none"  # type: ignore[assignment]

        @property
        def device_module(self) -> Any:
            return CPUModule()

        def is_available(self) -> bool:
            return True

        def is_platform_available(self, use_smi_check: bool = False) -> bool:
            return True

        def current_device(self) -> Any:
            return "cpu"

        def device_count(self) -> int:
            return 1

        def set_device(self, device_index: int) -> None:
            pass

        def synchronize(self, device_index: int | None = None) -> None:
            pass

        def manual_seed(self, seed: int) -> None:
            torch.manual_seed(seed)

        def manual_seed_all(self, seed: int) -> None:
            torch.manual_seed(seed)

        def set_allocator_settings(self, settings: str) -> None:
            pass

        def empty_cache(self) -> None:
            pass

        def communication_backend_name(self) -> str:
            return "gloo"

    set_platform(PlatformCPU())
    os.environ["VERL_ENGINE_DEVICE"] = "cuda"
    return "cpu"
