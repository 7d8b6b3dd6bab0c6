"""Feeding the projector from the bus: both streams, in batches, live or up to a point in the past."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from voltbus.services.eventlog import BadEvent, Envelope, EventLog, Feed

from . import lean
from .projector import STREAMS, Projector
from .rewind import Divergence, Guard

log = logging.getLogger(__name__)

Progress = Callable[[str, int, int], None]
"""Called after each batch with (stream, position, end) where end is 0 when following live."""


async def ends_at(log_: EventLog, to_seq: int | None = None, to_time: float | None = None) -> dict[str, int]:
    """Where a rebuild stops, per stream: ``to_seq`` of the control stream (spans up to that message's
    time), or everything up to ``to_time``, or everything stored now."""
    ends = {s: (await log_.feed(s).last_seq()) for s in STREAMS}
    if to_seq is not None:
        ends["control"] = min(to_seq, ends["control"])
        if ends["control"] > 0:
            raw = await log_.js.get_msg(log_.topology.control_stream, seq=ends["control"])
            to_time = raw.time.timestamp() if raw.time else None
        else:
            ends["spans"] = 0
    if to_time is not None:
        for stream in STREAMS if to_seq is None else ("spans",):
            first_after = await log_.first_seq_at(stream, to_time + 1e-6)
            ends[stream] = min(ends[stream], first_after - 1) if first_after is not None else ends[stream]
    return ends


def projector_feed(log_: EventLog, stream: str) -> Feed:
    """A feed of ``stream``; the spans feed decodes with the projector's lean decoder."""
    feed = log_.feed(stream)  # type: ignore[arg-type]
    if stream == "spans":
        feed.decode = lean.decode_spans
    return feed


async def project(
    projector: Projector,
    log_: EventLog,
    ends: dict[str, int] | None = None,
    stop: asyncio.Event | None = None,
    progress: Progress | None = None,
    batch_size: int = 2000,
    max_wait: float = 0.1,
) -> None:
    """Apply both streams until ``ends`` are reached (a rebuild) or ``stop`` is set (live)."""
    lock = asyncio.Lock()

    async def one(stream: str) -> None:
        end = ends[stream] if ends is not None else None
        if end is not None and projector.positions[stream] >= end:
            return
        guard = Guard(log_, projector, stream)
        feed = await projector_feed(log_, stream).open(projector.positions[stream] + 1)
        held: list[Envelope | BadEvent] = []
        try:
            while not (stop and stop.is_set()) and stream not in projector.diverged:
                if end is not None and projector.positions[stream] >= end:
                    return
                items, held = held or await feed.batch(batch_size, max_wait, to_seq=end), []
                if guard.due(feed):  # after a restart: before applying what the new server sent
                    urgent, found = guard.urgent(feed), await guard.verify(feed)
                    if found is False and urgent:
                        held = items  # the bus is away: compare before applying anything
                        await asyncio.sleep(max_wait)
                        continue
                    if isinstance(found, Divergence):
                        async with lock:
                            await guard.react(found)
                        await feed.close()  # go on after the checkpoint, dropping what was taken
                        feed = await projector_feed(log_, stream).open(projector.positions[stream] + 1)
                        guard.seen = (feed.subscriptions, guard.seen[1])
                        continue
                if items:
                    async with lock:  # one writer connection: batches of the two streams take turns
                        await asyncio.to_thread(projector.apply, stream, items)
                    if progress:
                        progress(stream, projector.positions[stream], end or 0)
        finally:
            await feed.close()

    async with asyncio.TaskGroup() as tasks:
        for stream in STREAMS:
            tasks.create_task(one(stream))
