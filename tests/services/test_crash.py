"""kill -9 of nats-server in the middle of an append burst: every acknowledged event survives, once."""

from __future__ import annotations

import asyncio
from pathlib import Path

import nats.errors
import pytest

from voltbus.schemas.errors import VoltbusError
from voltbus.services.eventlog import Envelope, EventLog
from voltbus.services.settings import NatsSettings

from ..conftest import start_server, wait_for
from .test_eventlog import queued


@pytest.mark.timeout(180)
async def test_kill9_mid_burst_loses_no_acknowledged_event(tmp_path: Path) -> None:
    server = start_server(tmp_path / "nats")
    settings = NatsSettings(url=server.url, namespace="crash", request_timeout_s=1.0, publish_retries=0)
    log = await EventLog.connect(settings)
    acked: dict[str, int] = {}
    unknown: dict[str, object] = {}
    stop = asyncio.Event()

    async def writer(w: int) -> None:
        i = 0
        while not stop.is_set():
            event = queued(f"w{w}-{i}")
            try:
                acked[event.event_id] = (await log.append([event], expected_seq=0)).seq
            except (VoltbusError, nats.errors.Error, TimeoutError):
                unknown[event.event_id] = event  # outcome unknown: maybe stored, maybe not
            i += 1

    try:
        tasks = [asyncio.create_task(writer(w)) for w in range(8)]
        await wait_for(lambda: len(acked) >= 400, timeout=60, what="400 acknowledged appends")
        server.kill()
        acked_before_kill = dict(acked)
        server.start()
        await wait_for(lambda: len(acked) >= len(acked_before_kill) + 400, timeout=90, what="appends after restart")
        stop.set()
        await asyncio.gather(*tasks)
        for event in unknown.values():  # the client's retry with the same id settles every unknown outcome
            acked[event.event_id] = (await log.append([event], expected_seq=0)).seq  # type: ignore[list-item]
        stored = [e async for e in log.replay()]
    finally:
        await log.close()
        server.stop()
    print(f"acked before kill {len(acked_before_kill)}, unknown {len(unknown)}, stored {len(stored)}")
    assert all(isinstance(e, Envelope) for e in stored)
    ids = [e.event.event_id for e in stored]  # type: ignore[union-attr]
    assert len(ids) == len(set(ids)), "an event was stored twice"
    assert set(acked_before_kill) <= set(ids), "an acknowledged event was lost"
    assert set(ids) == set(acked)
    assert [e.seq for e in stored] == list(range(1, len(stored) + 1)), "the stream has holes"
    assert {e.event.event_id: e.seq for e in stored} == acked  # type: ignore[union-attr]
