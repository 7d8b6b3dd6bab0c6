"""Agent Lightning's ``types`` module: the rollout, attempt, span and resource types (voltbus's msgspec structs under
the same names), the ``Dataset`` protocol and the runner's ``Hook`` base class."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, SupportsIndex, TypeVar

from voltbus.agent import SpanCore
from voltbus.schemas.base import Mode as RolloutMode
from voltbus.schemas.resources import LLM, GenericResource, PromptTemplate, ProxyLLM, Resource
from voltbus.schemas.rollouts import AttemptStatus, RolloutConfig, RolloutStatus
from voltbus.schemas.workers import WorkerStatus
from voltbus.services.clients.agent.litagent import RolloutRawResult
from voltbus.store import (
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

if TYPE_CHECKING:
    from voltbus.agent import LitAgent

__all__ = [
    "LLM",
    "Attempt",
    "AttemptStatus",
    "AttemptedRollout",
    "Dataset",
    "EnqueueRolloutRequest",
    "GenericResource",
    "Hook",
    "NamedResources",
    "PaginatedResult",
    "PromptTemplate",
    "ProxyLLM",
    "Resource",
    "ResourceUnion",
    "ResourcesUpdate",
    "Rollout",
    "RolloutConfig",
    "RolloutMode",
    "RolloutRawResult",
    "RolloutStatus",
    "Span",
    "SpanCoreFields",
    "TaskInput",
    "Triplet",
    "Worker",
    "WorkerStatus",
]

T_co = TypeVar("T_co", covariant=True)

SpanCoreFields = SpanCore
"""Agent Lightning's name for the core fields of a span."""
ResourceUnion = Resource
"""Agent Lightning's union of resource types."""
TaskInput = Any
"""A task: any value (JSON on the bus)."""


class Dataset(Protocol[T_co]):
    """Anything indexable with a length (a list will do), as ``Trainer.fit`` and ``dev`` take it."""

    def __getitem__(self, index: SupportsIndex, /) -> T_co: ...

    def __len__(self) -> int: ...


class Hook:
    """Base class of runner hooks: override the calls you need (``Runner(..., hooks=[...])``, ``run_context(hooks=)``).
    The runner calls them in this order for each rollout; one that raises is logged, never fails the rollout."""

    async def on_rollout_start(self, *, agent: LitAgent[Any], runner: Any, rollout: Rollout) -> None:
        """Before the agent runs."""

    async def on_trace_start(self, *, agent: LitAgent[Any], runner: Any, tracer: Any, rollout: Rollout) -> None:
        """Tracing of the attempt has started."""

    async def on_trace_end(self, *, agent: LitAgent[Any], runner: Any, tracer: Any, rollout: Rollout) -> None:
        """The agent returned; ``tracer.get_last_trace()`` holds its spans."""

    async def on_rollout_end(self, *, agent: LitAgent[Any], runner: Any, rollout: Rollout, spans: Any) -> None:
        """The rollout's result is recorded; ``spans`` are those stored for it."""
