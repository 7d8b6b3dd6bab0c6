"""Store methods for spans: published on the spans stream; the first span of an attempt marks it running.

Sequence ids come from an atomic per-rollout counter on the bus, 1, 2, 3... across all attempts of
the rollout, as in Agent Lightning 0.3.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from voltbus.schemas.base import derive_id
from voltbus.schemas.commands import MarkAttemptRunning
from voltbus.schemas.errors import UnknownAttempt
from voltbus.schemas.spans import RewardReported, SpanEventInfo, SpanRecorded, SpanStatus
from voltbus.services.clients.telemetry.emitters import (
    get_rewards_from_span,  # the reward reading rules live with the emitters
)
from voltbus.services.settings import NatsSettings

from .base import StoreBase
from .limits import clip_span
from .types import Span
from .views import span_event

_NS = 1e9
DEFAULT_LIMITS = NatsSettings()
"""Span size limits when a caller names none."""
RUNNING_KEPT = 4096
"""Attempts a store client remembers having seen alive, the most recent (a long-lived client, e.g. ``voltbus
store``'s, records spans of every attempt ever run: issue 25); one forgotten is read again at its next span."""


def _attrs(values: Any) -> dict[str, Any]:
    """OpenTelemetry attributes as a plain dict: sequences (tuples there) as lists, keys as strings.

    >>> _attrs({"a": (1, 2), 3: "x"})
    {'a': [1, 2], '3': 'x'}
    """
    out = dict(values) if values else {}
    for key, value in out.items():
        if type(value) is tuple:  # same keys: changing a value while iterating is safe
            out[key] = list(value)
    if not all(type(k) is str for k in out):  # OpenTelemetry keeps string keys only; a hand-built span may not
        out = {str(k): v for k, v in out.items()}
    return out


_resource_held: tuple[Any, dict[str, Any]] = (None, {})
"""The last resource converted and its attributes: a tracer's spans share one resource."""


def _resource(resource: Any) -> dict[str, Any]:
    global _resource_held
    if resource is None:
        return {}
    held, attributes = _resource_held
    if held is not resource:
        attributes = _attrs(resource.attributes)
        _resource_held = (resource, attributes)
    return {k: list(v) if type(v) is list else v for k, v in attributes.items()}  # each span its own lists


def span_from_otel(readable: Any, rollout_id: str, attempt_id: str, sequence_id: int) -> Span:
    """An OpenTelemetry ``ReadableSpan`` as a store Span (ids as hex, times in seconds)."""
    ctx = readable.get_span_context()
    parent = readable.parent
    status = readable.status
    return Span(
        rollout_id=rollout_id,
        attempt_id=attempt_id,
        sequence_id=sequence_id,
        trace_id=format(ctx.trace_id, "032x"),
        span_id=format(ctx.span_id, "016x"),
        parent_id=format(parent.span_id, "016x") if parent is not None else None,
        name=readable.name,
        status=SpanStatus(status_code=status.status_code.name, description=status.description),
        attributes=_attrs(readable.attributes),
        events=[
            SpanEventInfo(
                name=e.name, timestamp=e.timestamp / _NS if e.timestamp else None, attributes=_attrs(e.attributes)
            )
            for e in readable.events
        ],
        start_time=readable.start_time / _NS if readable.start_time else None,
        end_time=readable.end_time / _NS if readable.end_time else None,
        resource_attributes=_resource(readable.resource),
    )


def reward_event(span: Span) -> RewardReported | None:
    """The reward a reward span carries, as its own event (what training data joins on), or None."""
    dimensions = get_rewards_from_span(span)
    if not dimensions:
        return None
    return RewardReported(
        event_id=derive_id(span.rollout_id, span.attempt_id, "reward", span.span_id),
        rollout_id=span.rollout_id,
        attempt_id=span.attempt_id,
        value=dimensions[0].value,
        dimensions={d.name: d.value for d in dimensions},
        primary_key=dimensions[0].name,
        at=span.end_time or span.start_time or 0.0,
    )


def events_of(spans: Sequence[Span], limits: NatsSettings | None = None) -> list[SpanRecorded | RewardReported]:
    """The events recording ``spans``: one per span (attributes within ``limits``' span sizes, see
    ``limits``), plus a reward event per reward span."""
    cfg = limits or DEFAULT_LIMITS
    events: list[SpanRecorded | RewardReported] = [
        span_event(clip_span(s, cfg.span_value_max_bytes, cfg.span_max_bytes)) for s in spans
    ]
    return events + [e for s in spans if (e := reward_event(s)) is not None]


class SpanMethods(StoreBase):
    """Recording spans of attempts."""

    _running: dict[tuple[str, str], None]
    """Attempts this client saw alive (and moved to running if it could), oldest first, at most ``RUNNING_KEPT``."""

    async def _seen_alive(self, rollout_id: str, attempt_id: str, at: float) -> None:
        """Check the attempt exists; the first sign of life moves a preparing attempt this client may change (one
        it claimed, or an unkeyed one) to running."""
        key = (rollout_id, attempt_id)
        if key in self._running:
            return
        state = await self._state(rollout_id)
        attempt = state.attempt(attempt_id)
        if attempt is None:
            raise UnknownAttempt(rollout_id, attempt_id)
        if attempt.status == "preparing" and attempt.holder_key in (None, self.holder.public):  # only its holder may
            await self._apply(rollout_id, MarkAttemptRunning(rollout_id=rollout_id, attempt_id=attempt_id, at=at))
        self._running[key] = None
        while len(self._running) > RUNNING_KEPT:
            self._running.pop(next(iter(self._running)))

    async def add_many_spans(self, spans: Sequence[Span]) -> list[Span]:
        """Record spans (a repeated span id of the same attempt is stored once); returns them."""
        for rollout_id, attempt_id in dict.fromkeys((s.rollout_id, s.attempt_id) for s in spans):
            await self._seen_alive(rollout_id, attempt_id, self.clock())
        highest: dict[str, int] = {}
        for s in spans:
            highest[s.rollout_id] = max(highest.get(s.rollout_id, 0), s.sequence_id)
        for rollout_id, seq in highest.items():  # later allocations come after any id given explicitly
            await self.log.raise_sequence(rollout_id, seq)
        await self.log.publish_spans(events_of(spans, self.settings))
        return list(spans)

    async def add_span(self, span: Span) -> Span:
        """Record one span of an attempt."""
        return (await self.add_many_spans([span]))[0]

    async def add_otel_span(
        self, rollout_id: str, attempt_id: str, readable_span: Any, sequence_id: int | None = None
    ) -> Span:
        """Record an OpenTelemetry span, taking the next sequence id when none is given."""
        seq = sequence_id if sequence_id is not None else await self.get_next_span_sequence_id(rollout_id, attempt_id)
        return await self.add_span(span_from_otel(readable_span, rollout_id, attempt_id, seq))

    async def get_next_span_sequence_id(self, rollout_id: str, attempt_id: str) -> int:
        """The next span sequence id of a rollout (shared by all its attempts)."""
        return await self.log.next_sequence(rollout_id)

    async def get_many_span_sequence_ids(self, rollout_attempt_ids: Sequence[tuple[str, str]]) -> list[int]:
        """Consecutive sequence ids per rollout, in request order."""
        counts: dict[str, int] = {}
        for rollout_id, _ in rollout_attempt_ids:
            counts[rollout_id] = counts.get(rollout_id, 0) + 1
        last = {rid: await self.log.next_sequence(rid, n) for rid, n in counts.items()}
        given: dict[str, int] = {rid: last[rid] - n for rid, n in counts.items()}
        out = []
        for rollout_id, _ in rollout_attempt_ids:
            given[rollout_id] += 1
            out.append(given[rollout_id])
        return out
