"""Availability: attempts never stay ``running`` after their runner died, and heartbeats outlive bus outages.

Finding 13: a runner killed with SIGKILL while holding rollouts (default ``RolloutConfig``, no timeouts)
left them running forever, and a restarted runner with the same worker ids did not settle them.
Finding 14: after a bus outage the runner's heartbeat thread died and never beat again.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from voltbus.schemas.workers import WorkerStatusReported
from voltbus.services.eventlog import Envelope
from voltbus.services.runner.heartbeat import Heartbeat
from voltbus.services.settings import NatsSettings
from voltbus.store import connect

from ..conftest import start_server, wait_for


async def test_heartbeats_resume_after_the_bus_restarts(tmp_path: Path) -> None:
    server = start_server(tmp_path / "nats")
    nats = NatsSettings(url=server.url, namespace="live", request_timeout_s=1.0, connect_timeout_s=1.0)
    store = await connect(settings=nats)
    beat = Heartbeat(nats, ["hb-0"], interval=0.1)
    beat.start()
    try:
        await wait_for(lambda: beat.beats >= 2, 20, "the first heartbeats")
        await asyncio.to_thread(server.kill)  # the outage: every beat now fails
        await wait_for(lambda: getattr(beat, "failing", False) or not beat.is_alive(), 20, "a beat to fail")
        await asyncio.to_thread(server.start)  # the same port and store
        assert beat.is_alive(), "the heartbeat thread died during the outage"
        before = beat.beats
        await wait_for(lambda: beat.beats >= before + 3, 30, "heartbeats after the bus came back")
        seen = await wait_for(lambda: last_report_time(store, "hb-0"), 20, "a stored report")
        assert beat.is_alive() and not beat.failing
        after = await wait_for(lambda: last_report_time(store, "hb-0", newer_than=seen), 20, "a newer heartbeat stored")
        assert after > seen
    finally:
        await asyncio.to_thread(beat.stop)
        await store.close()
        await asyncio.to_thread(server.stop)


async def last_report_time(store: object, worker_id: str, newer_than: float = 0.0) -> float | None:
    """Server receive time of the worker's latest report, when newer than ``newer_than``."""
    subject = store.topology.worker(worker_id)  # type: ignore[attr-defined]
    try:
        reports = [e async for e in store.log.replay("control", subject=subject)]  # type: ignore[attr-defined]
    except Exception:  # the client is still reconnecting: not yet
        return None
    times = [e.time for e in reports if isinstance(e, Envelope) and isinstance(e.event, WorkerStatusReported)]
    return times[-1] if times and times[-1] > newer_than else None
