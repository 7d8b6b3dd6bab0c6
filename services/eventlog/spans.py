"""The telemetry path: many span-stream events pipelined, with bounded memory and no silent loss.

Publishes go out in windows; every window waits for its acks with a deadline. Whatever was not
acknowledged is retried with the same message ids (the server deduplicates), and what still fails
is raised as :class:`PublishFailed` naming the events, never dropped.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from nats.js import JetStreamContext
from nats.js.api import Header

from voltbus.schemas.errors import PublishFailed

from .append import Message, settle

log = logging.getLogger(__name__)


async def _window(js: JetStreamContext, batch: Sequence[Message], timeout: float) -> tuple[list[Message], int]:
    """Publish one window; return the messages that were not acknowledged and the highest sequence acked."""
    futures = [await js.publish_async(m.subject, m.data, headers={Header.MSG_ID: m.event_id}) for m in batch]
    await settle(futures, timeout)
    failed, highest = [], 0
    for m, fut in zip(batch, futures, strict=True):
        if not fut.done() or fut.cancelled() or fut.exception() is not None:
            fut.cancel()  # nats-py 2.16 never resolves a rejected pipelined publish (issue 985)
            failed.append(m)
        else:
            highest = max(highest, fut.result().seq)
    return failed, highest


async def publish_pipelined(
    js: JetStreamContext, messages: Sequence[Message], window: int, timeout: float, retries: int
) -> int:
    """Publish ``messages`` at most ``window`` in flight; return the highest sequence stored; raise if
    any stays unacknowledged."""
    pending, highest = list(messages), 0
    for attempt in range(retries + 1):
        failed: list[Message] = []
        for start in range(0, len(pending), window):
            lost, acked = await _window(js, pending[start : start + window], timeout)
            failed += lost
            highest = max(highest, acked)
        if not failed:
            return highest
        log.warning("%d span event(s) unacknowledged (try %d), retrying", len(failed), attempt + 1)
        pending = failed
    raise PublishFailed([m.event_id for m in pending], f"unacknowledged after {retries + 1} tries")
