"""Ordered replay of a whole stream: from a sequence or a time, up to a sequence or the current end.

An ordered consumer (ephemeral, flow-controlled, gap-detecting) streams the messages into a bounded
queue; the replay stops at ``to_seq`` or at the stream's last sequence when it started, so it always
ends. A message that does not decode is yielded as :class:`BadEvent` with its sequence, and the
replay goes on.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import AsyncGenerator, Callable

from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import ConsumerConfig, DeliverPolicy

from voltbus.schemas.codec import AnyEvent
from voltbus.schemas.errors import DecodeError

from .connection import unsubscribe
from .records import BadEvent, Envelope

BUFFER = 4096
"""Messages held between the consumer and the reader; a full buffer pauses the server (flow control)."""


def _start(from_seq: int, from_time: float | None) -> tuple[DeliverPolicy, ConsumerConfig]:
    if from_time is not None:
        return DeliverPolicy.BY_START_TIME, ConsumerConfig(opt_start_time=dt.datetime.fromtimestamp(from_time, dt.UTC))
    return DeliverPolicy.BY_START_SEQUENCE, ConsumerConfig(opt_start_seq=max(from_seq, 1))


def _item(msg: Msg, decode: Callable[[bytes], AnyEvent]) -> Envelope | BadEvent:
    meta = msg.metadata
    seq, stored = meta.sequence.stream, meta.timestamp.timestamp()
    try:
        return Envelope(seq=seq, subject=msg.subject, time=stored, event=decode(msg.data))
    except DecodeError as exc:
        return BadEvent(seq=seq, subject=msg.subject, data=msg.data, reason=exc.reason, time=stored)


async def replay_stream(
    js: JetStreamContext,
    stream: str,
    subjects: str,
    decode: Callable[[bytes], AnyEvent],
    from_seq: int = 1,
    from_time: float | None = None,
    to_seq: int | None = None,
    idle_timeout: float = 10.0,
    follow: bool = False,
) -> AsyncGenerator[Envelope | BadEvent, None]:
    """Yield every stored message of ``stream`` in order, decoded or as a BadEvent.

    With ``follow`` the replay never ends: after the stored messages it waits for new ones.
    """
    info = await js.stream_info(stream)
    end = info.state.last_seq if to_seq is None else min(to_seq, info.state.last_seq)
    if not follow and (end == 0 or from_seq > end):
        return
    queue: asyncio.Queue[Msg] = asyncio.Queue(maxsize=BUFFER)
    policy, config = _start(from_seq, from_time)
    sub = await js.subscribe(
        subjects, stream=stream, ordered_consumer=True, deliver_policy=policy, config=config, cb=queue.put
    )
    try:
        while True:
            if not queue.empty():
                msg = queue.get_nowait()
            elif follow:
                msg = await queue.get()
            else:
                msg = await asyncio.wait_for(queue.get(), idle_timeout)
            item = _item(msg, decode)
            yield item
            if not follow and (item.seq >= end or msg.metadata.num_pending == 0):
                return
    finally:
        await unsubscribe(sub)
