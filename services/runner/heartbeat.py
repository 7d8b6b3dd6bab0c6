"""Heartbeats from a thread with its own event loop and connection, so a busy agent cannot block them.

Every interval: a sign of life for each running attempt (the coordinator's unresponsiveness clock)
and a worker heartbeat with host stats for each slot.
"""

from __future__ import annotations

import asyncio
import logging
import os
import platform
import socket
import threading

from voltbus.schemas.errors import VoltbusError
from voltbus.services.settings import NatsSettings
from voltbus.store import connect

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

    def run(self) -> None:
        asyncio.run(self._loop())

    async def _loop(self) -> None:
        store = await connect(settings=self.settings, name="voltbus-heartbeat")
        try:
            while not self.stopping.is_set():
                await self._beat(store)
                await asyncio.to_thread(self.stopping.wait, self.interval)
        finally:
            await store.close()

    async def _beat(self, store: object) -> None:
        try:
            for worker_id, (rollout_id, attempt_id) in list(self.active.items()):
                await store.heartbeat(rollout_id, attempt_id, worker_id)  # type: ignore[attr-defined]
            stats = host_stats()
            for worker_id in self.worker_ids:
                await store.update_worker(worker_id, stats)  # type: ignore[attr-defined]
            self.beats += 1
        except VoltbusError as exc:
            log.warning("heartbeat failed: %s", exc)

    def stop(self) -> None:
        """Stop after the current beat."""
        self.stopping.set()
        self.join(timeout=10)
