"""The store's records, shaped as Agent Lightning 0.3's types (same names, fields and meaning).

They are views built from the log; changing one changes nothing stored.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, Generic, TypeVar, overload

import msgspec

from voltbus.schemas.base import Attributes
from voltbus.schemas.resources import Resource
from voltbus.schemas.rollouts import AttemptStatus, RolloutConfig, RolloutStatus
from voltbus.schemas.spans import SpanEventInfo, SpanStatus
from voltbus.schemas.workers import WorkerStatus

T = TypeVar("T")

NamedResources = dict[str, Resource]
"""Resources by name: LLM, ProxyLLM, PromptTemplate or GenericResource."""


class Rollout(msgspec.Struct, kw_only=True):
    """A request to run the agent once on a task."""

    rollout_id: str
    input: Any
    start_time: float
    end_time: float | None = None
    mode: str | None = None
    resources_id: str | None = None
    status: RolloutStatus = "queuing"
    config: RolloutConfig = RolloutConfig()
    metadata: dict[str, Any] | None = None


class Attempt(msgspec.Struct, kw_only=True):
    """One try of a rollout by one worker."""

    rollout_id: str
    attempt_id: str
    sequence_id: int
    start_time: float
    end_time: float | None = None
    status: AttemptStatus = "preparing"
    worker_id: str | None = None
    last_heartbeat_time: float | None = None
    metadata: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    """voltbus addition: the recorded error of a failed attempt (type, message, traceback)."""


class AttemptedRollout(Rollout, kw_only=True):
    """A rollout together with its latest attempt."""

    attempt: Attempt


class EnqueueRolloutRequest(msgspec.Struct, kw_only=True):
    """One rollout for ``enqueue_many_rollouts``."""

    input: Any
    mode: str | None = None
    resources_id: str | None = None
    config: RolloutConfig | None = None
    metadata: dict[str, Any] | None = None


class ResourcesUpdate(msgspec.Struct, kw_only=True):
    """One version of a resources bundle."""

    resources_id: str
    create_time: float
    update_time: float
    version: int
    resources: NamedResources


class Worker(msgspec.Struct, kw_only=True):
    """A runner process's status, as the log reports it."""

    worker_id: str
    status: WorkerStatus = "unknown"
    heartbeat_stats: dict[str, Any] | None = None
    last_heartbeat_time: float | None = None
    last_dequeue_time: float | None = None
    last_busy_time: float | None = None
    last_idle_time: float | None = None
    current_rollout_id: str | None = None
    current_attempt_id: str | None = None


class PaginatedResult(msgspec.Struct, Generic[T], kw_only=True):
    """A page of results that also behaves as a sequence of its items."""

    items: list[T]
    limit: int = -1
    offset: int = 0
    total: int = 0

    def __len__(self) -> int:
        return len(self.items)

    def __iter__(self) -> Iterator[T]:
        return iter(self.items)

    @overload
    def __getitem__(self, index: int) -> T: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[T]: ...
    def __getitem__(self, index: int | slice) -> T | Sequence[T]:
        return self.items[index]


class Span(msgspec.Struct, kw_only=True):
    """One observed step of an attempt, OpenTelemetry-shaped (Agent Lightning's ``Span``)."""

    rollout_id: str
    attempt_id: str
    sequence_id: int
    trace_id: str
    span_id: str
    parent_id: str | None = None
    name: str
    status: SpanStatus = SpanStatus(status_code="UNSET")
    attributes: Attributes = {}
    events: list[SpanEventInfo] = []
    start_time: float | None = None
    end_time: float | None = None
    resource_attributes: Attributes = {}


class Triplet(msgspec.Struct, kw_only=True):
    """A (prompt, response, reward) training unit (Agent Lightning's ``Triplet``)."""

    prompt: Any
    response: Any
    reward: float | None = None
    metadata: dict[str, Any] = {}
