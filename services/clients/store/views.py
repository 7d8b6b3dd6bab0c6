"""Building the store's Agent Lightning-shaped records from folded state and stored events."""

from __future__ import annotations

from typing import Any

import msgspec

from voltbus.schemas.base import derive_id
from voltbus.schemas.errors import InvalidCommand
from voltbus.schemas.resources import ResourcesPublished
from voltbus.schemas.rollouts import RolloutConfig
from voltbus.schemas.spans import SpanRecorded
from voltbus.schemas.workers import WorkerStatusReported
from voltbus.services.lifecycle import AttemptState, RolloutState

from .types import Attempt, AttemptedRollout, ResourcesUpdate, Rollout, Span, Worker

_json_decode = msgspec.json.decode
_json_encode = msgspec.json.encode


def from_json(raw: msgspec.Raw) -> Any:
    """A stored JSON value as Python objects."""
    return _json_decode(raw)


def to_json(value: Any, what: str = "value") -> msgspec.Raw:
    """A Python value as stored JSON; InvalidCommand for values JSON cannot hold."""
    try:
        return msgspec.Raw(_json_encode(value))
    except (TypeError, msgspec.EncodeError) as exc:
        raise InvalidCommand(f"{what} is not JSON-serializable: {exc}") from None


def metadata_json(metadata: dict[str, Any] | None) -> dict[str, msgspec.Raw]:
    """Metadata values as stored JSON."""
    return {str(k): to_json(v, f"metadata[{k!r}]") for k, v in (metadata or {}).items()}


def rollout_config(config: Any) -> RolloutConfig:
    """A RolloutConfig from one (or a dict of its fields), checked; InvalidCommand says what is wrong.

    >>> rollout_config({"max_attempts": 3, "retry_condition": ["failed"]}).max_attempts
    3
    >>> rollout_config({"max_attempts": 0})
    Traceback (most recent call last):
    ...
    voltbus.schemas.errors.InvalidCommand: invalid rollout config: Expected `int` >= 1 - at `$.max_attempts`
    """
    if config is None:
        return RolloutConfig()
    fields = msgspec.to_builtins(config) if isinstance(config, RolloutConfig) else config
    if hasattr(fields, "model_dump"):  # an Agent Lightning (pydantic) RolloutConfig
        fields = fields.model_dump()
    try:
        return msgspec.convert(fields, RolloutConfig)
    except msgspec.ValidationError as exc:
        raise InvalidCommand(f"invalid rollout config: {exc}") from None


def attempt_view(rollout_id: str, a: AttemptState) -> Attempt:
    """An attempt record."""
    error = msgspec.to_builtins(a.error) if a.error else None
    metadata = {k: from_json(v) for k, v in a.metadata.items()}
    return Attempt(
        rollout_id=rollout_id,
        attempt_id=a.attempt_id,
        sequence_id=a.sequence_id,
        start_time=a.start_time,
        end_time=a.end_time,
        status=a.status,
        worker_id=a.worker_id,
        last_heartbeat_time=a.last_heartbeat_time,
        metadata=metadata,
        error=error,
    )


def rollout_view(state: RolloutState) -> Rollout | AttemptedRollout:
    """A rollout record, with its latest attempt when it has one (as Agent Lightning returns it)."""
    assert state.status is not None
    fields: dict[str, Any] = dict(
        rollout_id=state.rollout_id,
        input=from_json(state.input),
        start_time=state.start_time,
        end_time=state.end_time,
        mode=state.mode,
        resources_id=state.resources_id,
        status=state.status,
        config=state.config,
        metadata={k: from_json(v) for k, v in state.metadata.items()},
    )
    if state.latest is None:
        return Rollout(**fields)
    return AttemptedRollout(**fields, attempt=attempt_view(state.rollout_id, state.latest))


def resources_view(event: ResourcesPublished, created: float) -> ResourcesUpdate:
    """One resources version, under the bundle's id (Agent Lightning's resources_id)."""
    return ResourcesUpdate(
        resources_id=event.name,
        create_time=created,
        update_time=event.created_at,
        version=event.version,
        resources=dict(event.resources),
    )


def worker_view(report: WorkerStatusReported) -> Worker:
    """A worker record from its latest full snapshot."""
    stats = report.heartbeat_stats.flat() if report.heartbeat_stats else None
    return Worker(
        worker_id=report.worker_id,
        status=report.status,
        heartbeat_stats=stats,
        last_heartbeat_time=report.last_heartbeat_time,
        last_dequeue_time=report.last_dequeue_time,
        last_busy_time=report.last_busy_time,
        last_idle_time=report.last_idle_time,
        current_rollout_id=report.current_rollout_id,
        current_attempt_id=report.current_attempt_id,
    )


def span_event(span: Span) -> SpanRecorded:
    """The event that records a span; its id derives from (rollout, attempt, span) so a repeat is one event."""
    return SpanRecorded(
        event_id=derive_id(span.rollout_id, span.attempt_id, "span", span.span_id),
        rollout_id=span.rollout_id,
        attempt_id=span.attempt_id,
        sequence_id=span.sequence_id,
        trace_id=span.trace_id,
        span_id=span.span_id,
        parent_id=span.parent_id,
        name=span.name,
        start_time=span.start_time or 0.0,
        end_time=span.end_time,
        attributes=span.attributes,
        events=span.events,
        status=span.status,
        resource_attributes=span.resource_attributes,
    )
