"""Which actor backend a learner step runs: checked before a learner starts (no torch import here), and
loaded: the one place that picks ``grpo.actor.TorchActor`` (CPU torch) or ``verl.actor.VerlActor``, and on several
ranks their data-parallel forms (``grpo/ranks.py``)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import TYPE_CHECKING

from voltbus.services.settings import LearnerSettings

from .session import LearnerError

if TYPE_CHECKING:
    from .grpo.actor import Actor
    from .grpo.ranks import Member

DOC = 'docs/learning.md "LoRA"'
GPU_HINT = "pip install 'voltbus[gpu]' (verl 0.9.1, vLLM 0.24.0, torch 2.11.0) on a machine with an NVIDIA GPU"


def check_backend(settings: LearnerSettings) -> None:
    """Fail now, saying what to install, when ``settings.backend`` cannot run here: ``verl`` needs
    verl and a device verl's platform can train on (a CUDA GPU); ``lora_rank`` needs peft (``check_lora``)."""
    if settings.lora_rank:
        check_lora(settings)
    if settings.backend == "torch":
        return
    if importlib.util.find_spec("verl") is None:
        raise LearnerError(f"learner.backend 'verl' needs verl, which is not installed: {GPU_HINT}")
    from verl.plugin.platform.platform_manager import get_platform

    if not get_platform().is_available():
        raise LearnerError(f"learner.backend 'verl' trains on a CUDA GPU and this machine has none: {GPU_HINT}")


def check_lora(settings: LearnerSettings) -> None:
    """Refuse LoRA where it is not built (vLLM pushes with ``overlap``: docs/learning.md "LoRA") or peft is missing."""
    if settings.vllm_urls and settings.overlap:
        raise LearnerError(
            f"learner.lora_rank with learner.vllm_urls and learner.overlap is not built ({DOC}): rollouts of the "
            "previous version would still call its adapter, which the push unloads; set overlap false"
        )
    if importlib.util.find_spec("peft") is None:
        raise LearnerError("learner.lora_rank needs peft, which is not installed: pip install 'voltbus[learn]'")


def load_actor(settings: LearnerSettings, checkpoint: Path | None = None) -> Actor:
    """The backend's actor, from the starting model or from the version saved at ``checkpoint``."""
    check_backend(settings)
    from .grpo import ranks

    if ranks.world_size() > 1:  # started by torchrun: this is rank 0 (the others follow in ranks.follow)
        return ranks.DataParallelActor(settings, checkpoint, rank_actor)
    if settings.backend == "verl":
        from .verl.actor import VerlActor

        return VerlActor(settings, checkpoint)
    from .grpo.actor import TorchActor
    from .grpo.policy import Policy

    return TorchActor(Policy.load(settings, checkpoint))


def rank_actor(settings: LearnerSettings, checkpoint: Path | None) -> Member:
    """The backend's actor on one of several ranks (``grpo/ranks.py``): verl's FSDP engine, which is data parallel
    itself (every rank reads ``checkpoint``), or the CPU policy's share (rank 0 reads it and gives the others its
    state)."""
    if settings.backend == "verl":
        from .verl.actor import VerlActor

        return VerlActor(settings, checkpoint)
    from .grpo.ranks import TorchShare

    return TorchShare(settings, checkpoint)
