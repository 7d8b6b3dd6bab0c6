"""Reading one aggregate's history: every message on a subject (wildcards allowed), by batched direct get.

One request returns up to ``BATCH`` messages and an end-of-batch marker that says how many remain
(server 2.11+, ADR-31), so a rollout's whole history usually costs one round trip.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import logging
from collections.abc import Callable

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.api import Header

from voltbus.schemas.codec import AnyEvent
from voltbus.schemas.errors import DecodeError, PublishFailed

from .connection import unsubscribe
from .records import BadEvent, Envelope

BATCH = 256
TAIL_BATCH = 1024
"""Messages per request of ``subjects_after``."""

log = logging.getLogger(__name__)


def stored_time(stamp: str | None) -> float:
    """A direct get's ``Nats-Time-Stamp`` (RFC 3339, nanoseconds) in seconds, to the microsecond (0: none).

    >>> stored_time("2026-01-01T00:00:00.123456789Z")
    1767225600.123456
    >>> stored_time("2026-01-01T00:00:00Z"), stored_time(None)
    (1767225600.0, 0.0)
    """
    return dt.datetime.fromisoformat(stamp).timestamp() if stamp else 0.0


def _record(msg: Msg, subject: str, decode: Callable[[bytes], AnyEvent]) -> Envelope | BadEvent:
    headers = msg.headers or {}
    seq, stored_on = int(headers["Nats-Sequence"]), headers.get("Nats-Subject", subject)
    time = stored_time(headers.get("Nats-Time-Stamp"))
    try:
        return Envelope(seq=seq, subject=stored_on, time=time, event=decode(msg.data))
    except DecodeError as exc:
        return BadEvent(seq=seq, subject=stored_on, data=msg.data, reason=exc.reason, time=time)


async def _batch(
    nc: Client, stream: str, subject: str, from_seq: int, timeout: float, batch: int = BATCH
) -> tuple[list[Msg], int]:
    """Up to ``batch`` stored messages on ``subject`` from ``from_seq``, and how many remain after them."""
    replies: asyncio.Queue[Msg] = asyncio.Queue()
    sub = await nc.subscribe(nc.new_inbox(), cb=replies.put)
    try:
        request = json.dumps({"seq": from_seq, "next_by_subj": subject, "batch": batch}).encode()
        await nc.publish(f"$JS.API.DIRECT.GET.{stream}", request, reply=sub.subject)
        messages: list[Msg] = []
        async with asyncio.timeout(timeout):
            while True:
                msg = await replies.get()
                status = (msg.headers or {}).get(Header.STATUS)
                if status == "404":
                    return messages, 0
                if status == "204":  # end of batch
                    return messages, int((msg.headers or {}).get("Nats-Num-Pending", 0))
                if status:
                    raise PublishFailed([], f"direct get on {stream} failed: {status} {msg.headers}")
                messages.append(msg)
    finally:
        await unsubscribe(sub)


async def _batch_retried(
    nc: Client, stream: str, subject: str, from_seq: int, timeout: float, tries: int = 3, batch: int = BATCH
) -> tuple[list[Msg], int]:
    """``_batch``, asked again after a timeout (a read is idempotent; a busy process may miss one deadline)."""
    for attempt in range(1, tries + 1):
        try:
            return await _batch(nc, stream, subject, from_seq, timeout, batch)
        except TimeoutError:
            if attempt == tries:
                raise
            log.warning(
                "direct get on %s (%s from %d) timed out after %.1fs; asking again", stream, subject, from_seq, timeout
            )
    raise AssertionError("unreachable")


async def read_subject(
    nc: Client,
    stream: str,
    subject: str,
    decode: Callable[[bytes], AnyEvent],
    after_seq: int = 0,
    timeout: float = 5.0,
) -> tuple[list[Envelope | BadEvent], int]:
    """Messages stored on ``subject`` after ``after_seq``, in order, and the last sequence (``after_seq``
    if none).

    An undecodable message comes back as a BadEvent with its sequence; folding skips it, as it
    skips an event type it does not know, so one bad message cannot wedge an aggregate.
    """
    records: list[Envelope | BadEvent] = []
    seq = after_seq
    while True:
        messages, remaining = await _batch_retried(nc, stream, subject, seq + 1, timeout)
        for msg in messages:
            records.append(_record(msg, subject, decode))
        if records:
            seq = records[-1].seq
        if not messages or remaining == 0:
            return records, seq


async def stream_subjects(nc: Client, stream: str, subjects_filter: str, timeout: float = 5.0) -> dict[str, int]:
    """The subjects of ``stream`` that match ``subjects_filter``, with their message counts: every page of the
    server's answer (it sends at most 100,000 subjects per stream info answer, with the total; nats-py's
    ``stream_info`` returns only the first page, so it undercounts past 100,000). Costs the server a walk of the
    matching subjects and the client 20-30 bytes of answer per subject: for a few subjects, or a count nothing cheaper
    gives."""
    found: dict[str, int] = {}
    while True:
        request = json.dumps({"subjects_filter": subjects_filter, "offset": len(found)}).encode()
        answer = json.loads((await nc.request(f"$JS.API.STREAM.INFO.{stream}", request, timeout=timeout)).data)
        if "error" in answer:
            raise PublishFailed([], f"stream info {stream} ({subjects_filter}) failed: {answer['error']}")
        page = answer["state"].get("subjects") or {}
        found.update(page)
        if not page or len(found) >= answer.get("total", 0):
            return found


async def subjects_after(
    nc: Client, stream: str, subject: str, after_seq: int, at_most: int, timeout: float = 5.0
) -> list[str] | None:
    """The subjects of the messages stored on ``subject`` (wildcards allowed) after ``after_seq``, in order, none of
    them decoded; None when there are more than ``at_most``. Only the blocks past ``after_seq`` are read: the end of
    a stream a reader follows closely, in nats-server's cache."""
    found: list[str] = []
    seq = after_seq
    while True:
        messages, remaining = await _batch_retried(nc, stream, subject, seq + 1, timeout, batch=TAIL_BATCH)
        if len(found) + len(messages) + remaining > at_most:
            return None
        for msg in messages:
            headers = msg.headers or {}
            found.append(headers.get("Nats-Subject", subject))
            seq = int(headers["Nats-Sequence"])
        if not messages or remaining == 0:
            return found
