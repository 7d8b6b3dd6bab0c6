"""The store client: Agent Lightning's LightningStore API over voltbus's event log."""

from __future__ import annotations

from .client import Store, connect
from .spans import span_from_otel
from .types import (
    Attempt,
    AttemptedRollout,
    EnqueueRolloutRequest,
    NamedResources,
    PaginatedResult,
    ResourcesUpdate,
    Rollout,
    Span,
    Triplet,
    Worker,
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
    "Triplet",
    "Worker",
    "connect",
    "span_from_otel",
]
