"""Ordered replay of a whole stream: from a sequence or a time, up to a sequence or the current end.

An ordered consumer (ephemeral, flow-controlled, gap-detecting) streams the messages; the replay
stops at ``to_seq`` or at the stream's last sequence when it started, so it always ends. A message
that does not decode is yielded as :class:`BadEvent` with its sequence, and the replay goes on.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import AsyncIterator, Callable

from nats.js import JetStreamContext
from nats.js.api import ConsumerConfig, DeliverPolicy

from voltbus.schemas.codec import AnyEvent
from voltbus.schemas.errors import DecodeError

from .records import BadEvent, Envelope


async def replay_stream(
    js: JetStreamContext,
    stream: str,
    subjects: str,
    decode: Callable[[bytes], AnyEvent],
    from_seq: int = 1,
    from_time: float | None = None,
    to_seq: int | None = None,
    idle_timeout: float = 10.0,
) -> AsyncIterator[Envelope | BadEvent]:
    """Yield every stored message of ``stream`` in order, decoded or as a BadEvent."""
    info = await js.stream_info(stream)
    end = info.state.last_seq if to_seq is None else min(to_seq, info.state.last_seq)
    if end == 0 or from_seq > end:
        return
    if from_time is not None:
        config = ConsumerConfig(opt_start_time=dt.datetime.fromtimestamp(from_time, dt.UTC))
        policy = DeliverPolicy.BY_START_TIME
    else:
        config = ConsumerConfig(opt_start_seq=max(from_seq, 1))
        policy = DeliverPolicy.BY_START_SEQUENCE
    sub = await js.subscribe(
        subjects, stream=stream, ordered_consumer=True, deliver_policy=policy, config=config
    )
    try:
        while True:
            msg = await sub.next_msg(timeout=idle_timeout)
            meta = msg.metadata
            seq = meta.sequence.stream
            try:
                yield Envelope(
                    seq=seq, subject=msg.subject, time=meta.timestamp.timestamp(), event=decode(msg.data)
                )
            except DecodeError as exc:
                yield BadEvent(seq=seq, subject=msg.subject, data=msg.data, reason=exc.reason)
            if seq >= end or meta.num_pending == 0:
                return
    finally:
        await sub.unsubscribe()
