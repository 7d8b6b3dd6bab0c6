"""voltbus: event-sourced reinforcement learning and prompt optimization for AI agents."""

from __future__ import annotations

from voltbus.store import (
    Attempt,
    AttemptedRollout,
    EnqueueRolloutRequest,
    NamedResources,
    PaginatedResult,
    ResourcesUpdate,
    Rollout,
    Span,
    Store,
    Worker,
    connect,
)

__all__ = [
    "Attempt",
    "AttemptedRollout",
    "EnqueueRolloutRequest",
    "NamedResources",
    "PaginatedResult",
    "ResourcesUpdate",
    "Rollout",
    "Span",
    "Store",
    "Worker",
    "connect",
]
