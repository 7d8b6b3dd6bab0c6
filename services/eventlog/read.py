"""Reading one aggregate's history by direct get: every message on a subject (wildcards allowed)."""

from __future__ import annotations

from collections.abc import Callable

from nats.js import JetStreamContext
from nats.js.errors import NotFoundError

from voltbus.schemas.codec import AnyEvent
from voltbus.schemas.errors import DecodeError

from .records import Envelope


async def read_subject(
    js: JetStreamContext,
    stream: str,
    subject: str,
    decode: Callable[[bytes], AnyEvent],
    after_seq: int = 0,
) -> tuple[list[Envelope], int]:
    """Events stored on ``subject`` after ``after_seq``, in order, and the last sequence (0 if none).

    An undecodable message in an aggregate's history is an error naming its sequence: the history
    cannot be folded past it.
    """
    envelopes: list[Envelope] = []
    seq = after_seq
    while True:
        try:
            raw = await js.get_msg(stream, seq=seq + 1, subject=subject, direct=True, next=True)
        except NotFoundError:
            return envelopes, seq
        try:
            event = decode(raw.data or b"")
        except DecodeError as exc:
            raise DecodeError(exc.reason, seq=raw.seq, subject=raw.subject) from None
        stamp = raw.time.timestamp() if raw.time else 0.0
        envelopes.append(Envelope(seq=raw.seq, subject=raw.subject or subject, time=stamp, event=event))
        seq = raw.seq
