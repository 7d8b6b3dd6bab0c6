"""Heartbeats from a thread with its own event loop and connection, so a busy agent cannot block them.

Every interval: a sign of life for each running attempt that stored no span during the interval
(spans are signs of life too; the coordinator's unresponsiveness clock), and a worker heartbeat with
host stats for each slot. The worker heartbeats are written through the runner's own store on its
event loop when it answers within the interval: that store remembers the snapshots it wrote, so no
two connections race on a worker's subject (each race cost a conflict, a re-read and a retry on both
sides). When the loop is stuck, the thread writes them itself. Nothing the bus does ends the thread: a
failed beat (an outage, a reconnect) is logged once and the beats resume when the bus is back.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import platform
import socket
import threading
import time
from typing import Any

from voltbus.services.clients.store import connect
from voltbus.services.settings import NatsSettings

log = logging.getLogger(__name__)


def host_stats() -> dict[str, object]:
    """What a worker heartbeat reports about its host (standard library only)."""
    cores = os.cpu_count() or 1
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    return {
        "host": socket.gethostname(),
        "os": platform.platform(),
        "cpu_cores": cores,
        "cpu_usage_pct": None if load is None else min(100.0, 100.0 * load / cores),
    }


class Heartbeat(threading.Thread):
    """The heartbeat thread of one runner process."""

    def __init__(self, settings: NatsSettings, worker_ids: list[str], interval: float) -> None:
        super().__init__(name="voltbus-heartbeat", daemon=True)
        self.settings, self.worker_ids, self.interval = settings, worker_ids, interval
        self.active: dict[str, tuple[str, str]] = {}
        """worker id -> (rollout id, attempt id) it is running; written by the runner's slots."""
        self.stopping = threading.Event()
        self.beats = 0
        """Beats that went through."""
        self.failing = False
        """Whether the last beat failed (one warning per outage, not one per beat)."""
        self.main: tuple[asyncio.AbstractEventLoop, Any] | None = None
        """(event loop, store) of the runner, which writes the worker heartbeats while it answers."""
        self.spans_stored: dict[str, float] = {}
        """rollout id -> ``time.monotonic()`` of its last stored spans (the runner's tracer keeps it)."""

    def run(self) -> None:
        while not self.stopping.is_set():
            try:
                asyncio.run(self._loop())
            except Exception as exc:  # the thread's boundary: a bus that refuses the connection now may answer later
                log.warning("heartbeat connection failed (retrying in %ss): %s", self.interval, exc)
                self.stopping.wait(self.interval)

    async def _loop(self) -> None:
        store = await connect(settings=self.settings, name="voltbus-heartbeat")
        try:
            while not self.stopping.is_set():
                began = time.monotonic()
                await self._beat(store)
                left = self.interval - (time.monotonic() - began)  # beats keep their period, a slow one included
                await asyncio.to_thread(self.stopping.wait, max(left, 0.0))
        finally:
            try:
                await store.close()
            except Exception:  # nats-py's drain raises while it reconnects: close without draining
                with contextlib.suppress(Exception):
                    await store.log.nc.close()

    async def _beat(self, store: object) -> None:
        try:
            recent = time.monotonic() - self.interval
            for worker_id, (rollout_id, attempt_id) in list(self.active.items()):
                if self.spans_stored.get(rollout_id, 0.0) < recent:
                    await store.heartbeat(rollout_id, attempt_id, worker_id)  # type: ignore[attr-defined]
            stats = host_stats()
            if not await self._beat_on_main(stats):
                await beat_workers(store, self.worker_ids, stats)
            self.beats += 1
            if self.failing:
                log.info("heartbeats go through again")
            self.failing = False
        except Exception as exc:  # the beat's boundary: whatever a bus outage raises (nats-py's reconnecting and
            if not self.failing:  # buffer errors, timeouts, our PublishFailed), the next beat tries again
                log.warning("heartbeat failed (retried every %ss until the bus answers): %r", self.interval, exc)
            self.failing = True

    async def _beat_on_main(self, stats: dict[str, object]) -> bool:
        """Write the worker heartbeats through the runner's store; False when its loop did not do it in time."""
        if self.main is None:
            return False
        loop, main_store = self.main
        try:
            done = asyncio.run_coroutine_threadsafe(beat_workers(main_store, self.worker_ids, stats), loop)
        except RuntimeError:  # the loop is closed
            return False
        patience = min(self.interval / 4, 1.0)  # a blocked loop must not stretch the beat's period
        try:
            await asyncio.wait_for(asyncio.wrap_future(done), patience)
        except TimeoutError:
            log.warning("the runner's event loop did not write worker heartbeats within %ss", patience)
            return False
        except asyncio.CancelledError:
            if done.cancelled():  # the runner's loop cancelled the write (it is stopping)
                return False
            raise
        return True

    def stop(self) -> None:
        """Stop after the current beat."""
        self.stopping.set()
        self.join(timeout=10)


async def beat_workers(store: Any, worker_ids: list[str], stats: dict[str, object], window: int = 32) -> None:
    """One heartbeat per worker, ``window`` at a time (their appends share round trips)."""
    for i in range(0, len(worker_ids), window):
        await asyncio.gather(*(store.update_worker(w, stats) for w in worker_ids[i : i + window]))
