"""A feed: an ordered consumer read in batches (count or time bound), for projectors.

Batches come from a bounded local queue filled by the consumer's callback, so taking a batch with
a deadline never cancels anything inside nats-py, and a slow reader pauses the server (flow control).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import ConsumerConfig, DeliverPolicy

from voltbus.schemas.codec import AnyEvent

from .records import BadEvent, Envelope
from .replay import BUFFER, _item


class Feed:
    """Stored messages of one stream from a sequence on, taken in batches."""

    def __init__(self, js: JetStreamContext, stream: str, subjects: str, decode: Callable[[bytes], AnyEvent]) -> None:
        self.js = js
        self.stream = stream
        self.subjects = subjects
        self.decode = decode
        self.queue: asyncio.Queue[Msg] = asyncio.Queue(maxsize=BUFFER)
        self.sub: JetStreamContext.PushSubscription | None = None

    async def open(self, from_seq: int) -> Feed:
        """Start delivering at ``from_seq``."""
        config = ConsumerConfig(opt_start_seq=max(from_seq, 1))
        self.sub = await self.js.subscribe(
            self.subjects,
            stream=self.stream,
            ordered_consumer=True,
            deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
            config=config,
            cb=self.queue.put,
        )
        return self

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
            if to_seq is not None and item.seq > to_seq:
                break
            items.append(item)
            if to_seq is not None and item.seq >= to_seq:
                break
        return items

    async def close(self) -> None:
        """Stop the consumer."""
        if self.sub is not None:
            await self.sub.unsubscribe()
            self.sub = None
