"""The span path: pipelined publishing is deduplicated, bounded, and never drops silently."""

from __future__ import annotations

import pytest

from voltbus.schemas.base import derive_id
from voltbus.schemas.errors import PublishFailed
from voltbus.schemas.spans import SpanRecorded, SpanStatus
from voltbus.services.eventlog import Envelope, EventLog
from voltbus.services.settings import NatsSettings


def span(rid: str, n: int) -> SpanRecorded:
    return SpanRecorded(
        event_id=derive_id(rid, "span", n),
        rollout_id=rid,
        attempt_id="a1",
        sequence_id=n + 1,
        trace_id=f"{n:032x}",
        span_id=f"{n:016x}",
        name="llm.call",
        start_time=float(n),
        end_time=float(n) + 0.5,
        attributes={"round": n, "tags": ["x", "y"]},
        status=SpanStatus(status_code="OK"),
    )


async def test_spans_are_stored_once_even_when_republished(eventlog: EventLog) -> None:
    events = [span(f"r{i % 17}", i) for i in range(3000)]
    await eventlog.publish_spans(events)
    await eventlog.publish_spans(events[:500])  # a retry of part of the burst
    got = [e async for e in eventlog.replay("spans")]
    assert all(isinstance(e, Envelope) for e in got)
    assert sorted(e.event.event_id for e in got) == sorted(e.event_id for e in events)
    shards = {e.subject for e in got}
    assert all(s.startswith(f"{eventlog.topology.namespace}.sp.") for s in shards) and 1 < len(shards) <= 17


async def test_rejected_spans_raise_naming_the_events(nats_settings: NatsSettings) -> None:
    tight = nats_settings.model_copy(
        update={"spans_max_bytes": 64 * 1024, "request_timeout_s": 0.5, "publish_retries": 1}
    )
    log = await EventLog.connect(tight)
    try:
        events = [span("full", i) for i in range(400)]  # ~200 KiB, over the 64 KiB cap
        with pytest.raises(PublishFailed) as err:
            await log.publish_spans(events)
        rejected = set(err.value.event_ids)
        kept = [e async for e in log.replay("spans")]
        assert rejected and len(kept) + len(rejected) == len(events)
        assert {e.event.event_id for e in kept}.isdisjoint(rejected)
    finally:
        await log.close()
