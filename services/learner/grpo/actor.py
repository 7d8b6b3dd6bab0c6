"""The actor: what a learner step updates and saves, behind one small protocol.

``TorchActor`` is the CPU model (``policy.Policy`` + ``objective.update``); ``VerlActor``
(``learner/verl/actor.py``) is verl 0.9.1's FSDP training engine on one CUDA GPU. ``learner.backend``
picks one (``backend.load_actor``); ``backend.check_backend`` refuses one this machine cannot run
before anything starts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Protocol

from .objective import Row, update
from .policy import Policy


class Actor(Protocol):
    """One policy being trained: an update on a batch of rows, and a saved version."""

    def update(self, rows: Sequence[Row], advantages: Mapping[str, float]) -> dict[str, float]:
        """Train on ``rows`` with one advantage per rollout; returns the step's statistics
        (``loss``, ``clip_fraction``, ``approx_kl_old``, ``grad_norm``, ``tokens``, and ``kl_ref`` with a KL term)."""
        ...

    def save(self, run_id: str, step: int) -> tuple[Path, str]:
        """Write the version after ``step`` as a model directory; returns (its ``model.safetensors``, their sha256)."""
        ...


class TorchActor:
    """The CPU torch policy, updated by ``objective.update``."""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy

    def update(self, rows: Sequence[Row], advantages: Mapping[str, float]) -> dict[str, float]:
        p, s = self.policy, self.policy.settings
        return update(
            p.model, p.optimizer, rows, advantages, p.tok.pad_token_id,
            epochs=s.epochs, clip=s.clip, ref_model=p.reference, kl_coef=s.kl_coef,
            max_tokens_per_pass=s.max_tokens_per_pass,
        )  # fmt: skip

    def save(self, run_id: str, step: int) -> tuple[Path, str]:
        return self.policy.save(run_id, step)
