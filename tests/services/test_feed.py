"""The projector's feed on a real nats-server: every stored message once and in order, whatever its payload;
a gap in deliveries re-subscribes after the last message received; a full buffer pauses the server."""

from __future__ import annotations

import asyncio
import datetime as dt
import random
import time

import pytest

from voltbus.services.eventlog import BadEvent, Envelope, EventLog, feed

from ..conftest import wait_for
from .test_eventlog import queued


async def take(f: feed.Feed, count: int, timeout: float = 10.0) -> list[feed.Item]:
    """Items from ``f`` until ``count`` are taken, or fail at the deadline."""
    items: list[feed.Item] = []
    deadline = time.monotonic() + timeout
    while len(items) < count:
        assert time.monotonic() < deadline, f"the feed delivered {[i.seq for i in items]} and then nothing"
        items += await f.batch(100, 0.1)
    return items


def test_stored_times_are_the_seconds_nats_py_metadata_gives() -> None:
    """``feed.seconds`` is a cheaper ``datetime.fromtimestamp(ns / 1e9).timestamp()`` (what nats-py's
    ``msg.metadata`` holds): the same float for any time, at a half microsecond and just beside it too."""
    rng = random.Random(7)
    times = [rng.randrange(1_600_000_000 * 10**9, 2_100_000_000 * 10**9) for _ in range(20_000)]
    times += [t // 1000 * 1000 + d for t in times[:5000] for d in (499, 500, 501, 999)]
    expected = [dt.datetime.fromtimestamp(t / 1e9, dt.UTC).timestamp() for t in times]
    assert [feed.seconds(t) for t in times] == expected


async def test_a_message_without_payload_is_handed_out_in_its_place(eventlog: EventLog) -> None:
    await eventlog.append([queued("first")], expected_seq=0)
    await eventlog.js.publish(eventlog.topology.rollout_events("ro-empty"), b"")  # poison: no payload at all
    await eventlog.append([queued("third")], expected_seq=0)
    f = await eventlog.feed("control").open(1)
    try:
        items = await take(f, 3)
        assert [i.seq for i in items] == [1, 2, 3] and isinstance(items[1], BadEvent)
        assert isinstance(items[0], Envelope) and isinstance(items[2], Envelope)
        assert f.subscriptions == 1  # delivered in order the first time: no re-subscription
        assert await f.batch(100, 0.2) == []
    finally:
        await f.close()


async def test_a_gap_in_deliveries_resubscribes_after_the_last_message_received(eventlog: EventLog) -> None:
    for i in range(3):
        await eventlog.append([queued(f"r{i}")], expected_seq=0)
    f = await eventlog.feed("control").open(1)
    try:
        first = await take(f, 3)
        f.expect += 1  # as if a delivery had been lost on the way: the next one does not fit
        for i in range(3, 6):
            await eventlog.append([queued(f"r{i}")], expected_seq=0)
        rest = await take(f, 3)
        assert [i.seq for i in first + rest] == [1, 2, 3, 4, 5, 6]  # nothing lost, nothing twice
        # re-subscribed for the gap (a slow machine may re-subscribe once more for a stall: STALL_S); the new
        # consumer's deliveries can come before the reply that created it, so wait for the replacement to end
        assert f.task is not None
        await asyncio.wait_for(f.task, timeout=10)
        assert f.subscriptions >= 2
    finally:
        await f.close()


@pytest.mark.timeout(60)
async def test_a_full_buffer_pauses_the_server(eventlog: EventLog, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(feed, "BUFFER", 50)
    monkeypatch.setattr(feed, "HEARTBEAT_S", 0.3)  # the server asks again (stalled) at every heartbeat
    await eventlog.append_many([queued(f"r{i}", size=8000) for i in range(3000)], expected_seq=0)  # 24 MB
    f = await eventlog.feed("control").open(1)  # and nothing takes from it for a while
    try:
        # replies held back: the first window's flow control, then a stall reply at each heartbeat
        await wait_for(lambda: len(f.held) >= 4, timeout=20, what="flow-control replies held back")
        filled = len(f.buffer)
        await wait_for(lambda: len(f.held) >= 8, timeout=20, what="more heartbeats")
        assert len(f.buffer) == filled < 3000  # later heartbeats let nothing more in
        items = await take(f, 3000, timeout=30)  # taking makes room and lets the server go on
        assert [i.seq for i in items] == list(range(1, 3001))
    finally:
        await f.close()


async def test_readers_of_a_whole_stream_ask_the_server_for_every_subject(eventlog: EventLog) -> None:
    """The feed, a replay and the time lookup create their consumers on ``>``, not on ``<namespace>.>``: on the
    latter the server matches every subject the stream holds before the first delivery (4.5 s at 1,000,000
    rollouts; a projector re-subscribed every 5 s and never caught up), on ``>`` it starts at once."""
    await eventlog.append([queued("one")], expected_seq=0)
    filters: set[str | None] = set()

    async def seen() -> None:
        for info in await eventlog.js.consumers_info(eventlog.topology.control_stream):
            if info.config.durable_name is None:  # not the runners' dispatch consumer
                filters.add(info.config.filter_subject)

    f = await eventlog.feed("control").open(1)
    try:
        await take(f, 1)
        await seen()
    finally:
        await f.close()
    replay = eventlog.replay("control", follow=True)
    assert isinstance(await anext(replay), Envelope)
    await seen()
    await replay.aclose()
    assert await eventlog.first_seq_at("control", 0.0) == 1
    assert filters == {">"}, filters
