"""The runner's tracer: OpenTelemetry spans attributed to the current attempt and exported to the log.

Which attempt a span belongs to is a context variable set around each rollout, so concurrent
rollouts in one process (async tasks or worker threads) never mix their spans. Ended spans queue up
in the process; ``flush`` publishes them on the spans stream with sequence ids taken from the
rollout's counter on the bus (one reservation per flush, ordered by end, independent of clocks).
A span that cannot be published stays queued and is retried; it is never dropped silently.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import queue
import threading
import time
from collections.abc import Iterator
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.trace import Status, StatusCode

from voltbus.schemas.base import Attributes
from voltbus.schemas.errors import VoltbusError
from voltbus.schemas.spans import RewardReported, SpanRecorded, SpanStatus
from voltbus.services.clients.store import Span
from voltbus.services.clients.store.spans import events_of, span_from_otel
from voltbus.services.clients.telemetry.tracing import SpanCore

from .langchain_tracing import LangchainTracing

log = logging.getLogger(__name__)

RETRY_S, RETRY_MOST_S = 0.2, 5.0
"""The first and the longest pause before spans the bus refused are tried again by a flush of all rollouts."""
current_attempt: contextvars.ContextVar[tuple[str, str] | None] = contextvars.ContextVar(
    "current_attempt", default=None
)
"""(rollout_id, attempt_id) whose spans are being recorded in this context."""
current_collector: contextvars.ContextVar[SpanProcessor | None] = contextvars.ContextVar(
    "current_collector", default=None
)
"""The span collector of the tracer recording this context's attempt (for spans of other providers)."""


class _Collector(SpanProcessor):
    """Keeps each ended span with the attempt that was current when it started."""

    def __init__(self) -> None:
        self.owners: dict[int, tuple[str, str]] = {}
        self.ended: queue.SimpleQueue[tuple[str, str, ReadableSpan]] = queue.SimpleQueue()
        self.lock = threading.Lock()

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        owner = current_attempt.get()
        if owner is not None:
            with self.lock:
                self.owners[span.context.span_id] = owner

    def on_end(self, span: ReadableSpan) -> None:
        with self.lock:
            owner = self.owners.pop(span.context.span_id, None)  # type: ignore[union-attr]
        if owner is not None:
            self.ended.put((owner[0], owner[1], span))

    def shutdown(self) -> None:
        return None

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


class LogTracer(LangchainTracing):
    """A tracer whose spans end up on the spans stream of the log (``get_langchain_handler``: LangChain runs too)."""

    def __init__(self, store: Any, name: str = "voltbus") -> None:
        self.store = store
        self.collector = _Collector()
        self.provider = TracerProvider()
        self.provider.add_span_processor(self.collector)
        self.otel = self.provider.get_tracer(name)
        self.pending: dict[str, list[tuple[str, ReadableSpan]]] = {}
        self.published: dict[str, float] = {}
        """rollout id -> ``time.monotonic()`` of its last stored spans (a sign of life for its attempt)."""
        self.unsent: dict[str, list[SpanRecorded | RewardReported]] = {}
        """rollout id -> the events of a flush the bus did not acknowledge: the next flush publishes them again
        first, as they are."""
        self._locks: dict[str, asyncio.Lock] = {}
        self.backoff: dict[str, tuple[float, float]] = {}
        """rollout id -> (``time.monotonic()`` before which a flush of all skips it, its pause): spans the bus
        refused are tried again after 0.2 s, then twice as long each time, up to ``RETRY_MOST_S``."""
        self.traces: dict[tuple[str, str], list[Span]] = {}
        """(rollout id, attempt id) -> the attempt's spans flushed so far, as the store holds them (sequence ids
        included): ``get_last_trace``; kept from ``attempt`` until ``forget``."""

    @contextlib.contextmanager
    def attempt(self, rollout_id: str, attempt_id: str) -> Iterator[None]:
        """Attribute every span started inside this block (and in tasks/threads it spawns) to the attempt."""
        self.traces.setdefault((rollout_id, attempt_id), [])
        token = current_attempt.set((rollout_id, attempt_id))
        routed = current_collector.set(self.collector)
        try:
            yield
        finally:
            current_collector.reset(routed)
            current_attempt.reset(token)

    def get_last_trace(self) -> list[Span]:
        """Agent Lightning's ``get_last_trace``: the current attempt's spans flushed so far (a runner with hooks
        flushes them before ``on_trace_end``, so that hook sees every span of the agent), in sequence id order."""
        owner = current_attempt.get()
        return self.trace_of(*owner) if owner is not None else []

    def trace_of(self, rollout_id: str, attempt_id: str) -> list[Span]:
        """The attempt's spans flushed so far (a copy)."""
        return list(self.traces.get((rollout_id, attempt_id), ()))

    def forget(self, rollout_id: str, attempt_id: str) -> None:
        """Drop the attempt's kept spans (its rollout ended here)."""
        self.traces.pop((rollout_id, attempt_id), None)

    def create_span(
        self,
        name: str,
        attributes: Attributes | None = None,
        timestamp: float | None = None,
        status: SpanStatus | None = None,
    ) -> SpanCore:
        """A zero-duration span, exported like any other."""
        at_ns = int((time.time() if timestamp is None else timestamp) * 1e9)
        span = self.otel.start_span(name, attributes=dict(attributes or {}), start_time=at_ns)
        code = (status or SpanStatus(status_code="OK")).status_code
        span.set_status(Status(StatusCode[code], (status.description if status else None)))
        span.end(end_time=at_ns)
        return SpanCore(
            name=name,
            status=status or SpanStatus(status_code="OK"),
            attributes=dict(attributes or {}),
            start_time=at_ns / 1e9,
            end_time=at_ns / 1e9,
        )

    def _drain(self) -> None:
        while True:
            try:
                rollout_id, attempt_id, span = self.collector.ended.get_nowait()
            except queue.Empty:
                return
            self.pending.setdefault(rollout_id, []).append((attempt_id, span))

    async def flush(self, rollout_id: str | None = None) -> int:
        """Publish the ended spans (of one rollout, or all); return how many. Raise if the bus refuses them: the
        first refusal, once every other rollout's spans were published (one rollout's spans that the bus keeps
        refusing do not hold back the others').

        Each rollout's spans go out in end order, one flush of that rollout at a time; different
        rollouts flush concurrently (one lock for all serialized every slot's end behind the others)."""
        self._drain()
        sent, refused, now = 0, None, time.monotonic()
        for rid in [rollout_id] if rollout_id else list(dict.fromkeys([*self.unsent, *self.pending])):
            if rollout_id is None and self.backoff.get(rid, (0.0, 0.0))[0] > now:
                continue  # refused lately: tried again when its pause is over (a flush of it alone tries at once)
            try:
                sent += await self._flush_one(rid)
                self.backoff.pop(rid, None)
            except Exception as exc:  # kept for the next flush (see _flush_one); raised below
                refused = refused or exc
                pause = min(self.backoff.get(rid, (0.0, RETRY_S / 2))[1] * 2, RETRY_MOST_S)
                self.backoff[rid] = (time.monotonic() + pause, pause)
        if len(self._locks) > 10_000:  # forget locks of rollouts with nothing pending and no flush running
            self._locks = {
                r: lock for r, lock in self._locks.items() if lock.locked() or self.pending.get(r) or r in self.unsent
            }
        if refused is not None:
            raise refused
        return sent

    async def _flush_one(self, rid: str) -> int:
        async with self._locks.setdefault(rid, asyncio.Lock()):
            sent = 0
            if (unsent := self.unsent.pop(rid, None)) is not None:
                sent += await self._publish(rid, unsent)
            spans = self.pending.pop(rid, None)
            if not spans:
                return sent
            try:
                last = await self.store.log.next_sequence(rid, len(spans))
            except BaseException as exc:
                self.pending[rid] = spans + self.pending.get(rid, [])  # kept, in order, for the next flush
                if isinstance(exc, VoltbusError):
                    log.error("rollout_id=%s: %d spans not published yet; they stay queued", rid, len(spans))
                raise
            first = last - len(spans) + 1
            records = [span_from_otel(s, rid, aid, first + i) for i, (aid, s) in enumerate(spans)]
            for record in records:  # numbered, and published now or retried until they are: get_last_trace's
                kept = self.traces.get((rid, record.attempt_id))
                if kept is not None:
                    kept.append(record)
            return sent + await self._publish(rid, events_of(records, self.store.settings))

    async def _publish(self, rid: str, events: list[SpanRecorded | RewardReported]) -> int:
        """Publish one flush's events; those the bus did not take are kept, to be published again as they are
        (the same events make the same ``SpanBatch`` ids: what was stored is not stored twice)."""
        try:
            await self.store.log.publish_spans(events, batch=True)
        except BaseException as exc:
            self.unsent[rid] = events
            if isinstance(exc, VoltbusError):
                log.error("rollout_id=%s: %d span events not published yet; they stay queued", rid, len(events))
            raise
        self.published[rid] = time.monotonic()
        return sum(isinstance(e, SpanRecorded) for e in events)

    def discard(self, rollout_id: str) -> int:
        """Drop a rollout's queued spans (it ended where they can no longer be stored); return how many."""
        self._drain()
        unsent = self.unsent.pop(rollout_id, [])
        self.backoff.pop(rollout_id, None)
        return len(self.pending.pop(rollout_id, [])) + sum(isinstance(e, SpanRecorded) for e in unsent)

    def shutdown(self) -> None:
        """Stop the provider."""
        self.provider.shutdown()
