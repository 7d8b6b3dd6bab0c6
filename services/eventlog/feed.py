"""A feed: an ordered consumer read in batches (count or time bound), for projectors.

Batches come from a bounded local queue filled by the consumer's callback, so taking a batch with
a deadline never cancels anything inside nats-py, and a slow reader pauses the server (flow control).
A feed that stays idle while the stream has moved past it re-subscribes after the last sequence it
delivered: an ordered consumer lives in server memory, and after a server restart nats-py 2.16 may
take many seconds to notice, or never (nats.py issues 504 and 510).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import time
from collections.abc import Callable

import nats.errors
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import ConsumerConfig, DeliverPolicy

from voltbus.schemas.codec import AnyEvent
from voltbus.schemas.errors import DecodeError

from .records import BadEvent, Envelope
from .replay import BUFFER

log = logging.getLogger(__name__)

STALL_S = 1.0
"""Idle time after which a feed checks whether the stream moved on without it."""


def position(msg: Msg) -> tuple[int, float]:
    """A delivered message's stream sequence and stored time (to the microsecond, as ``msg.metadata``
    gives it), read straight from its reply subject: ``msg.metadata`` builds two dataclasses per message.

    >>> position(Msg(None, reply="$JS.ACK.S.c.1.42.7.1767225600123456789.0"))  # type: ignore[arg-type]
    (42, 1767225600.123457)
    >>> position(Msg(None, reply="$JS.ACK._.acc.S.c.1.43.8.1767225600500000000.0.tok"))  # type: ignore[arg-type]
    (43, 1767225600.5)
    """
    tokens = msg.reply.split(".")
    if len(tokens) == 9:  # $JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<time>.<pending>
        return int(tokens[5]), dt.datetime.fromtimestamp(int(tokens[7]) / 1e9, dt.UTC).timestamp()  # as metadata
    meta = msg.metadata  # the newer form with domain and account; it checks the prefix too
    return meta.sequence.stream, meta.timestamp.timestamp()


def _item(msg: Msg, decode: Callable[[bytes], AnyEvent]) -> Envelope | BadEvent:
    seq, stored = position(msg)
    try:
        return Envelope(seq=seq, subject=msg.subject, time=stored, event=decode(msg.data))
    except DecodeError as exc:
        return BadEvent(seq=seq, subject=msg.subject, data=msg.data, reason=exc.reason, time=stored)


class Feed:
    """Stored messages of one stream from a sequence on, taken in batches."""

    def __init__(self, js: JetStreamContext, stream: str, subjects: str, decode: Callable[[bytes], AnyEvent]) -> None:
        self.js = js
        self.stream = stream
        self.subjects = subjects
        self.decode = decode
        self.queue: asyncio.Queue[Msg] = asyncio.Queue(maxsize=BUFFER)
        self.sub: JetStreamContext.PushSubscription | None = None
        self.next_seq = 1
        """The sequence the feed hands out next (anything below it is a redelivery and is dropped)."""
        self.idle_since = time.monotonic()
        self.subscriptions = 0
        """How often the feed subscribed (a re-subscription follows a server restart)."""

    async def open(self, from_seq: int) -> Feed:
        """Start delivering at ``from_seq``."""
        self.next_seq = max(from_seq, 1)
        await self._subscribe()
        return self

    async def _subscribe(self) -> None:
        config = ConsumerConfig(opt_start_seq=self.next_seq)
        self.sub = await self.js.subscribe(
            self.subjects,
            stream=self.stream,
            ordered_consumer=True,
            deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
            config=config,
            cb=self.queue.put,
        )
        self.subscriptions += 1
        self.idle_since = time.monotonic()

    async def _unstall(self) -> None:
        """Re-subscribe if the stream holds messages past the feed and none arrived for ``STALL_S``."""
        if time.monotonic() - self.idle_since < STALL_S:
            return
        self.idle_since = time.monotonic()
        try:
            last = await self.last_seq()
        except (TimeoutError, nats.errors.Error):
            return  # the bus is away; ask again later
        if last < self.next_seq or not self.queue.empty():
            return
        log.warning("feed of %s stalled before seq %d (stream at %d): re-subscribing", self.stream, self.next_seq, last)
        if self.sub is not None:
            with contextlib.suppress(Exception):  # the old consumer may be gone with the server that held it
                await self.sub.unsubscribe()
        with contextlib.suppress(TimeoutError, nats.errors.Error):
            await self._subscribe()

    async def last_seq(self) -> int:
        """The stream's last sequence right now."""
        return (await self.js.stream_info(self.stream)).state.last_seq

    async def batch(self, max_items: int, max_wait: float, to_seq: int | None = None) -> list[Envelope | BadEvent]:
        """Up to ``max_items`` messages: waits up to ``max_wait`` for the first, then takes what is there
        (waiting at most ``max_wait`` in total); never goes past ``to_seq``."""
        items: list[Envelope | BadEvent] = []
        deadline = time.monotonic() + max_wait
        while len(items) < max_items:
            if self.queue.empty():
                if items:  # take what is there: a steady stream still makes large batches (they pile up
                    break  # while the previous one commits), and a trickle is not held back
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                try:
                    msg = await asyncio.wait_for(self.queue.get(), remaining)
                except TimeoutError:
                    break
            else:
                msg = self.queue.get_nowait()
            item = _item(msg, self.decode)
            if item.seq < self.next_seq:
                continue  # delivered already, before a re-subscription
            if to_seq is not None and item.seq > to_seq:
                break
            items.append(item)
            self.next_seq = item.seq + 1
            if to_seq is not None and item.seq >= to_seq:
                break
        if items:
            self.idle_since = time.monotonic()
        else:
            await self._unstall()
        return items

    async def close(self) -> None:
        """Stop the consumer."""
        if self.sub is not None:
            await self.sub.unsubscribe()
            self.sub = None
