"""The span path: pipelined publishing (one message per event, or batches) is deduplicated, bounded, and never
drops silently."""

from __future__ import annotations

import pytest

from tests.schemas.samples import SAMPLES
from voltbus.schemas import codec
from voltbus.schemas.base import derive_id
from voltbus.schemas.errors import PublishFailed
from voltbus.schemas.spans import SpanBatch, SpanRecorded, SpanStatus
from voltbus.schemas.subjects import subject_for
from voltbus.services.eventlog import Envelope, EventLog
from voltbus.services.eventlog.append import Message
from voltbus.services.eventlog.spans import batched
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


async def test_a_batched_publish_stores_one_message_per_shard_and_a_retry_once(eventlog: EventLog) -> None:
    events = [span(f"r{i % 3}", i) for i in range(30)]
    await eventlog.publish_spans(events, batch=True)
    await eventlog.publish_spans(events, batch=True)  # the same events again: the same batches, deduplicated
    messages = [e async for e in eventlog.replay("spans")]
    assert all(isinstance(m, Envelope) and isinstance(m.event, SpanBatch) for m in messages)
    assert len(messages) == len({m.subject for m in messages}) <= 3
    got = [e async for e in eventlog.telemetry()]
    assert sorted(e.event.event_id for e in got) == sorted(e.event_id for e in events)  # type: ignore[union-attr]
    for m in messages:  # each event under its message's sequence, in the order published
        mine = [e for e in got if e.seq == m.seq]
        assert [e.event for e in mine] == [e for e in events if subject_for(eventlog.topology, e) == m.subject]


def test_batches_are_cut_at_the_byte_limit_and_keep_single_events_as_they_are() -> None:
    messages = [Message("s.1", codec.encode(span("r", i)), span("r", i).event_id) for i in range(10)]
    size = len(messages[0].data)
    packs = batched(messages, 3 * size + 3)
    assert [len(p.event_ids) for p in packs] == [3, 3, 3, 1]
    assert packs[-1] is messages[-1]  # alone in its pack: stored as the event it is, under its own id
    assert [i for p in packs for i in p.event_ids] == [m.event_id for m in messages]
    for p in packs[:-1]:
        batch = codec.decode_spans(p.data)
        assert isinstance(batch, SpanBatch) and [codec.encode(e) for e in batch.events] == [
            m.data for m in messages if m.event_id in p.event_ids
        ]


def test_a_batch_is_encoded_as_the_schema_encodes_it() -> None:
    sample = SAMPLES["SpanBatch"]
    assert isinstance(sample, SpanBatch)
    messages = [Message("s", codec.encode(e), e.event_id) for e in sample.events]
    [packed] = batched(messages, 1 << 20)
    assert packed.data == codec.encode(sample) and packed.event_id == sample.event_id


async def test_rejected_batches_raise_naming_their_events(nats_settings: NatsSettings) -> None:
    tight = nats_settings.model_copy(
        update={"spans_max_bytes": 64 * 1024, "request_timeout_s": 0.5, "publish_retries": 1, "span_batch_bytes": 8192}
    )
    log = await EventLog.connect(tight)
    try:
        events = [span("full", i) for i in range(400)]  # ~200 KiB, over the 64 KiB cap
        with pytest.raises(PublishFailed) as err:
            await log.publish_spans(events, batch=True)
        rejected = set(err.value.event_ids)
        kept = [e async for e in log.telemetry()]
        assert rejected and len(kept) + len(rejected) == len(events)
        assert {e.event.event_id for e in kept}.isdisjoint(rejected)  # type: ignore[union-attr]
    finally:
        await log.close()
