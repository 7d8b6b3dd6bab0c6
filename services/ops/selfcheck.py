"""The self-check: append, conflict, deduplicate, publish spans and replay them on a live bus.

Every step checks what it claims and prints its rate; anything off raises SelfCheckFailed.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

import msgspec

from voltbus.schemas.base import derive_id
from voltbus.schemas.errors import ConcurrencyConflict, VoltbusError
from voltbus.schemas.rollouts import AttemptClaimed, RolloutQueued
from voltbus.schemas.spans import SpanRecorded, SpanStatus
from voltbus.services.eventlog import Envelope, EventLog
from voltbus.services.settings import NatsSettings


class SelfCheckFailed(VoltbusError):
    """A self-check step found something wrong."""


def _check(ok: bool, what: str) -> None:
    if not ok:
        raise SelfCheckFailed(f"self-check failed: {what}")


def _queued(run: str, i: int) -> RolloutQueued:
    rid = f"{run}-{i}"
    task = msgspec.Raw(msgspec.json.encode({"question": f"{i} + {i}", "answer": 2 * i}))
    return RolloutQueued(
        event_id=derive_id(rid, "queued"), rollout_id=rid, input=task, mode="train", queued_at=time.time()
    )


def _claimed(rid: str, worker: str) -> AttemptClaimed:
    return AttemptClaimed(
        event_id=derive_id(rid, "claim", 1, worker),
        rollout_id=rid,
        attempt_id=f"{rid}-a1",
        sequence_id=1,
        worker_id=worker,
        at=time.time(),
    )


def _span(rid: str, n: int) -> SpanRecorded:
    return SpanRecorded(
        event_id=derive_id(rid, "span", n),
        rollout_id=rid,
        attempt_id=f"{rid}-a1",
        sequence_id=n + 1,
        trace_id=uuid.uuid4().hex,
        span_id=uuid.uuid4().hex[:16],
        name="llm.call",
        start_time=time.time(),
        end_time=time.time(),
        attributes={"round": n},
        status=SpanStatus(status_code="OK"),
    )


async def run_selfcheck(settings: NatsSettings, rollouts: int, spans: int, say: Callable[[str], None]) -> None:
    """Run every step against the bus at ``settings.url``, printing one line per step."""
    run = f"check-{uuid.uuid4().hex[:8]}"
    log = await EventLog.connect(settings, name="voltbus-selfcheck")
    try:
        say(f"connected to {settings.url}, streams {log.topology.control_stream} and {log.topology.spans_stream} ready")
        start_ctrl = (await log.js.stream_info(log.topology.control_stream)).state.last_seq + 1
        start_spans = (await log.js.stream_info(log.topology.spans_stream)).state.last_seq + 1
        t = time.perf_counter()
        results = await log.append_many([_queued(run, i) for i in range(rollouts)])
        _check(all(not isinstance(r, ConcurrencyConflict) for r in results), "a fresh rollout conflicted")
        say(f"enqueued {rollouts} rollouts ({rollouts / (time.perf_counter() - t):,.0f}/s)")
        claims = min(rollouts, 200)
        t = time.perf_counter()
        for i, r in enumerate(results[:claims]):
            assert not isinstance(r, ConcurrencyConflict)
            await log.append([_claimed(f"{run}-{i}", "w1")], expected_seq=r.seq)
        say(f"claimed {claims} rollouts with optimistic concurrency ({claims / (time.perf_counter() - t):,.0f}/s)")
        rid = f"{run}-0"
        try:
            await log.append([_claimed(rid, "w2")], expected_seq=results[0].seq)  # type: ignore[union-attr]
            _check(False, "a second claim on the same sequence was accepted")
        except ConcurrencyConflict:
            say("a second claim on the same rollout was refused (conflict)")
        again = await log.append([_claimed(rid, "w1")], expected_seq=results[0].seq)  # type: ignore[union-attr]
        _check(again.already_applied, "a retried claim was stored twice")
        say("a retried claim was recognised as already applied")
        t = time.perf_counter()
        await log.publish_spans([_span(f"{run}-{i % rollouts}", i) for i in range(spans)])
        say(f"published {spans} spans ({spans / (time.perf_counter() - t):,.0f}/s)")
        t = time.perf_counter()
        ctrl = [e async for e in log.replay("control", from_seq=start_ctrl)]
        got = [e for e in ctrl if isinstance(e, Envelope) and e.event.rollout_id.startswith(run)]  # type: ignore[union-attr]
        _check(
            len(got) == rollouts + claims,
            f"replayed {len(got)} control events of this run, wanted {rollouts + claims}",
        )
        events = [e.event async for e in log.telemetry(from_seq=start_spans) if isinstance(e, Envelope)]
        mine = [e for e in events if e.rollout_id.startswith(run)]  # type: ignore[union-attr]
        _check(len(mine) == spans, f"replayed {len(mine)} spans of this run, wanted {spans}")
        n = len(ctrl) + len(events)
        say(f"replayed {n} events in order ({n / (time.perf_counter() - t):,.0f}/s): nothing lost, nothing doubled")
    finally:
        await log.close()
