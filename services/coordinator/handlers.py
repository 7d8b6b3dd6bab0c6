"""The coordinator's I/O glue: stream readers, the timer, and dead letters, each restartable."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable

from nats.aio.msg import Msg

from voltbus.schemas.errors import UnknownRollout, VoltbusError
from voltbus.services.clients.store import Store
from voltbus.services.eventlog import Envelope, unsubscribe

from .liveness import Watch
from .tracker import Tracker

log = logging.getLogger(__name__)


async def catch_up(store: Store, tracker: Tracker, after: int = 0) -> int:
    """Fold the control stream as it is now, after sequence ``after`` (a snapshot's); return the last sequence read."""
    last = after
    async for item in store.log.replay("control", from_seq=after + 1):
        if isinstance(item, Envelope):
            tracker.apply_control(item)
        last = item.seq
    return last


async def follow_control(store: Store, tracker: Tracker, position: list[int]) -> None:
    """Fold new control events as they arrive (the writer of a cancel frees its worker, not the coordinator)."""
    async for item in store.log.replay("control", from_seq=position[0] + 1, follow=True):
        if isinstance(item, Envelope):
            tracker.apply_control(item)
        position[0] = item.seq


async def catch_up_spans(store: Store, tracker: Tracker, since: float) -> int:
    """Read the signs of life stored since ``since`` before any check runs; return the last sequence read."""
    end = (await store.log.js.stream_info(store.topology.spans_stream)).state.last_seq
    first = await store.log.first_seq_at("spans", since)
    if first is not None and first <= end:
        async for item in store.log.replay("spans", from_seq=first, to_seq=end):
            if isinstance(item, Envelope):
                tracker.apply_span(item)
    return end


async def follow_spans(store: Store, tracker: Tracker, position: list[int], since: float) -> None:
    """Record signs of life from the spans stream, from ``since`` (or where it left off)."""
    start = {"from_seq": position[0] + 1} if position[0] else {"from_time": since}
    async for item in store.log.replay("spans", follow=True, **start):  # type: ignore[arg-type]
        position[0] = item.seq
        if isinstance(item, Envelope):
            tracker.apply_span(item)


async def tick(
    store: Store, tracker: Tracker, clock: Callable[[], float] = time.time, watch: Watch | None = None
) -> int:
    """Expire every attempt past a limit now, or whose worker is gone; return how many were expired."""
    found = {(r, a): verdict for r, a, verdict in tracker.due(clock())}
    for r, a, verdict in await watch.lost(store, tracker, clock) if watch else []:
        found.setdefault((r, a), verdict)
    expired = 0
    for (rollout_id, attempt_id), (status, seen) in found.items():
        try:
            state = await store.expire_attempt(rollout_id, attempt_id, status, last_heartbeat_at=seen)
        except VoltbusError as exc:
            log.warning("expire rollout_id=%s attempt_id=%s failed: %s", rollout_id, attempt_id, exc)
            continue
        log.info("rollout_id=%s attempt_id=%s %s -> rollout %s", rollout_id, attempt_id, status, state.status)
        expired += 1
    return expired


async def timer(store: Store, tracker: Tracker, every: float, watch: Watch | None = None) -> None:
    """Check attempts every ``every`` seconds."""
    while True:
        await tick(store, tracker, watch=watch)
        await asyncio.sleep(every)


async def park(store: Store, msg: Msg) -> None:
    """Fail the rollout of one max-deliveries advisory, with the reason, then ack the advisory."""
    advisory = json.loads(msg.data)
    seq, deliveries = int(advisory["stream_seq"]), advisory.get("deliveries")
    stored = await store.log.js.get_msg(store.topology.control_stream, seq=seq)
    rollout_id = (stored.subject or "").split(".")[2]
    dispatch_event_id = (stored.headers or {}).get("Nats-Msg-Id")
    reason = f"dispatch message {seq} was delivered {deliveries} times without a successful claim"
    try:
        state = await store.park_rollout(rollout_id, reason, dispatch_event_id)
    except UnknownRollout:  # nothing readable to park: record why, and do not retry the advisory forever
        log.error("dead letter %d on %s names no readable rollout; dropped from the queue", seq, stored.subject)
    else:
        log.warning("dead letter rollout_id=%s: %s (rollout now %s)", rollout_id, reason, state.status)
    await msg.ack()


async def dead_letters(store: Store) -> None:
    """Park every rollout whose dispatch message exhausted its deliveries (durable, shared consumer)."""
    topo = store.topology
    sub = await store.log.js.pull_subscribe("", durable=f"{topo.namespace}-deadletters", stream=topo.advisories_stream)
    try:
        while True:
            try:
                msgs = await sub.fetch(10, timeout=5)
            except TimeoutError:  # nats-py raises both its own and asyncio's TimeoutError here
                continue
            for msg in msgs:
                try:
                    await park(store, msg)
                except VoltbusError as exc:
                    log.error("could not park advisory %s: %s", msg.data[:200], exc)
                    await msg.nak(delay=5)
    finally:
        await unsubscribe(sub)  # a pending fetch would otherwise hold the connection's drain 5 s
