"""Writes to JetStream: one event, an atomic multi-event batch, or many independent appends.

Every message carries ``Nats-Msg-Id`` = event id. An append to an aggregate carries the expected
last sequence of its wildcard subject (optimistic concurrency). An unknown outcome (timeout) is
retried with the same ids; a conflict is resolved by looking at the message right after the
expected sequence: if it carries our id, the append had already been applied. A publish the server
refuses this user (its role's permissions) raises ``PermissionDenied`` at once, never retried.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Sequence

import nats.errors
from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js.api import Header
from nats.js.errors import APIError, NoStreamResponseError, NotFoundError

from voltbus.schemas.base import derive_id
from voltbus.schemas.errors import ConcurrencyConflict, PayloadTooLarge, PublishFailed

from .connection import refusable, watch_refusals
from .records import Appended

log = logging.getLogger(__name__)

EXPECTED_SUBJECT = Header.EXPECTED_LAST_SUBJECT_SEQUENCE.value + "-Subject"
"""nats-py 2.16's Header enum lacks the wildcard-scope header (server 2.11+)."""
WRONG_LAST_SEQUENCE = 10071
BATCH_DUPLICATE_ID = 10201


class Message:
    """One encoded event (or batch of events) ready to publish."""

    __slots__ = ("subject", "data", "event_id", "event_ids")

    def __init__(self, subject: str, data: bytes, event_id: str, event_ids: tuple[str, ...] = ()) -> None:
        self.subject = subject
        self.data = data
        self.event_id = event_id
        self.event_ids = event_ids or (event_id,)
        """The ids of the events it carries (a batch's events', else its own)."""


class Expectation:
    """Optimistic-concurrency guard: the last sequence seen on ``scope`` (0: must be first)."""

    __slots__ = ("scope", "seq")

    def __init__(self, scope: str, seq: int) -> None:
        self.scope = scope
        self.seq = seq

    def headers(self) -> dict[str, str]:
        """The two OCC headers."""
        return {Header.EXPECTED_LAST_SUBJECT_SEQUENCE: str(self.seq), EXPECTED_SUBJECT: self.scope}


def check_sizes(messages: Sequence[Message], limit: int) -> None:
    """Refuse, before anything is sent, any message over the bus's payload limit."""
    for m in messages:
        if len(m.data) > limit:
            raise PayloadTooLarge(m.event_id, len(m.data), limit)


class Writer:
    """The only code that publishes to JetStream."""

    def __init__(self, nc: Client, js: JetStreamContext, stream: str, timeout: float, retries: int) -> None:
        self.nc = nc
        self.js = js
        self.stream = stream
        self.timeout = timeout
        self.retries = retries

    async def append(self, messages: Sequence[Message], expect: Expectation | None) -> Appended:
        """Store ``messages`` exactly once, atomically when there are several."""
        check_sizes(messages, self.nc.max_payload)
        subjects, ids = [m.subject for m in messages], [m.event_id for m in messages]
        for attempt in range(self.retries + 1):
            try:
                if len(messages) == 1:
                    return await refusable(self.nc, subjects, ids, self._publish_one(messages[0], expect))
                return await refusable(self.nc, subjects, ids, self._publish_batch(messages, expect))
            except nats.errors.TimeoutError:
                log.warning("append %s: no ack (try %d), retrying", messages[0].event_id, attempt + 1)
            except APIError as exc:
                if exc.err_code in (WRONG_LAST_SEQUENCE, BATCH_DUPLICATE_ID) and expect is not None:
                    return await self.resolve(messages, expect)
                if exc.err_code == BATCH_DUPLICATE_ID:
                    return Appended(seq=await self.head(messages[-1].subject), already_applied=True)
                raise PublishFailed([m.event_id for m in messages], _describe(exc)) from None
        raise PublishFailed([m.event_id for m in messages], f"no acknowledgement after {self.retries + 1} tries")

    async def _publish_one(self, m: Message, expect: Expectation | None) -> Appended:
        headers = {Header.MSG_ID: m.event_id, **(expect.headers() if expect else {})}
        try:
            ack = await self.js.publish(m.subject, m.data, timeout=self.timeout, headers=headers)
        except NoStreamResponseError:
            raise PublishFailed([m.event_id], f"no stream captures {m.subject}; run ensure_streams") from None
        return Appended(seq=ack.seq, already_applied=bool(ack.duplicate))

    async def _publish_batch(self, messages: Sequence[Message], expect: Expectation | None) -> Appended:
        batch_id = derive_id(*(m.event_id for m in messages))
        last = len(messages)
        for i, m in enumerate(messages, 1):
            headers = {Header.MSG_ID: m.event_id, Header.BATCH_ID: batch_id, Header.BATCH_SEQUENCE: str(i)}
            if i == 1 and expect:
                headers.update(expect.headers())
            if i == last:
                headers[Header.BATCH_COMMIT] = "1"
            if 1 < i < last:
                await self.nc.publish(m.subject, m.data, headers=headers)
                continue
            reply = await self.nc.request(m.subject, m.data, headers=headers, timeout=self.timeout)
            if not reply.data:
                if i == last:
                    raise PublishFailed([x.event_id for x in messages], "empty batch commit reply")
                continue
            body = json.loads(reply.data)
            if "error" in body:
                raise APIError.from_error(body["error"])
        return Appended(seq=int(body["seq"]))

    async def resolve(self, messages: Sequence[Message], expect: Expectation) -> Appended:
        """After a conflict: was our append the one stored right after the expected sequence?"""
        seq = expect.seq
        for m in messages:
            try:
                stored = await self.js.get_msg(self.stream, seq=seq + 1, subject=expect.scope, direct=True, next=True)
            except NotFoundError:
                stored = None
            if stored is None or (stored.headers or {}).get(Header.MSG_ID) != m.event_id:
                raise ConcurrencyConflict(expect.scope, expect.seq, await self.head(expect.scope))
            seq = stored.seq
        return Appended(seq=seq, already_applied=True)

    async def head(self, scope: str) -> int:
        """Sequence of the newest message on ``scope`` (wildcards allowed); 0 when there is none."""
        try:
            msg = await self.js.get_last_msg(self.stream, scope, direct=True)
        except NotFoundError:
            return 0
        return msg.seq

    async def append_many(
        self, items: Sequence[tuple[Message, Expectation | None]]
    ) -> list[Appended | ConcurrencyConflict]:
        """Many independent single-event appends, pipelined; each outcome is exact.

        Pipelined publishes are bounded by a timeout (nats-py 2.16 never resolves a pipelined publish
        that the server rejects, issue 985); those that did not succeed are redone one by one, which
        reports the definitive outcome (``PermissionDenied`` at once for a subject this user may not publish to).
        """
        check_sizes([m for m, _ in items], self.nc.max_payload)
        futures = []
        async with watch_refusals(self.nc, {m.subject for m, _ in items}) as denial:
            for m, expect in items:
                headers = {Header.MSG_ID: m.event_id, **(expect.headers() if expect else {})}
                futures.append(await self.js.publish_async(m.subject, m.data, headers=headers))
            await settle(futures, self.timeout, denial)  # a refusal: the redo below raises it for its event
        results: list[Appended | ConcurrencyConflict] = []
        for (m, expect), fut in zip(items, futures, strict=True):
            if fut.done() and not fut.cancelled() and fut.exception() is None:
                ack = fut.result()
                results.append(Appended(seq=ack.seq, already_applied=bool(ack.duplicate)))
                continue
            fut.cancel()  # releases nats-py's pending slot for a future that would never resolve
            try:
                results.append(await self.append([m], expect))
            except ConcurrencyConflict as conflict:
                results.append(conflict)
        return results


async def settle(
    futures: Sequence[asyncio.Future[object]], timeout: float, denial: asyncio.Future[str] | None = None
) -> None:
    """Wait for pipelined acks. The server answers one connection's publishes in order, so once the
    last is answered, an earlier one still open was rejected (and nats-py 2.16 will never resolve it).
    A ``denial`` (a refused publish) ends the wait at once."""
    if futures:
        stop = [futures[-1]] if denial is None else [futures[-1], denial]
        await asyncio.wait(stop, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        if denial is not None and denial.done():
            return
        pending = [f for f in futures if not f.done()]
        if pending:  # replies to earlier publishes arrived before the last one's; give stragglers a moment
            await asyncio.wait(pending, timeout=min(timeout, 0.05))


def _describe(exc: APIError) -> str:
    return f"err_code={exc.err_code} {exc.description}"
