"""A feed: one stream's stored messages in order, read in batches (count or time bound), for projectors.

The feed runs its own ordered push consumer (what nats-py's ``ordered_consumer=True`` sets up: ephemeral,
in server memory, no acks, flow control, heartbeats) on a core subscription whose messages go straight
into a local buffer (``natsprivate.SinkClient`` sinks: no per-message ``Msg``, header parse or task hop; on any
other nats-py client they come through the subscription's callback, public API only). Taking a
batch with a deadline never cancels anything inside nats-py. A full buffer holds back the answer to
the server's flow-control request, which pauses delivery.

Order is checked on every message (the consumer's delivery sequence in its reply subject): a gap,
a heartbeat reporting deliveries the feed never saw, or a feed that stays idle while the stream has
moved past it re-creates the consumer after the last message received, on a new inbox. An ordered
consumer lives in server memory, so after a server restart it is gone, and nats-py 2.16 may take many
seconds to notice, or never (nats.py issues 504 and 510).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import logging
import math
import time
from collections.abc import Callable

import nats.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy, Header

from voltbus.schemas.codec import AnyEvent
from voltbus.schemas.errors import DecodeError

from .connection import unsubscribe
from .natsprivate import STORED, SinkClient
from .records import BadEvent, Envelope, Passed
from .replay import BUFFER

log = logging.getLogger(__name__)

STALL_S = 1.0
"""Idle time after which a feed checks whether the stream moved on without it."""
HEARTBEAT_S = 5.0
"""The consumer's idle heartbeat (nats-py's for ordered consumers)."""
INACTIVE_S = 30.0
"""A consumer whose feed went away (closed, re-subscribed or dead) is removed by the server after this
(a reader role may not delete consumers)."""
RENEW_S = 0.2
"""Least time between two replacements of a feed's consumer."""

Raw = tuple[int, int, bytes, bytes]
"""A received message: stream sequence, stored time in nanoseconds, subject, payload."""
Item = Envelope | BadEvent | Passed
"""What a feed hands out: a decoded event, an undecodable message, or one left undecoded (``Feed.keep``)."""
Position = tuple[int, int, int, int]
"""From a delivery's reply subject: stream sequence, delivery sequence, stored time (ns), messages pending."""


def position(reply: bytes) -> Position | None:
    """Stream sequence, consumer (delivery) sequence, stored time in ns and the messages still pending
    for the consumer, from a delivered message's reply subject; None when it is not a JetStream delivery.

    >>> position(b"$JS.ACK.S.c.1.42.7.1767225600123456789.0")
    (42, 7, 1767225600123456789, 0)
    >>> position(b"$JS.ACK._.acc.S.c.1.43.8.1767225600500000000.5.tok")  # with domain and account
    (43, 8, 1767225600500000000, 5)
    >>> position(b"_INBOX.x") is None
    True
    """
    if not reply.startswith(STORED):
        return None
    tokens = reply.split(b".")
    if len(tokens) == 9:  # $JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<time>.<pending>
        return int(tokens[5]), int(tokens[6]), int(tokens[7]), int(tokens[8])
    if len(tokens) >= 11:  # $JS.ACK.<domain>.<account>.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<time>.<pending>
        return int(tokens[7]), int(tokens[8]), int(tokens[9]), int(tokens[10])
    return None


def seconds(ns: int) -> float:
    """A stored time in seconds since the epoch, to the microsecond (as nats-py's ``msg.metadata`` gives it).

    >>> seconds(1767225600123456789)
    1767225600.123457
    """
    t = ns / 1e9  # what datetime.fromtimestamp(t).timestamp() gives, at half the cost: the whole seconds, and
    whole = math.floor(t)  # the fraction rounded half to even to microseconds, as CPython rounds it
    return (whole * 1_000_000 + round((t - whole) * 1e6)) / 1e6


def _item(raw: Raw, decode: Callable[[bytes], AnyEvent], keep: Callable[[bytes], bool] | None) -> Item:
    seq, ns, subject, data = raw
    stored = seconds(ns)
    if keep is not None and not keep(subject):
        return Passed(seq=seq, subject=subject.decode(), time=stored)
    try:
        return Envelope(seq=seq, subject=subject.decode(), time=stored, event=decode(data))
    except DecodeError as exc:
        return BadEvent(seq=seq, subject=subject.decode(), data=data, reason=exc.reason, time=stored)


class Feed:
    """Stored messages of one stream from a sequence on, taken in batches."""

    def __init__(
        self, nc: Client, js: JetStreamContext, stream: str, subjects: str, decode: Callable[[bytes], AnyEvent]
    ) -> None:
        self.nc = nc
        self.js = js
        self.stream = stream
        self.subjects = subjects
        self.decode = decode
        self.keep: Callable[[bytes], bool] | None = None
        """Which subjects to decode (None: all); the others are handed out as ``Passed``."""
        self.buffer: collections.deque[Raw] = collections.deque()
        self.arrived = asyncio.Event()
        self.sub: Subscription | None = None
        self.next_seq = 1
        """The sequence the feed hands out next (anything below it is a redelivery and is dropped)."""
        self.tail = 1
        """The sequence the feed expects to receive next (past what the buffer holds)."""
        self.expect = 1
        """The consumer's next delivery sequence."""
        self.pending = 0
        """Messages the consumer had yet to deliver when it sent the last one received."""
        self.held: list[str] = []
        """Flow-control and stall replies held back while the buffer is full (the server waits for them)."""
        self.renewed = 0.0
        """When the consumer was last replaced (replacements are at least ``RENEW_S`` apart)."""
        self.task: asyncio.Task[None] | None = None
        """The last replacement of the consumer (after a gap, a heartbeat that did not fit, or a stall)."""
        self.idle_since = time.monotonic()
        self.subscriptions = 0
        """How often the feed subscribed (a re-subscription follows a gap or a server restart)."""

    async def open(self, from_seq: int) -> Feed:
        """Start delivering at ``from_seq``."""
        self.next_seq = self.tail = max(from_seq, 1)
        await self._subscribe()
        return self

    async def _subscribe(self) -> None:
        inbox = self.nc.new_inbox()
        sub = await self.nc.subscribe(inbox, cb=functools.partial(self._control, inbox=inbox))
        if isinstance(self.nc, SinkClient):
            self.nc.add_sink(sub, self._received)
        self.sub, self.expect, self.pending = sub, 1, 0
        config = ConsumerConfig(
            deliver_subject=inbox,
            filter_subject=self.subjects,
            deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
            opt_start_seq=self.tail,
            ack_policy=AckPolicy.NONE,
            max_deliver=1,
            flow_control=True,
            idle_heartbeat=HEARTBEAT_S,
            mem_storage=True,
            num_replicas=1,
            inactive_threshold=INACTIVE_S,
        )
        try:
            await self.js.add_consumer(self.stream, config=config)
        except BaseException:
            await self._drop(sub)
            raise
        self.subscriptions += 1
        self.idle_since = time.monotonic()

    async def _drop(self, sub: Subscription | None) -> None:
        """Stop a subscription and forget its sink; the consumer, left without interest, is removed by the
        server (``INACTIVE_S``). The bus may be away."""
        if sub is None:
            return
        if isinstance(self.nc, SinkClient):
            self.nc.remove_sink(sub)
        if self.sub is sub:
            self.sub = None
        await unsubscribe(sub)

    def _received(self, subject: bytes, reply: bytes, data: bytes) -> None:
        """A stored message, in delivery order (called by the connection's parser)."""
        pos = position(reply)
        if pos is None:
            log.warning("feed of %s: a message without a JetStream reply subject (%r) ignored", self.stream, reply)
            return
        seq, delivered, ns, self.pending = pos
        if delivered != self.expect:
            self._reset(f"delivery {delivered} came where {self.expect} was due")
            return
        self.expect = delivered + 1
        if seq >= self.tail:
            self.tail = seq + 1
            self.buffer.append((seq, ns, subject, data))
            self.arrived.set()

    async def _control(self, msg: Msg, inbox: str) -> None:
        """A message nats-py handed over on the subscription to ``inbox``: flow control and heartbeats (header
        only), or any message on a connection without sinks."""
        if self.sub is None or self.sub.subject != inbox:
            return  # a subscription already replaced
        headers = msg.headers or {}
        if headers.get(Header.STATUS) != "100":
            self._received(msg.subject.encode(), msg.reply.encode(), msg.data)
            return
        description = headers.get(Header.DESCRIPTION, "")
        if description.startswith("Flow") and msg.reply:
            await self._answer(msg.reply)
        elif description.startswith("Idle"):
            if stalled := headers.get(Header.CONSUMER_STALLED):
                await self._answer(stalled)
            last = headers.get(Header.LAST_CONSUMER)
            if last is not None and last.isdigit() and int(last) >= self.expect:
                self._reset(f"the server delivered up to {last}, the feed received up to {self.expect - 1}")

    async def _answer(self, reply: str) -> None:
        """Let the server send on (a flow-control or stall reply), unless the buffer is full: then the reply
        waits until a batch makes room, and delivery pauses."""
        if len(self.buffer) < BUFFER:
            with contextlib.suppress(nats.errors.Error):
                await self.nc.publish(reply)
        else:
            self.held.append(reply)

    @property
    def renewing(self) -> bool:
        """Whether the consumer is being replaced (one replacement at a time; the old one's deliveries after a
        gap do not fit ``expect`` and are dropped, the new one counts from 1)."""
        return self.task is not None and not self.task.done()

    def _reset(self, why: str) -> asyncio.Task[None]:
        """Replace the consumer (unless that is under way already); returns the replacement."""
        if not self.renewing:
            log.warning("feed of %s before seq %d: %s; re-subscribing", self.stream, self.tail, why)
            self.task = asyncio.get_running_loop().create_task(self._renew())
        assert self.task is not None
        return self.task

    async def _renew(self) -> None:
        """A new consumer (on a new inbox) from the first message not yet received."""
        try:
            await self._drop(self.sub)
            await asyncio.sleep(max(0.0, self.renewed + RENEW_S - time.monotonic()))
            with contextlib.suppress(TimeoutError, nats.errors.Error):
                await self._subscribe()
        finally:
            self.renewed = time.monotonic()

    async def _unstall(self) -> None:
        """Re-subscribe if the stream holds messages past the feed and none arrived for ``STALL_S``."""
        if time.monotonic() - self.idle_since < STALL_S or self.renewing:
            return
        self.idle_since = time.monotonic()
        try:
            last = await self.last_seq()
        except (TimeoutError, nats.errors.Error):
            return  # the bus is away; ask again later
        if last < self.tail or self.buffer or self.renewing:
            return
        await self._reset(f"stalled (the stream is at {last})")

    @property
    def seen(self) -> tuple[int, int]:
        """Subscriptions made and the connection's reconnects so far: when either changes, what comes next
        may come from a restarted server (see ``services.projector.rewind.Guard``)."""
        return self.subscriptions, self.nc.stats["reconnects"]

    async def last_seq(self) -> int:
        """The stream's last sequence right now."""
        return (await self.js.stream_info(self.stream)).state.last_seq

    async def batch(self, max_items: int, max_wait: float, to_seq: int | None = None) -> list[Item]:
        """Up to ``max_items`` messages, waiting at most ``max_wait``: for the first, and then for more only
        while the consumer says more are on their way (a backlog makes full batches, a trickle is not held
        back); never goes past ``to_seq``."""
        items: list[Item] = []
        buffer, decode, keep = self.buffer, self.decode, self.keep
        deadline = time.monotonic() + max_wait
        while len(items) < max_items:
            if not buffer:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or (items and not self.pending):
                    break
                self.arrived.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.arrived.wait(), remaining)
                continue
            raw = buffer.popleft()
            if raw[0] < self.next_seq:
                continue  # delivered already, before a re-subscription
            if to_seq is not None and raw[0] > to_seq:
                buffer.appendleft(raw)
                break
            items.append(_item(raw, decode, keep))
            self.next_seq = raw[0] + 1
            if to_seq is not None and raw[0] >= to_seq:
                break
        while self.held and len(buffer) < BUFFER:
            with contextlib.suppress(nats.errors.Error):
                await self.nc.publish(self.held.pop(0))
        if items:
            self.idle_since = time.monotonic()
        else:
            await self._unstall()
        return items

    async def close(self) -> None:
        """Stop the consumer."""
        if self.task is not None and not self.task.done():
            self.task.cancel()
            await asyncio.wait([self.task])  # its end, whatever it was; a cancel of close itself still stops it
        await self._drop(self.sub)
