"""Which actor backend this machine can run, checked before a learner starts (no torch import here)."""

from __future__ import annotations

import importlib.util

from voltbus.services.settings import LearnerSettings

from .session import LearnerError

GPU_HINT = "pip install 'voltbus[gpu]' (verl 0.9.1, vLLM 0.24.0, torch 2.11.0) on a machine with an NVIDIA GPU"


def check_backend(settings: LearnerSettings) -> None:
    """Fail now, saying what to install, when ``settings.backend`` cannot run here: ``verl`` needs
    verl and a device verl's platform can train on (a CUDA GPU)."""
    if settings.backend == "torch":
        return
    if importlib.util.find_spec("verl") is None:
        raise LearnerError(f"learner.backend 'verl' needs verl, which is not installed: {GPU_HINT}")
    from verl.plugin.platform.platform_manager import get_platform

    if not get_platform().is_available():
        raise LearnerError(f"learner.backend 'verl' trains on a CUDA GPU and this machine has none: {GPU_HINT}")
