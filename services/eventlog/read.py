"""Reading one aggregate's history by direct get: every message on a subject (wildcards allowed)."""

from __future__ import annotations

from collections.abc import Callable

from nats.js import JetStreamContext
from nats.js.errors import NotFoundError

from voltbus.schemas.codec import AnyEvent
from voltbus.schemas.errors import DecodeError

from .records import BadEvent, Envelope


async def read_subject(
    js: JetStreamContext,
    stream: str,
    subject: str,
    decode: Callable[[bytes], AnyEvent],
    after_seq: int = 0,
) -> tuple[list[Envelope | BadEvent], int]:
    """Messages stored on ``subject`` after ``after_seq``, in order, and the last sequence (0 if none).

    An undecodable message comes back as a BadEvent with its sequence; folding skips it, as it
    skips an event type it does not know, so one bad message cannot wedge an aggregate.
    """
    envelopes: list[Envelope | BadEvent] = []
    seq = after_seq
    while True:
        try:
            raw = await js.get_msg(stream, seq=seq + 1, subject=subject, direct=True, next=True)
        except NotFoundError:
            return envelopes, seq
        stamp = raw.time.timestamp() if raw.time else 0.0
        try:
            event = decode(raw.data or b"")
        except DecodeError as exc:
            envelopes.append(
                BadEvent(seq=raw.seq, subject=raw.subject or subject, data=raw.data or b"", reason=exc.reason)
            )
        else:
            envelopes.append(Envelope(seq=raw.seq, subject=raw.subject or subject, time=stamp, event=event))
        seq = raw.seq
