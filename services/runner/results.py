"""What an agent's return value means (Agent Lightning 0.3's rules): spans to record, or an error."""

from __future__ import annotations

import logging
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan

from voltbus.services.clients.store import AttemptedRollout, Span, Store
from voltbus.services.clients.store.spans import span_from_otel
from voltbus.services.clients.telemetry.emitters import emit_reward
from voltbus.services.clients.telemetry.tracing import SpanCore

log = logging.getLogger(__name__)


async def record_result(store: Store, rollout: AttemptedRollout, result: Any, traced: list[Span]) -> list[Any]:
    """Record what the agent returned; return the spans it amounts to (``on_rollout_end``'s).

    None: the tracer already has the spans; they are ``traced``, the attempt's spans flushed so far (Agent
    Lightning's ``get_last_trace()``). A number: a reward span, and ``traced`` without it (Agent Lightning's
    quirk). A list of OpenTelemetry spans, voltbus Spans or SpanCore records: stored as the attempt's spans.
    Anything else is a TypeError.
    """
    rid, aid = rollout.rollout_id, rollout.attempt.attempt_id
    if result is None:
        return traced
    if isinstance(result, bool | int | float):
        emit_reward(float(result))  # inside the attempt's tracing context: exported with its spans
        return traced
    if not isinstance(result, list):
        raise TypeError(f"Invalid raw result type {type(result).__name__}: return None, a number or a list of spans")
    if not result:
        log.warning("rollout_id=%s attempt_id=%s: the agent returned an empty list of spans", rid, aid)
        return []
    if all(isinstance(s, Span) for s in result):
        return await store.add_many_spans(result)
    if all(isinstance(s, ReadableSpan | SpanCore) for s in result):
        seqs = await store.get_many_span_sequence_ids([(rid, aid)] * len(result))
        spans = [_as_span(s, rid, aid, seq) for s, seq in zip(result, seqs, strict=True)]
        return await store.add_many_spans(spans)
    raise ValueError("Invalid raw result type: expected a list of ReadableSpan, Span or SpanCore, not a mix")


def _as_span(item: ReadableSpan | SpanCore, rid: str, aid: str, seq: int) -> Span:
    if isinstance(item, ReadableSpan):
        return span_from_otel(item, rid, aid, seq)
    import uuid

    return Span(
        rollout_id=rid,
        attempt_id=aid,
        sequence_id=seq,
        trace_id=uuid.uuid4().hex,
        span_id=uuid.uuid4().hex[:16],
        name=item.name,
        status=item.status,
        attributes=item.attributes,
        start_time=item.start_time,
        end_time=item.end_time,
    )
