"""Wiring of the coordinator: catch up on the log, then follow it, tick, and park dead letters."""

from __future__ import annotations

import asyncio
import logging
import time

from voltbus.services.settings import Settings
from voltbus.store import connect

from .handlers import catch_up, dead_letters, follow_control, follow_spans, supervised, timer
from .tracker import Tracker

log = logging.getLogger(__name__)


async def run(settings: Settings, stop: asyncio.Event | None = None) -> None:
    """Run the coordinator until ``stop`` is set (or forever). Two coordinators at once are safe."""
    store = await connect(settings=settings.nats, name="voltbus-coordinator")
    tracker = Tracker()
    delay = settings.coordinator.restart_delay_s
    try:
        control = [await catch_up(store, tracker)]
        spans = [0]
        since = (tracker.oldest_active_start() or time.time()) - 1.0
        log.info("coordinator caught up at control seq %d; %d rollouts unfinished", control[0], len(tracker.rollouts))
        async with asyncio.TaskGroup() as tasks:
            workers = [
                tasks.create_task(supervised("control reader", lambda: follow_control(store, tracker, control), delay)),
                tasks.create_task(
                    supervised("spans reader", lambda: follow_spans(store, tracker, spans, since), delay)
                ),
                tasks.create_task(supervised("dead letters", lambda: dead_letters(store), delay)),
                tasks.create_task(
                    supervised("timer", lambda: timer(store, tracker, settings.coordinator.tick_s), delay)
                ),
            ]
            await (stop.wait() if stop else asyncio.Event().wait())
            for task in workers:
                task.cancel()
    finally:
        await store.close()
