"""Noticing that the projection applied messages the log no longer holds, and rewinding the spans tables.

The spans stream is persisted asynchronously: when nats-server dies with ``kill -9``, the messages it
had not yet written are lost, and a projector may already have read and applied them. After the
restart the server gives their sequences to new messages. :func:`check` compares a stream's
checkpoint with the log: the stream ends below it, or the message at that sequence was stored at
another time than the one applied. Every message stored after a restart is newer than anything read
before the crash, so the log still holds what was applied up to the last message stored no later
than the checkpoint's time: that is where the projection is rewound to.

Spans: the rows above that sequence are deleted, each touched attempt's activity is recounted from
the log, its training rows recomputed, the checkpoint set back and a ``divergences`` row written;
the feed then goes on from there, so the tables end equal to a replay. Control: that stream is
persisted synchronously, so a divergence there means the log itself was replaced (restored or
recreated); the projector stops applying it and ``/health`` says "diverged" until the database is
rebuilt with ``voltbus replay --db NEW``.
"""

from __future__ import annotations

import asyncio
import logging
import time

import msgspec
import nats.errors
import nats.js.errors

from voltbus.projections.rows import Row, activity_keys, count_activity
from voltbus.services.eventlog import EventLog
from voltbus.services.eventlog.records import Envelope

from .projector import Projector

log = logging.getLogger(__name__)

TOLERANCE_S = 1e-3
"""Stored times closer than this are the same message (a restart takes far longer)."""
CHECK_S = 5.0
"""A live feed compares its checkpoint with the log at least this often (two small requests)."""


class Divergence(msgspec.Struct, frozen=True, kw_only=True):
    """The projection applied ``stream`` up to ``applied_to``; the log holds the same messages only up to
    ``good_to`` and now ends at ``log_end``."""

    stream: str
    applied_to: int
    good_to: int
    log_end: int
    reason: str


async def check(log_: EventLog, stream: str, position: int, stamp: float) -> Divergence | None:
    """Whether the message the projection applied last (``position``, stored at ``stamp``) is still in the log."""
    if position == 0:
        return None
    name = log_.topology.control_stream if stream == "control" else log_.topology.spans_stream
    end = (await log_.js.stream_info(name)).state.last_seq
    if end < position:
        reason = f"the stream ends at seq {end}, below the checkpoint {position}"
    else:
        try:
            raw = await log_.js.get_msg(name, seq=position, direct=True)
        except nats.js.errors.NotFoundError:
            return None  # deleted or aged out: nothing left to compare with
        stored = raw.time.timestamp() if raw.time else stamp
        if abs(stored - stamp) <= TOLERANCE_S:
            return None
        reason = f"seq {position} holds a message stored at {stored:.6f}, not the one applied (stored at {stamp:.6f})"
    after = await log_.first_seq_at(stream, stamp + TOLERANCE_S)  # type: ignore[arg-type]
    good = min(position, end, after - 1 if after is not None else end)
    return Divergence(stream=stream, applied_to=position, good_to=good, log_end=end, reason=reason)


async def recount(log_: EventLog, keys: set[tuple[str, str]], to_seq: int) -> list[Row]:
    """``attempt_activity`` rows of ``keys`` from the spans stream up to ``to_seq``."""
    rows: dict[tuple[str, str], Row] = {}
    if not keys or to_seq == 0:
        return []
    async for item in log_.replay("spans", to_seq=to_seq):
        for key in activity_keys(item) if isinstance(item, Envelope) else []:
            if key in keys:
                count_activity(rows, key, item)  # type: ignore[arg-type]
    return list(rows.values())


async def stored_at(log_: EventLog, stream: str, seq: int) -> float:
    """The stored time of message ``seq`` (0.0 for none)."""
    if seq == 0:
        return 0.0
    name = log_.topology.control_stream if stream == "control" else log_.topology.spans_stream
    try:
        raw = await log_.js.get_msg(name, seq=seq, direct=True)
    except nats.js.errors.NotFoundError:
        return 0.0
    return raw.time.timestamp() if raw.time else 0.0


class Guard:
    """When a feed's checkpoint is compared with the log: after each (re)subscription or reconnect
    (before the next batch is applied) and every ``CHECK_S`` seconds."""

    def __init__(self, log_: EventLog, projector: Projector, stream: str) -> None:
        self.log, self.projector, self.stream = log_, projector, stream
        self.seen: tuple[int, int] = (-1, -1)
        self.next_at = 0.0

    def urgent(self, seen: tuple[int, int]) -> bool:
        """Whether the feed re-subscribed or its connection came back since the last check (``seen``: the
        feed's subscriptions and its connection's reconnects so far)."""
        return seen != self.seen

    def due(self, seen: tuple[int, int]) -> bool:
        """Whether a check is due now."""
        return self.urgent(seen) or time.monotonic() >= self.next_at

    async def verify(self, seen: tuple[int, int]) -> Divergence | None | bool:
        """Compare; the divergence found, None when none, False when the bus did not answer."""
        position = self.projector.positions[self.stream]
        try:
            found = await check(self.log, self.stream, position, self.projector.stamps[self.stream])
        except (TimeoutError, nats.errors.Error):
            return False  # the bus is away: ask again before the next batch
        self.seen, self.next_at = seen, time.monotonic() + CHECK_S
        return found

    async def react(self, found: Divergence) -> None:
        """Rewind the spans tables to the last good sequence, or stop following control; loud either way."""
        p = self.projector
        if found.stream != "spans":
            log.error(
                "DIVERGED: the projection applied control up to seq %d but the log differs (%s); stopped "
                "applying control; rebuild with `voltbus replay --db NEW`",
                found.applied_to,
                found.reason,
            )
            await asyncio.to_thread(p.diverge, _row(found, "stopped"))
            return
        keys = await asyncio.to_thread(p.touched_after, found.good_to)
        activity = await recount(self.log, keys, found.good_to)
        stamp = await stored_at(self.log, "spans", found.good_to)
        log.error(
            "DIVERGED: the projection applied spans up to seq %d but the log holds the same messages only up "
            "to %d (%s; messages lost by a crash of nats-server): rewound the span tables to %d",
            found.applied_to,
            found.good_to,
            found.reason,
            found.good_to,
        )
        await asyncio.to_thread(p.rewind, _row(found, "rewound"), keys, activity, stamp)


def _row(found: Divergence, action: str) -> Row:
    return msgspec.structs.asdict(found) | {"action": action, "detected_at": time.time()}
