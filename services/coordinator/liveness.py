"""The worker rule's I/O: judge silence on the server's clock, and only on a view of the log read that far.

A worker's silence is measured between server receive times: its last sign of life stored in the log and the
server's own time (``ts`` of a stream info answer), never the runner's clock or the coordinator's. The verdicts
are re-checked on the tracker once its readers have read everything the streams held at that time, so a
coordinator that reads late (or a beat still in flight to it) never expires a live worker's attempt. After the
coordinator was cut off from the bus, silence counts again from its reconnection.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from datetime import datetime
from typing import NamedTuple

import nats.errors

from voltbus.services.clients.store import Store

from .tracker import Due, Tracker

log = logging.getLogger(__name__)


class Reading(NamedTuple):
    """The server's time and the streams' last sequences, from one pair of stream info answers."""

    time: float
    control_end: int
    spans_end: int


async def read_server(store: Store) -> Reading:
    """The server's current time and where the control and spans streams end."""
    topo, nc = store.topology, store.log.nc
    timeout = store.log.settings.request_timeout_s
    ends, stamp = [], ""
    for stream in (topo.control_stream, topo.spans_stream):
        answer = json.loads((await nc.request(f"$JS.API.STREAM.INFO.{stream}", b"", timeout=timeout)).data)
        if "error" in answer:
            raise ValueError(f"stream info {stream}: {answer['error']}")
        ends.append(int(answer["state"]["last_seq"]))
        stamp = stamp or answer["ts"]
    return Reading(datetime.fromisoformat(stamp).timestamp(), *ends)


class Watch:
    """The worker rule over time: orphans at once, silence confirmed on the server's clock one tick later."""

    def __init__(self, timeout: float, control: list[int], spans: list[int]) -> None:
        self.timeout = timeout
        """``CoordinatorSettings.worker_timeout_s`` (0: orphans only)."""
        self.control, self.spans = control, spans
        """The readers' positions (last sequence folded), shared with them."""
        self.since = 0.0
        """Server time from which silence counts: the coordinator's first check, or its latest reconnection."""
        self.pending: Reading | None = None
        """A server reading whose verdicts wait for the readers to reach its ends."""
        self.reconnects = -1
        self.failing = False

    async def lost(self, store: Store, tracker: Tracker, clock: Callable[[], float] = time.time) -> list[Due]:
        """The attempts to expire now because their worker is gone."""
        found = tracker.lost()
        if self.timeout <= 0:
            return found
        try:
            found += await self._silent(store, tracker, clock, len(found))
        except (nats.errors.Error, TimeoutError, OSError, ValueError, KeyError) as exc:
            if not self.failing:
                log.warning("worker silence is not judged while the server's clock is unreadable: %r", exc)
            self.failing = True
        else:
            self.failing = False
        return found

    async def _silent(self, store: Store, tracker: Tracker, clock: Callable[[], float], orphans: int) -> list[Due]:
        reconnects = store.log.nc.stats["reconnects"]
        if reconnects != self.reconnects:  # just started, or cut off from the bus: silence counts from now
            self.pending, self.since = None, max(self.since, (await read_server(store)).time)
            self.reconnects = reconnects
        pending = self.pending
        if pending is not None and self.control[0] >= pending.control_end and self.spans[0] >= pending.spans_end:
            self.pending = None
            return tracker.lost(pending.time, self.timeout, self.since)
        if pending is None and len(tracker.lost(clock(), self.timeout, self.since)) > orphans:  # ask the server
            self.pending = await read_server(store)
        return []
