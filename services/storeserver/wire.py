"""Agent Lightning 0.3's wire shapes (``store/client_server.py``): the request bodies its client sends, and the
store's records as its pydantic models read them (a span carries ``context``, ``parent``, ``links`` and
``resource`` there; voltbus stores the ids and the resource's attributes)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from msgspec import UNSET, UnsetType

from voltbus.schemas.base import Attributes
from voltbus.schemas.rollouts import AttemptStatus, RolloutConfig, RolloutStatus
from voltbus.schemas.spans import SpanEventInfo, SpanStatus
from voltbus.schemas.workers import WorkerStatus
from voltbus.services.clients.store import PaginatedResult, Span

Mode = Literal["train", "val", "test"]
Order = Literal["asc", "desc"]
Logic = Literal["and", "or"]
Limit = Annotated[int, msgspec.Meta(ge=-1)]
Offset = Annotated[int, msgspec.Meta(ge=0)]


class Body(msgspec.Struct, kw_only=True):
    """A request body: unknown fields are ignored, as pydantic does in Agent Lightning's server."""


class EnqueueOne(Body, kw_only=True):
    """One rollout to enqueue (Agent Lightning's ``EnqueueRolloutRequest``)."""

    input: Any
    mode: Mode | None = None
    resources_id: str | None = None
    config: RolloutConfig | None = None
    metadata: dict[str, Any] | None = None


class EnqueueMany(Body, kw_only=True):
    """``POST /queues/rollouts/enqueue``."""

    rollouts: list[EnqueueOne]


class Dequeue(Body, kw_only=True):
    """``POST /queues/rollouts/dequeue``."""

    limit: int = 1
    worker_id: str | None = None


class StartRollout(EnqueueOne, kw_only=True):
    """``POST /rollouts``: a rollout with its first attempt, bypassing the queue."""

    worker_id: str | None = None


class WorkerBody(Body, kw_only=True):
    """``POST /rollouts/{id}/attempts``."""

    worker_id: str | None = None


class UpdateRollout(Body, kw_only=True):
    """``POST /rollouts/{id}``: only the fields sent change."""

    input: Any = UNSET
    mode: Mode | None | UnsetType = UNSET
    resources_id: str | None | UnsetType = UNSET
    status: RolloutStatus | UnsetType = UNSET
    config: RolloutConfig | UnsetType = UNSET
    metadata: dict[str, Any] | None | UnsetType = UNSET


class UpdateAttempt(Body, kw_only=True):
    """``POST /rollouts/{id}/attempts/{attempt_id}``: only the fields sent change (none may be null)."""

    status: AttemptStatus | UnsetType = UNSET
    worker_id: str | UnsetType = UNSET
    last_heartbeat_time: float | UnsetType = UNSET
    metadata: dict[str, Any] | UnsetType = UNSET


class UpdateWorker(Body, kw_only=True):
    """``POST /workers/{id}``."""

    heartbeat_stats: dict[str, Any] | UnsetType = UNSET


class WaitRollouts(Body, kw_only=True):
    """``POST /waits/rollouts``."""

    rollout_ids: list[str]
    timeout: float | None = None


class NextSequence(Body, kw_only=True):
    """``POST /spans/next``."""

    rollout_id: str
    attempt_id: str


class Page(Body, kw_only=True):
    """Pagination and sorting, as Agent Lightning checks them (``limit`` -1: all; never 0)."""

    limit: Limit = -1
    offset: Offset = 0
    sort_by: str | None = None
    sort_order: Order = "asc"


class QueryRollouts(Page, kw_only=True):
    """``GET /rollouts``, ``POST /rollouts/search``."""

    status_in: list[RolloutStatus] | None = None
    rollout_id_in: list[str] | None = None
    rollout_id_contains: str | None = None
    filter_logic: Logic = "and"


class QueryAttempts(Page, kw_only=True):
    """``GET /rollouts/{id}/attempts``, ``POST .../attempts/search``."""

    sort_by: str | None = "sequence_id"


class QueryResources(Page, kw_only=True):
    """``GET /resources``."""

    resources_id: str | None = None
    resources_id_contains: str | None = None


class QueryWorkers(Page, kw_only=True):
    """``GET /workers``, ``POST /workers/search``."""

    status_in: list[WorkerStatus] | None = None
    worker_id_contains: str | None = None
    filter_logic: Logic = "and"


class QuerySpans(Page, kw_only=True):
    """``GET /spans``, ``POST /spans/search``."""

    rollout_id: str
    attempt_id: str | None = None
    trace_id: str | None = None
    trace_id_contains: str | None = None
    span_id: str | None = None
    span_id_contains: str | None = None
    parent_id: str | None = None
    parent_id_contains: str | None = None
    name: str | None = None
    name_contains: str | None = None
    filter_logic: Logic = "and"
    sort_by: str | None = "sequence_id"


LIST_PARAMS = frozenset({"status_in", "rollout_id_in"})
"""Query-string parameters that repeat (``?status_in=a&status_in=b``)."""


class OtelResource(Body, kw_only=True):
    """A span's resource."""

    attributes: Attributes = {}
    schema_url: str = ""


class AlSpan(Body, kw_only=True):
    """``POST /spans``: a span as Agent Lightning's client sends it (``Span.model_dump(mode="json")``)."""

    rollout_id: str
    attempt_id: str
    sequence_id: int
    trace_id: str
    span_id: str
    parent_id: str | None = None
    name: str
    status: SpanStatus = SpanStatus()
    attributes: Attributes = {}
    events: list[SpanEventInfo] = []
    start_time: float | None = None
    end_time: float | None = None
    resource: OtelResource = msgspec.field(default_factory=OtelResource)


def span_in(span: AlSpan) -> Span:
    """The store's span for one Agent Lightning sent (its links and contexts are not kept: the ids are)."""
    return Span(
        rollout_id=span.rollout_id,
        attempt_id=span.attempt_id,
        sequence_id=span.sequence_id,
        trace_id=span.trace_id,
        span_id=span.span_id,
        parent_id=span.parent_id,
        name=span.name,
        status=span.status,
        attributes=span.attributes,
        events=span.events,
        start_time=span.start_time,
        end_time=span.end_time,
        resource_attributes=span.resource.attributes,
    )


def _context(trace_id: str, span_id: str) -> dict[str, Any]:
    return {"trace_id": trace_id, "span_id": span_id, "is_remote": False, "trace_state": {}}


def span_out(span: Span) -> dict[str, Any]:
    """A stored span in Agent Lightning's shape.

    >>> out = span_out(Span(rollout_id="ro-1", attempt_id="at-1", sequence_id=1, trace_id="t", span_id="s", name="n"))
    >>> out["context"]
    {'trace_id': 't', 'span_id': 's', 'is_remote': False, 'trace_state': {}}
    >>> out["parent"], out["links"], out["resource"]
    (None, [], {'attributes': {}, 'schema_url': ''})
    """
    fields = msgspec.to_builtins(span)
    resource = fields.pop("resource_attributes", {})
    fields["events"] = [{"attributes": {}, "timestamp": None, **e} for e in fields.get("events", [])]
    parent = _context(span.trace_id, span.parent_id) if span.parent_id else None
    return {
        **fields,
        "links": [],
        "context": _context(span.trace_id, span.span_id),
        "parent": parent,
        "resource": {"attributes": resource, "schema_url": ""},
    }


def record_out(value: Any) -> Any:
    """A store record (or a page or list of them) as JSON-ready builtins in Agent Lightning's shapes."""
    if isinstance(value, Span):
        return span_out(value)
    if isinstance(value, list | tuple):
        return [record_out(v) for v in value]
    if isinstance(value, PaginatedResult):
        page = {"limit": value.limit, "offset": value.offset, "total": value.total}
        return {"items": record_out(list(value.items)), **page}
    return msgspec.to_builtins(value)
