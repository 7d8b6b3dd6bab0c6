"""Wiring of the coordinator: catch up on the log (from its latest snapshot), then follow it, tick, park dead
letters and snapshot its state."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from voltbus.services.clients.store import connect
from voltbus.services.restart import supervised
from voltbus.services.settings import Settings

from .handlers import catch_up, catch_up_spans, dead_letters, follow_control, follow_spans, timer
from .liveness import Watch
from .snapshot import load, snapshot_now, snapshots
from .tracker import Tracker

log = logging.getLogger(__name__)


async def run(settings: Settings, stop: asyncio.Event | None = None) -> None:
    """Run the coordinator until ``stop`` is set (or forever). Two coordinators at once are safe."""
    store = await connect(settings=settings.nats, name="voltbus-coordinator")
    tracker = Tracker()
    delay = settings.coordinator.restart_delay_s
    stuck: set[asyncio.Task[None]] = set()
    try:
        started, every = time.monotonic(), settings.coordinator.snapshot_every_s
        written = [await load(store, tracker) if every > 0 else 0]
        control = [await catch_up(store, tracker, written[0])]
        since = (tracker.oldest_active_start() or time.time()) - 1.0
        spans = [await catch_up_spans(store, tracker, since)]  # no check may run on an empty view of the spans
        log.info("coordinator caught up at control seq %d (from snapshot seq %d) in %.2fs; %d rollouts unfinished",
                 control[0], written[0], time.monotonic() - started, len(tracker.rollouts))  # fmt: skip
        watch = Watch(settings.coordinator.worker_timeout_s, control, spans)
        bodies = {
            "control reader": lambda: follow_control(store, tracker, control),
            "spans reader": lambda: follow_spans(store, tracker, spans, since),
            "dead letters": lambda: dead_letters(store),
            "timer": lambda: timer(store, tracker, settings.coordinator.tick_s, watch),
        }
        limit, copies = settings.coordinator.snapshot_max_bytes, settings.nats.replicas
        if every > 0:
            bodies["snapshots"] = lambda: snapshots(store, tracker, control, every, limit, written, copies)
        tasks = [
            asyncio.create_task(supervised(f"coordinator {name}", body, delay, log)) for name, body in bodies.items()
        ]
        await (stop.wait() if stop else asyncio.Event().wait())
        stuck = set(tasks)
        for _ in range(3):  # a cancel swallowed below (3.11's wait_for) leaves a task running: cancel it again
            for task in stuck:
                task.cancel()
            _, stuck = await asyncio.wait(stuck, timeout=5)
            if not stuck:
                break
        if every > 0 and not stuck:  # the next start folds only what comes after this stop
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(10):
                    await snapshot_now(store, tracker, control[0], limit, written, copies)
        if stuck:
            log.warning("coordinator: %d task(s) did not stop in 15s; closing the connection under them", len(stuck))
    finally:
        await store.close()
    for task in stuck:  # a cancel swallowed below (3.11's wait_for) left it waiting on what no close wakes: again
        task.cancel()
    if stuck and (await asyncio.wait(stuck, timeout=5))[1]:
        log.error("coordinator: %d task(s) still running after the connection closed", len(stuck))
