"""The store client: Agent Lightning's LightningStore API over voltbus's event log.

A façade: the implementation is ``voltbus.services.clients.store``.
"""

from __future__ import annotations

from voltbus.services.clients.store.client import Store, connect
from voltbus.services.clients.store.spans import span_from_otel
from voltbus.services.clients.store.types import (
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
