"""A projector's feed outlives a nats-server restart: its ordered consumer (kept in server memory) is
gone after the restart and nats-py does not notice, so the feed must re-subscribe on its own after
the last sequence it delivered (found by the kill -9 fault suite: the projector stopped advancing)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from voltbus.services.eventlog import EventLog
from voltbus.services.settings import NatsSettings

from ..conftest import start_server
from .test_eventlog import queued
from .test_feed import take


@pytest.mark.timeout(60)
async def test_feed_resumes_after_a_server_restart_without_repeating(tmp_path: Path) -> None:
    server = start_server(tmp_path / "nats")
    log = await EventLog.connect(NatsSettings(url=server.url, namespace="feed", request_timeout_s=2.0))
    try:
        for i in range(10):
            await log.append([queued(f"before-{i}")], expected_seq=0)
        feed = await log.feed("control").open(1)
        assert [i.seq for i in await take(feed, 10, 10)] == list(range(1, 11))
        server.kill()
        server.start()
        for i in range(10):
            await log.append([queued(f"after-{i}")], expected_seq=0)
        began = time.monotonic()
        assert [i.seq for i in await take(feed, 10, 20)] == list(range(11, 21))
        assert time.monotonic() - began < 10  # nats-py alone took 18 s here, or never resumed (the fault suite)
        assert await feed.batch(100, 0.2) == []  # nothing more, nothing repeated
        await feed.close()
    finally:
        await log.close()
        server.stop()
