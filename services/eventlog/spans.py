"""The telemetry path: many span-stream events pipelined, with bounded memory and no silent loss.

Publishes go out in windows; every window waits for its acks with a deadline. Whatever was not
acknowledged is retried with the same message ids (the server deduplicates), and what still fails
is raised as :class:`PublishFailed` naming the events, never dropped. A subject the server refuses
this user raises :class:`PermissionDenied` at once, never retried.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js.api import Header

from voltbus.schemas.base import SCHEMA_VERSION, derive_id
from voltbus.schemas.errors import PermissionDenied, PublishFailed

from .append import Message, settle
from .connection import refused, watch_refusals

log = logging.getLogger(__name__)

_HEAD = b'{"type":"SpanBatch","event_id":"%s","schema_version":%d,"events":['
"""A ``SpanBatch`` as msgspec encodes it, up to its events (which are joined in as they were encoded)."""


def batched(messages: Sequence[Message], max_bytes: int) -> list[Message]:
    """``messages`` with those of one subject packed into ``SpanBatch`` messages of at most ``max_bytes`` of
    events each; a message alone in its pack (or ``max_bytes`` 0) goes as it is. The same messages give the
    same packs, ids included (a batch's id is derived from its events' ids in order), so a publish retried
    with the same events is deduplicated by the server as a single event's is.

    >>> m = [Message("s.1", b'{"a":1}', "e1"), Message("s.2", b'{"b":2}', "e2"), Message("s.1", b'{"c":3}', "e3")]
    >>> [(x.subject, x.data[-20:]) for x in batched(m, 1000)]
    [('s.1', b'":[{"a":1},{"c":3}]}'), ('s.2', b'{"b":2}')]
    >>> [x.event_id for x in batched(m, 0)] == ["e1", "e2", "e3"]
    True
    """
    if max_bytes <= 0 or len(messages) < 2:
        return list(messages)
    groups: dict[str, list[list[Message]]] = {}
    sizes: dict[str, int] = {}
    for m in messages:
        packs = groups.setdefault(m.subject, [[]])
        if packs[-1] and sizes[m.subject] + len(m.data) > max_bytes:
            packs.append([])
            sizes[m.subject] = 0
        packs[-1].append(m)
        sizes[m.subject] = sizes.get(m.subject, 0) + len(m.data) + 1
    return [_pack(subject, pack) for subject, packs in groups.items() for pack in packs]


def _pack(subject: str, pack: list[Message]) -> Message:
    if len(pack) == 1:
        return pack[0]
    event_id = derive_id("span-batch", *(m.event_id for m in pack))
    data = _HEAD % (event_id.encode(), SCHEMA_VERSION) + b",".join(m.data for m in pack) + b"]}"
    return Message(subject, data, event_id, tuple(m.event_id for m in pack))


async def _window(
    nc: Client, js: JetStreamContext, batch: Sequence[Message], timeout: float
) -> tuple[list[Message], int]:
    """Publish one window; return the messages that were not acknowledged and the highest sequence acked."""
    async with watch_refusals(nc, {m.subject for m in batch}) as denial:
        futures = [await js.publish_async(m.subject, m.data, headers={Header.MSG_ID: m.event_id}) for m in batch]
        await settle(futures, timeout, denial)
    failed, highest = [], 0
    for m, fut in zip(batch, futures, strict=True):
        if not fut.done() or fut.cancelled() or fut.exception() is not None:
            fut.cancel()  # nats-py 2.16 never resolves a rejected pipelined publish (issue 985)
            failed.append(m)
        else:
            highest = max(highest, fut.result().seq)
    if denial.done():  # every event of the window not acknowledged is named, the refused subject's and the others'
        raise refused(nc, denial.result(), [m.subject for m in failed], [i for m in failed for i in m.event_ids])
    return failed, highest


async def publish_pipelined(
    nc: Client, js: JetStreamContext, messages: Sequence[Message], window: int, timeout: float, retries: int
) -> int:
    """Publish ``messages`` at most ``window`` in flight; return the highest sequence stored; raise if
    any stays unacknowledged."""
    pending, highest = list(messages), 0
    for attempt in range(retries + 1):
        failed: list[Message] = []
        for start in range(0, len(pending), window):
            try:
                lost, acked = await _window(nc, js, pending[start : start + window], timeout)
            except PermissionDenied as exc:  # the windows not sent are not stored either: name them too
                later = [i for m in pending[start + window :] for i in m.event_ids]
                raise PermissionDenied(exc.user, exc.subject, exc.event_ids + later) from None
            failed += lost
            highest = max(highest, acked)
        if not failed:
            return highest
        count = sum(len(m.event_ids) for m in failed)
        log.warning("%d span event(s) unacknowledged (try %d), retrying", count, attempt + 1)
        pending = failed
    raise PublishFailed([i for m in pending for i in m.event_ids], f"unacknowledged after {retries + 1} tries")
