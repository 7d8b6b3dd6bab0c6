"""Wiring of the coordinator: catch up on the log, then follow it, tick, and park dead letters."""

from __future__ import annotations

import asyncio
import logging
import time

from voltbus.services.clients.store import connect
from voltbus.services.restart import supervised
from voltbus.services.settings import Settings

from .handlers import catch_up, catch_up_spans, dead_letters, follow_control, follow_spans, timer
from .liveness import Watch
from .tracker import Tracker

log = logging.getLogger(__name__)


async def run(settings: Settings, stop: asyncio.Event | None = None) -> None:
    """Run the coordinator until ``stop`` is set (or forever). Two coordinators at once are safe."""
    store = await connect(settings=settings.nats, name="voltbus-coordinator")
    tracker = Tracker()
    delay = settings.coordinator.restart_delay_s
    stuck: set[asyncio.Task[None]] = set()
    try:
        control = [await catch_up(store, tracker)]
        since = (tracker.oldest_active_start() or time.time()) - 1.0
        spans = [await catch_up_spans(store, tracker, since)]  # no check may run on an empty view of the spans
        log.info("coordinator caught up at control seq %d; %d rollouts unfinished", control[0], len(tracker.rollouts))
        watch = Watch(settings.coordinator.worker_timeout_s, control, spans)
        bodies = {
            "control reader": lambda: follow_control(store, tracker, control),
            "spans reader": lambda: follow_spans(store, tracker, spans, since),
            "dead letters": lambda: dead_letters(store),
            "timer": lambda: timer(store, tracker, settings.coordinator.tick_s, watch),
        }
        tasks = [
            asyncio.create_task(supervised(f"coordinator {name}", body, delay, log)) for name, body in bodies.items()
        ]
        await (stop.wait() if stop else asyncio.Event().wait())
        for task in tasks:
            task.cancel()
        _, stuck = await asyncio.wait(tasks, timeout=5)
        if stuck:
            log.warning("coordinator: %d task(s) did not stop in 5s; closing the connection under them", len(stuck))
    finally:
        await store.close()
    for task in stuck:  # a cancel swallowed below (3.11's wait_for) left it waiting on what no close wakes: again
        task.cancel()
    if stuck and (await asyncio.wait(stuck, timeout=5))[1]:
        log.error("coordinator: %d task(s) still running after the connection closed", len(stuck))
