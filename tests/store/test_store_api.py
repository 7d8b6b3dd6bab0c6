"""The store's API contract: every LightningStore method, as voltbus means it, on a real bus.

Agent Lightning 0.3's semantics (research notes §1.3-1.11), with voltbus's deliberate differences:
unknown ids raise, terminal rollouts absorb, resources are immutable versions, sequence ids come
from an atomic per-rollout counter.
"""

from __future__ import annotations

import asyncio
import time

import msgspec
import pytest
from opentelemetry.sdk.resources import Resource as OtelResource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Status, StatusCode

from voltbus.schemas import codec
from voltbus.schemas.errors import IllegalTransition, InvalidCommand, UnknownAttempt, UnknownRollout
from voltbus.schemas.resources import LLM, GenericResource, PromptTemplate
from voltbus.schemas.rollouts import RolloutConfig
from voltbus.schemas.spans import SpanRecorded
from voltbus.services.clients.store import spans as spans_module
from voltbus.services.eventlog.read import read_subject
from voltbus.services.settings import NatsSettings
from voltbus.store import (
    Attempt,
    AttemptedRollout,
    EnqueueRolloutRequest,
    ResourcesUpdate,
    Rollout,
    Span,
    Store,
    Worker,
    connect,
)

RETRY_TWICE = RolloutConfig(max_attempts=2, retry_condition=["failed", "timeout", "unresponsive"])
TRACE = "0123456789abcdef0123456789abcdef"


def span(rollout_id: str, attempt_id: str, seq: int, span_id: str = "00000000000000a1", **kw: object) -> Span:
    """A plain span of an attempt."""
    return Span(
        rollout_id=rollout_id,
        attempt_id=attempt_id,
        sequence_id=seq,
        trace_id=TRACE,
        span_id=span_id,
        name=str(kw.pop("name", "step")),
        start_time=1.0,
        end_time=2.0,
        **kw,  # type: ignore[arg-type]
    )


async def stored_spans(store: Store, rollout_id: str) -> list[SpanRecorded]:
    """The spans the spans stream holds for a rollout, in stream order."""
    topo = store.topology
    envs, _ = await read_subject(store.log.nc, topo.spans_stream, topo.span_shard(rollout_id), codec.decode_spans)
    return [e.event for e in envs if isinstance(e.event, SpanRecorded) and e.event.rollout_id == rollout_id]


async def started(store: Store, **kw: object) -> tuple[str, str]:
    """A rollout with attempt 1 preparing: (rollout_id, attempt_id)."""
    r = await store.start_rollout({"q": 1}, **kw)  # type: ignore[arg-type]
    return r.rollout_id, r.attempt.attempt_id


PROMPT = {"prompt": PromptTemplate(template="Hello {name}")}


# ---------------------------------------------------------------- enqueue_rollout


async def test_enqueue_rollout_defaults(store: Store) -> None:
    before = time.time()
    r = await store.enqueue_rollout({"task": "add", "a": [1, 2]})
    assert type(r) is Rollout
    assert r.rollout_id.startswith("ro-")
    assert r.status == "queuing"
    assert r.input == {"task": "add", "a": [1, 2]}
    assert r.mode is None and r.resources_id is None and r.end_time is None
    assert r.config == RolloutConfig()
    assert r.metadata == {}
    assert before <= r.start_time <= time.time()
    assert await store.get_rollout_by_id(r.rollout_id) == r


async def test_enqueue_rollout_keeps_fields_and_copies_config_and_metadata(store: Store) -> None:
    config = RolloutConfig(timeout_seconds=5.0, max_attempts=3, retry_condition=["failed"])
    metadata = {"k": [1, 2], "nested": {"x": 1}}
    r = await store.enqueue_rollout("q", mode="val", resources_id="rs-explicit:7", config=config, metadata=metadata)
    metadata["k"].append(3)
    metadata["new"] = True
    config.retry_condition.append("timeout")
    got = await store.get_rollout_by_id(r.rollout_id)
    assert got is not None
    assert (got.mode, got.resources_id) == ("val", "rs-explicit:7")
    assert got.metadata == {"k": [1, 2], "nested": {"x": 1}}
    assert got.config.retry_condition == ["failed"]
    assert got.config.max_attempts == 3 and got.config.timeout_seconds == 5.0


async def test_enqueue_rollout_pins_latest_resources_version(store: Store) -> None:
    assert (await store.enqueue_rollout("none yet")).resources_id is None
    res = await store.add_resources(PROMPT)
    r1 = await store.enqueue_rollout("a")
    assert r1.resources_id == f"{res.resources_id}:1"
    await store.update_resources(res.resources_id, {"prompt": PromptTemplate(template="v2")})
    r2 = await store.enqueue_rollout("b")
    assert r2.resources_id == f"{res.resources_id}:2"
    # the earlier rollout keeps the version it was created with
    old = await store.get_rollout_by_id(r1.rollout_id)
    assert old is not None and old.resources_id == f"{res.resources_id}:1"


# ---------------------------------------------------------------- enqueue_many_rollouts


async def test_enqueue_many_rollouts_keeps_input_order_and_fields(store: Store) -> None:
    res = await store.add_resources(PROMPT)
    reqs = [
        EnqueueRolloutRequest(input=0, mode="train"),
        EnqueueRolloutRequest(input=1, resources_id="rs-other:1", metadata={"m": 1}),
        EnqueueRolloutRequest(input=2, config=RETRY_TWICE),
    ]
    out = await store.enqueue_many_rollouts(reqs)
    assert [r.input for r in out] == [0, 1, 2]
    assert all(r.status == "queuing" and type(r) is Rollout for r in out)
    assert [r.resources_id for r in out] == [f"{res.resources_id}:1", "rs-other:1", f"{res.resources_id}:1"]
    assert out[0].mode == "train" and out[1].metadata == {"m": 1} and out[2].config == RETRY_TWICE
    assert len({r.rollout_id for r in out}) == 3
    for r in out:
        assert await store.get_rollout_by_id(r.rollout_id) == r
    claimed = await store.dequeue_many_rollouts(limit=3)
    assert [c.rollout_id for c in claimed] == [r.rollout_id for r in out]


async def test_enqueue_many_rollouts_thousand_in_one_call(store: Store) -> None:
    out = await store.enqueue_many_rollouts([EnqueueRolloutRequest(input=i) for i in range(1000)])
    assert [r.input for r in out] == list(range(1000))
    assert len({r.rollout_id for r in out}) == 1000
    assert (await store.statistics())["total_rollouts"] == 1000
    last = await store.get_rollout_by_id(out[-1].rollout_id)
    assert last is not None and last.input == 999 and last.status == "queuing"
    claimed = await store.dequeue_many_rollouts(limit=5)
    assert [c.input for c in claimed] == [0, 1, 2, 3, 4]


async def test_enqueue_many_rollouts_empty(store: Store) -> None:
    assert await store.enqueue_many_rollouts([]) == []


# ---------------------------------------------------------------- start_rollout


async def test_start_rollout_creates_preparing_attempt_outside_the_queue(store: Store) -> None:
    r = await store.start_rollout({"x": 1}, mode="test", metadata={"a": 1}, worker_id="w1")
    assert isinstance(r, AttemptedRollout)
    assert r.status == "preparing" and r.mode == "test" and r.metadata == {"a": 1}
    a = r.attempt
    assert (a.sequence_id, a.status, a.worker_id, a.rollout_id) == (1, "preparing", "w1", r.rollout_id)
    assert a.attempt_id.startswith("at-")
    assert a.start_time == r.start_time and a.end_time is None
    assert await store.dequeue_rollout() is None
    assert await store.get_rollout_by_id(r.rollout_id) == r


async def test_start_rollout_defaults_and_latest_resources(store: Store) -> None:
    r = await store.start_rollout("q")
    assert r.resources_id is None and r.metadata == {} and r.config == RolloutConfig()
    res = await store.add_resources(PROMPT)
    assert (await store.start_rollout("q")).resources_id == f"{res.resources_id}:1"


# ---------------------------------------------------------------- dequeue_rollout / dequeue_many_rollouts


async def test_dequeue_rollout_none_when_empty(store: Store) -> None:
    assert await store.dequeue_rollout() is None
    assert await store.dequeue_many_rollouts(limit=3) == []


async def test_dequeue_rollout_is_fifo_and_creates_attempt(store: Store) -> None:
    ids = [(await store.enqueue_rollout(i)).rollout_id for i in range(3)]
    got = [await store.dequeue_rollout() for _ in range(3)]
    assert [g.rollout_id for g in got if g] == ids
    for g in got:
        assert g is not None and g.status == "preparing"
        assert g.attempt.sequence_id == 1 and g.attempt.status == "preparing"
    assert await store.dequeue_rollout() is None


async def test_dequeue_rollout_marks_worker_busy(store: Store) -> None:
    await store.enqueue_rollout("job")
    before = time.time()
    got = await store.dequeue_rollout(worker_id="w1")
    assert got is not None and got.attempt.worker_id == "w1"
    w = await store.get_worker_by_id("w1")
    assert w is not None and w.status == "busy"
    assert (w.current_rollout_id, w.current_attempt_id) == (got.rollout_id, got.attempt.attempt_id)
    assert w.last_dequeue_time is not None and w.last_dequeue_time >= before
    assert w.last_busy_time is not None and w.last_busy_time >= before


async def test_empty_dequeue_marks_worker_idle_once(store: Store) -> None:
    assert await store.dequeue_rollout(worker_id="w1") is None
    w = await store.get_worker_by_id("w1")
    assert w is not None and w.status == "idle" and w.last_dequeue_time is not None
    assert w.current_rollout_id is None
    events = (await store.statistics())["control_events"]
    assert await store.dequeue_rollout(worker_id="w1") is None
    assert (await store.statistics())["control_events"] == events  # an idle poll writes nothing
    assert await store.get_worker_by_id("w1") == w


async def test_dequeue_many_rollouts_limit(store: Store) -> None:
    ids = [(await store.enqueue_rollout(i)).rollout_id for i in range(3)]
    assert await store.dequeue_many_rollouts(limit=0) == []
    assert await store.dequeue_many_rollouts(limit=-1) == []
    first = await store.dequeue_many_rollouts(limit=2, worker_id="w1")
    assert [r.rollout_id for r in first] == ids[:2]
    rest = await store.dequeue_many_rollouts(limit=5)
    assert [r.rollout_id for r in rest] == ids[2:]
    # one worker maps to one current attempt: the last one it claimed
    w = await store.get_worker_by_id("w1")
    assert w is not None and (w.status, w.current_attempt_id) == ("busy", first[-1].attempt.attempt_id)


async def test_dequeue_skips_cancelled_rollouts(store: Store) -> None:
    a = await store.enqueue_rollout("a")
    b = await store.enqueue_rollout("b")
    await store.update_rollout(a.rollout_id, status="cancelled")
    got = await store.dequeue_rollout()
    assert got is not None and got.rollout_id == b.rollout_id
    assert await store.dequeue_rollout() is None


# ---------------------------------------------------------------- start_attempt


async def test_start_attempt_opens_next_attempt_ignoring_max_attempts(store: Store) -> None:
    rid, first = await started(store)
    r = await store.start_attempt(rid, worker_id="w2")
    assert r.status == "preparing"
    assert (r.attempt.sequence_id, r.attempt.worker_id, r.attempt.status) == (2, "w2", "preparing")
    assert r.attempt.attempt_id != first
    assert r.config.max_attempts == 1  # the default, yet a third attempt still opens
    assert (await store.start_attempt(rid)).attempt.sequence_id == 3
    assert [a.sequence_id for a in await store.get_attempts(rid)] == [1, 2, 3]
    w = await store.get_worker_by_id("w2")
    assert w is not None and w.status == "busy" and w.current_attempt_id == r.attempt.attempt_id


async def test_start_attempt_bypasses_the_queue(store: Store) -> None:
    q = await store.enqueue_rollout("q")
    r = await store.start_attempt(q.rollout_id)
    assert r.status == "preparing" and r.attempt.sequence_id == 1
    assert await store.dequeue_rollout() is None  # the queue entry is stale now
    assert len(await store.get_attempts(q.rollout_id)) == 1


async def test_start_attempt_refused(store: Store) -> None:
    with pytest.raises(UnknownRollout):
        await store.start_attempt("ro-missing")
    rid, aid = await started(store)
    await store.update_attempt(rid, aid, status="succeeded")
    with pytest.raises(IllegalTransition):
        await store.start_attempt(rid)
    c = await store.enqueue_rollout("c")
    await store.cancel_rollout(c.rollout_id)
    with pytest.raises(IllegalTransition):
        await store.start_attempt(c.rollout_id)
    assert len(await store.get_attempts(rid)) == 1


# ---------------------------------------------------------------- update_rollout


async def test_update_rollout_fields_with_unset_semantics(store: Store) -> None:
    r = await store.enqueue_rollout("q", mode="train", metadata={"a": 1}, resources_id="rs-x:1")
    u = await store.update_rollout(r.rollout_id, mode="val")
    assert (u.mode, u.metadata, u.resources_id, u.status) == ("val", {"a": 1}, "rs-x:1", "queuing")
    u = await store.update_rollout(r.rollout_id, metadata={"b": 2}, config=RETRY_TWICE, resources_id="rs-y:3")
    assert (u.mode, u.metadata, u.config, u.resources_id) == ("val", {"b": 2}, RETRY_TWICE, "rs-y:3")
    assert await store.get_rollout_by_id(r.rollout_id) == u
    assert (await store.update_rollout(r.rollout_id)) == u  # nothing given: nothing changes


async def test_update_rollout_refuses_input_and_unknown(store: Store) -> None:
    r = await store.enqueue_rollout("original")
    with pytest.raises(InvalidCommand):
        await store.update_rollout(r.rollout_id, input="changed")
    got = await store.get_rollout_by_id(r.rollout_id)
    assert got is not None and got.input == "original"
    with pytest.raises(UnknownRollout):
        await store.update_rollout("ro-missing", mode="val")
    with pytest.raises(UnknownRollout):
        await store.update_rollout("ro-missing", status="cancelled")


async def test_update_rollout_status_cancelled(store: Store) -> None:
    rid, aid = await started(store)
    u = await store.update_rollout(rid, status="cancelled")
    assert u.status == "cancelled" and u.end_time is not None
    a = await store.get_latest_attempt(rid)
    assert a is not None and a.status == "failed" and a.end_time is not None


async def test_update_rollout_status_failed(store: Store) -> None:
    r = await store.enqueue_rollout("q", config=RETRY_TWICE)
    u = await store.update_rollout(r.rollout_id, status="failed")
    assert u.status == "failed" and u.end_time is not None
    assert await store.dequeue_rollout() is None


async def test_update_rollout_status_succeeded_needs_an_attempt(store: Store) -> None:
    q = await store.enqueue_rollout("q")
    with pytest.raises(IllegalTransition):
        await store.update_rollout(q.rollout_id, status="succeeded")
    rid, _ = await started(store)
    u = await store.update_rollout(rid, status="succeeded")
    assert u.status == "succeeded" and u.end_time is not None
    a = await store.get_latest_attempt(rid)
    assert a is not None and a.status == "succeeded"


@pytest.mark.parametrize("status", ["queuing", "requeuing", "preparing", "bogus"])
async def test_update_rollout_other_statuses_refused(store: Store, status: str) -> None:
    rid, aid = await started(store)
    await store.update_attempt(rid, aid, status="running")
    with pytest.raises(IllegalTransition):
        await store.update_rollout(rid, status=status)
    got = await store.get_rollout_by_id(rid)
    assert got is not None and got.status == "running"
    assert (await store.update_rollout(rid, status="running")) == got  # the current status: no change


async def test_update_rollout_terminal_absorbs(store: Store) -> None:
    rid, _ = await started(store)
    done = await store.update_rollout(rid, status="succeeded")
    with pytest.raises(IllegalTransition):
        await store.update_rollout(rid, status="cancelled")
    with pytest.raises(IllegalTransition):
        await store.update_rollout(rid, status="failed")
    got = await store.get_rollout_by_id(rid)
    assert got is not None and got.status == "succeeded" and got.end_time == done.end_time


# ---------------------------------------------------------------- update_attempt


async def test_update_attempt_running_then_succeeded(store: Store) -> None:
    rid, aid = await started(store, worker_id="w1")
    a = await store.update_attempt(rid, aid, status="running")
    assert a.status == "running" and a.end_time is None
    assert (await store.get_rollout_by_id(rid)).status == "running"  # type: ignore[union-attr]
    a = await store.update_attempt(rid, "latest", status="succeeded")
    assert isinstance(a, Attempt) and a.attempt_id == aid
    assert a.status == "succeeded" and a.end_time is not None
    r = await store.get_rollout_by_id(rid)
    assert r is not None and r.status == "succeeded" and r.end_time == a.end_time
    w = await store.get_worker_by_id("w1")
    assert w is not None and w.status == "idle" and w.current_attempt_id is None


async def test_update_attempt_failed_without_retry_fails_rollout(store: Store) -> None:
    rid, aid = await started(store, worker_id="w1")
    a = await store.update_attempt(rid, aid, status="failed")
    assert a.status == "failed" and a.end_time is not None and a.error is not None
    r = await store.get_rollout_by_id(rid)
    assert r is not None and r.status == "failed"
    assert (await store.get_worker_by_id("w1")).status == "idle"  # type: ignore[union-attr]


async def test_update_attempt_failure_requeues_until_max_attempts(store: Store) -> None:
    r = await store.enqueue_rollout("q", config=RETRY_TWICE)
    first = await store.dequeue_rollout()
    assert first is not None
    await store.update_attempt(r.rollout_id, "latest", status="failed")
    got = await store.get_rollout_by_id(r.rollout_id)
    assert got is not None and got.status == "requeuing" and got.end_time is None
    second = await store.dequeue_rollout()
    assert second is not None and second.rollout_id == r.rollout_id
    assert second.attempt.sequence_id == 2 and second.status == "preparing"
    await store.update_attempt(r.rollout_id, "latest", status="failed")
    got = await store.get_rollout_by_id(r.rollout_id)
    assert got is not None and got.status == "failed"
    assert await store.dequeue_rollout() is None


@pytest.mark.parametrize("status", ["timeout", "unresponsive"])
async def test_update_attempt_expiry_follows_retry_policy(store: Store, status: str) -> None:
    rid, aid = await started(store, config=RETRY_TWICE, worker_id="w1")
    a = await store.update_attempt(rid, aid, status=status)
    assert a.status == status
    assert (await store.get_rollout_by_id(rid)).status == "requeuing"  # type: ignore[union-attr]
    assert (await store.get_worker_by_id("w1")).status == "unknown"  # type: ignore[union-attr]
    rid2, aid2 = await started(store)  # default config: no retry
    await store.update_attempt(rid2, aid2, status=status)
    assert (await store.get_rollout_by_id(rid2)).status == "failed"  # type: ignore[union-attr]


async def test_update_attempt_retry_condition_is_respected(store: Store) -> None:
    only_timeout = RolloutConfig(max_attempts=3, retry_condition=["timeout"])
    rid, aid = await started(store, config=only_timeout)
    await store.update_attempt(rid, aid, status="failed")
    assert (await store.get_rollout_by_id(rid)).status == "failed"  # type: ignore[union-attr]


async def test_update_attempt_non_latest_does_not_move_rollout(store: Store) -> None:
    rid, first = await started(store)
    await store.start_attempt(rid)
    a = await store.update_attempt(rid, first, status="failed")
    assert a.status == "failed" and a.sequence_id == 1
    r = await store.get_rollout_by_id(rid)
    assert isinstance(r, AttemptedRollout) and r.status == "preparing" and r.attempt.sequence_id == 2


async def test_update_attempt_metadata_and_worker_id(store: Store) -> None:
    rid, aid = await started(store)
    a = await store.update_attempt(rid, aid, metadata={"k": "v"})
    assert a.metadata == {"k": "v"} and a.worker_id is None and a.status == "preparing"
    a = await store.update_attempt(rid, "latest", worker_id="w9")
    assert a.worker_id == "w9" and a.metadata == {"k": "v"}
    assert await store.get_latest_attempt(rid) == a


async def test_update_attempt_last_heartbeat_time(store: Store) -> None:
    rid, aid = await started(store)
    a = await store.update_attempt(rid, aid, last_heartbeat_time=1234.5)
    assert a.last_heartbeat_time == 1234.5
    latest = await store.get_latest_attempt(rid)
    assert latest is not None and latest.last_heartbeat_time == 1234.5


async def test_update_attempt_refused(store: Store) -> None:
    rid, aid = await started(store)
    with pytest.raises(UnknownRollout):
        await store.update_attempt("ro-missing", "latest", status="running")
    with pytest.raises(UnknownAttempt):
        await store.update_attempt(rid, "at-missing", status="running")
    with pytest.raises(UnknownAttempt):
        await store.update_attempt(rid, "at-missing", metadata={"a": 1})
    q = await store.enqueue_rollout("no attempts")
    with pytest.raises(UnknownAttempt):
        await store.update_attempt(q.rollout_id, "latest", status="running")
    with pytest.raises(InvalidCommand):
        await store.update_attempt(rid, aid, status="preparing")
    await store.update_attempt(rid, aid, status="succeeded")
    with pytest.raises(IllegalTransition):
        await store.update_attempt(rid, aid, status="failed")
    assert (await store.get_rollout_by_id(rid)).status == "succeeded"  # type: ignore[union-attr]


# ---------------------------------------------------------------- reads


async def test_get_rollout_by_id(store: Store) -> None:
    assert await store.get_rollout_by_id("ro-missing") is None
    q = await store.enqueue_rollout("q")
    got = await store.get_rollout_by_id(q.rollout_id)
    assert type(got) is Rollout
    rid, _ = await started(store)
    second = await store.start_attempt(rid)
    got = await store.get_rollout_by_id(rid)
    assert isinstance(got, AttemptedRollout) and got.attempt == second.attempt


async def test_get_latest_attempt_and_get_attempts(store: Store) -> None:
    assert await store.get_latest_attempt("ro-missing") is None
    q = await store.enqueue_rollout("q")
    assert await store.get_latest_attempt(q.rollout_id) is None
    assert await store.get_attempts(q.rollout_id) == []
    rid, first = await started(store)
    await store.update_attempt(rid, first, status="running")
    second = (await store.start_attempt(rid)).attempt
    assert await store.get_latest_attempt(rid) == second
    attempts = await store.get_attempts(rid)
    assert [(a.attempt_id, a.sequence_id) for a in attempts] == [(first, 1), (second.attempt_id, 2)]
    assert attempts[0].status == "running"
    with pytest.raises(UnknownRollout):
        await store.get_attempts("ro-missing")


# ---------------------------------------------------------------- cancel_rollout


async def test_cancel_rollout_ends_running_attempt(store: Store) -> None:
    rid, aid = await started(store)
    await store.update_attempt(rid, aid, status="running")
    c = await store.cancel_rollout(rid, reason="user")
    assert c.status == "cancelled" and c.end_time is not None
    a = await store.get_latest_attempt(rid)
    assert a is not None and a.status == "failed" and a.end_time is not None
    with pytest.raises(IllegalTransition):
        await store.update_attempt(rid, aid, status="succeeded")
    assert (await store.cancel_rollout(rid)).status == "cancelled"  # a repeat is harmless
    with pytest.raises(UnknownRollout):
        await store.cancel_rollout("ro-missing")


async def test_cancel_rollout_refused_on_finished(store: Store) -> None:
    rid, aid = await started(store)
    await store.update_attempt(rid, aid, status="succeeded")
    with pytest.raises(IllegalTransition):
        await store.cancel_rollout(rid)


@pytest.mark.parametrize("how", ["cancel_rollout", "cancelled", "failed"])
async def test_ending_a_rollout_frees_its_worker(store: Store, how: str) -> None:
    rid, _ = await started(store, worker_id="w1")
    if how == "cancel_rollout":
        await store.cancel_rollout(rid)
    else:
        await store.update_rollout(rid, status=how)
    w = await store.get_worker_by_id("w1")
    assert w is not None and w.status == "idle" and w.current_attempt_id is None


# ---------------------------------------------------------------- spans


async def test_add_span_stores_and_first_span_marks_running(store: Store) -> None:
    rid, aid = await started(store)
    s = span(rid, aid, 1, attributes={"k": "v", "n": 2}, parent_id="00000000000000ff")
    assert await store.add_span(s) == s
    a = await store.get_latest_attempt(rid)
    assert a is not None and a.status == "running" and a.last_heartbeat_time is not None
    assert (await store.get_rollout_by_id(rid)).status == "running"  # type: ignore[union-attr]
    [rec] = await stored_spans(store, rid)
    assert (rec.attempt_id, rec.sequence_id, rec.span_id, rec.parent_id) == (aid, 1, s.span_id, s.parent_id)
    assert rec.attributes == {"k": "v", "n": 2} and rec.trace_id == TRACE


async def test_later_spans_do_not_rewrite_the_attempt_record(store: Store) -> None:
    """Deliberate difference: signs of life stay on the spans stream (the coordinator reads them there);
    the attempt record keeps the running transition's time and explicit update_attempt heartbeats."""
    now = [1000.0]
    clocked = Store(store.log, clock=lambda: now[0])
    rid, aid = await started(clocked)
    await clocked.add_span(span(rid, aid, 1))
    assert (await clocked.get_latest_attempt(rid)).last_heartbeat_time == 1000.0  # type: ignore[union-attr]
    now[0] = 2000.0
    await clocked.add_span(span(rid, aid, 2, span_id="00000000000000a2"))
    assert (await clocked.get_latest_attempt(rid)).last_heartbeat_time == 1000.0  # type: ignore[union-attr]
    await clocked.update_attempt(rid, aid, last_heartbeat_time=2000.0)
    assert (await clocked.get_latest_attempt(rid)).last_heartbeat_time == 2000.0  # type: ignore[union-attr]


async def test_add_span_refuses_unknown_ids(store: Store) -> None:
    rid, _ = await started(store)
    with pytest.raises(UnknownRollout):
        await store.add_span(span("ro-missing", "at-x", 1))
    with pytest.raises(UnknownAttempt):
        await store.add_span(span(rid, "at-missing", 1))
    with pytest.raises(UnknownAttempt):
        await store.add_many_spans([span(rid, "at-missing", 1)])
    assert await stored_spans(store, rid) == []


async def test_add_many_spans_across_attempts(store: Store) -> None:
    rid, first = await started(store)
    second = (await store.start_attempt(rid)).attempt.attempt_id
    spans = [
        span(rid, first, 1, span_id="00000000000000a1"),
        span(rid, second, 2, span_id="00000000000000a1"),  # same span id, other attempt: kept
        span(rid, second, 3, span_id="00000000000000a2"),
    ]
    assert await store.add_many_spans(spans) == spans
    recs = await stored_spans(store, rid)
    assert [(r.attempt_id, r.sequence_id) for r in recs] == [(first, 1), (second, 2), (second, 3)]
    attempts = await store.get_attempts(rid)
    assert [a.status for a in attempts] == ["preparing", "running"]  # only the latest moves
    assert (await store.get_rollout_by_id(rid)).status == "running"  # type: ignore[union-attr]


async def test_attempts_seen_alive_are_remembered_up_to_a_bound(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """A long-lived client (``voltbus store``) records spans of every attempt: it keeps only the most recent ones it
    saw alive, and one forgotten is checked again at its next span (issue 25: no state per attempt forever)."""
    monkeypatch.setattr(spans_module, "RUNNING_KEPT", 2, raising=False)
    keys = [await started(store) for _ in range(3)]
    for i, (rid, aid) in enumerate(keys):
        await store.add_span(span(rid, aid, 1, span_id=f"{i + 1:016x}"))
    assert list(store._running) == keys[1:]
    rid, aid = keys[0]
    await store.add_span(span(rid, aid, 2, span_id="00000000000000b1"))  # forgotten: checked and remembered again
    assert list(store._running) == [*keys[2:], keys[0]]
    assert [len(await stored_spans(store, r)) for r, _ in keys] == [2, 1, 1]


async def test_add_span_repeat_is_stored_once(store: Store) -> None:
    rid, aid = await started(store)
    s = span(rid, aid, 1)
    await store.add_span(s)
    await store.add_span(s)
    await store.add_many_spans([s, s])
    assert len(await stored_spans(store, rid)) == 1


async def test_add_otel_span_converts_a_readable_span(store: Store) -> None:
    rid, aid = await started(store)
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=OtelResource.create({"service.name": "agent"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("test")
    with tracer.start_as_current_span("parent") as parent:
        with tracer.start_as_current_span("child", attributes={"tool": "calc", "args": (1, 2)}) as child:
            child.add_event("called", {"ok": True})
            child.set_status(Status(StatusCode.ERROR, "boom"))
    provider.shutdown()
    finished = {s.name: s for s in exporter.get_finished_spans()}
    readable = finished["child"]

    got = await store.add_otel_span(rid, aid, readable)
    ctx = child.get_span_context()
    assert got.trace_id == format(ctx.trace_id, "032x") and len(got.trace_id) == 32
    assert got.span_id == format(ctx.span_id, "016x") and len(got.span_id) == 16
    assert got.parent_id == format(parent.get_span_context().span_id, "016x")
    assert got.sequence_id == 1 and got.name == "child"
    assert got.start_time == pytest.approx(readable.start_time / 1e9)
    assert got.end_time == pytest.approx(readable.end_time / 1e9)
    assert abs(got.start_time - time.time()) < 60  # seconds, not nanoseconds
    assert got.attributes == {"tool": "calc", "args": [1, 2]}
    assert got.status.status_code == "ERROR" and got.status.description == "boom"
    assert [e.name for e in got.events] == ["called"] and got.events[0].attributes == {"ok": True}
    assert got.resource_attributes["service.name"] == "agent"
    root = await store.add_otel_span(rid, aid, finished["parent"])
    assert root.parent_id is None and root.sequence_id == 2
    explicit = await store.add_otel_span(rid, aid, finished["parent"], sequence_id=42)
    assert explicit.sequence_id == 42
    assert (await store.get_latest_attempt(rid)).status == "running"  # type: ignore[union-attr]
    recs = await stored_spans(store, rid)
    assert {r.span_id for r in recs} == {got.span_id, root.span_id}  # the repeat is stored once
    with pytest.raises(UnknownAttempt):
        await store.add_otel_span(rid, "at-missing", readable)


async def test_span_sequence_ids_per_rollout_across_attempts(store: Store) -> None:
    rid, first = await started(store)
    other, _ = await started(store)
    assert await store.get_next_span_sequence_id(rid, first) == 1
    assert await store.get_next_span_sequence_id(rid, first) == 2
    second = (await store.start_attempt(rid)).attempt.attempt_id
    assert await store.get_next_span_sequence_id(rid, second) == 3
    assert await store.get_next_span_sequence_id(other, "at-any") == 1


async def test_get_many_span_sequence_ids_consecutive_in_request_order(store: Store) -> None:
    r1, a1 = await started(store)
    r2, a2 = await started(store)
    assert await store.get_next_span_sequence_id(r1, a1) == 1
    got = await store.get_many_span_sequence_ids([(r1, a1), (r2, a2), (r1, a1), (r2, a2), (r1, a1)])
    assert got == [2, 1, 3, 2, 4]
    assert await store.get_many_span_sequence_ids([]) == []
    assert await store.get_next_span_sequence_id(r1, a1) == 5


async def test_concurrent_sequence_ids_are_unique(store: Store) -> None:
    rid, aid = await started(store)
    got = await asyncio.gather(*(store.get_next_span_sequence_id(rid, aid) for _ in range(50)))
    assert sorted(got) == list(range(1, 51))


async def test_explicit_sequence_id_advances_the_counter(store: Store) -> None:
    rid, aid = await started(store)
    await store.add_span(span(rid, aid, 10))
    assert await store.get_next_span_sequence_id(rid, aid) == 11


# ---------------------------------------------------------------- resources


async def test_add_resources_creates_version_one(store: Store) -> None:
    assert await store.get_latest_resources() is None
    before = time.time()
    res = await store.add_resources({"llm": LLM(endpoint="http://x/v1", model="m"), **PROMPT})
    assert isinstance(res, ResourcesUpdate) and res.resources_id.startswith("rs-")
    assert res.version == 1 and res.create_time == res.update_time >= before
    assert res.resources["llm"] == LLM(endpoint="http://x/v1", model="m")
    assert await store.get_latest_resources() == res
    assert await store.get_resources_by_id(res.resources_id) == res
    assert await store.get_resources_by_id(f"{res.resources_id}:1") == res
    other = await store.add_resources({"g": GenericResource(value=msgspec.Raw(b'{"a": 1}'))})
    assert other.resources_id != res.resources_id and other.version == 1
    assert await store.get_latest_resources() == other


async def test_update_resources_appends_versions(store: Store) -> None:
    v1 = await store.add_resources(PROMPT)
    rid = v1.resources_id
    v2 = await store.update_resources(rid, {"prompt": PromptTemplate(template="v2")})
    assert (v2.resources_id, v2.version) == (rid, 2)
    assert v2.create_time == v1.create_time and v2.update_time >= v1.update_time
    v3 = await store.update_resources(f"{rid}:2", {"prompt": PromptTemplate(template="v3")})
    assert v3.version == 3
    assert await store.get_resources_by_id(rid) == v3
    assert (await store.get_resources_by_id(f"{rid}:1")) == v1
    assert (await store.get_resources_by_id(f"{rid}:2")).resources["prompt"].template == "v2"  # type: ignore[union-attr]
    assert await store.get_resources_by_id(f"{rid}:9") is None
    assert await store.get_latest_resources() == v3
    assert [v.version for v in await store.resources_history(rid)] == [1, 2, 3]
    assert await store.resources_history(rid) == [v1, v2, v3]


async def test_update_resources_unknown_id_creates_it_and_latest_follows_updates(store: Store) -> None:
    a = await store.add_resources(PROMPT)
    b = await store.update_resources("rs-named", {"g": GenericResource(value=msgspec.Raw(b"1"))})
    assert (b.resources_id, b.version) == ("rs-named", 1)
    assert await store.get_latest_resources() == b
    a2 = await store.update_resources(a.resources_id, PROMPT)
    assert await store.get_latest_resources() == a2
    assert (await store.enqueue_rollout("q")).resources_id == f"{a.resources_id}:2"


async def test_get_resources_unknown(store: Store) -> None:
    assert await store.get_resources_by_id("rs-missing") is None
    assert await store.get_resources_by_id("rs-missing:1") is None
    assert await store.resources_history("rs-missing") == []


async def test_resources_returned_are_copies(store: Store) -> None:
    res = await store.add_resources(PROMPT)
    res.resources.clear()
    got = await store.get_resources_by_id(res.resources_id)
    assert got is not None and list(got.resources) == ["prompt"]


# ---------------------------------------------------------------- workers


async def test_get_worker_by_id_unknown(store: Store) -> None:
    assert await store.get_worker_by_id("w-never") is None


async def test_update_worker_heartbeats_keep_stats_and_status(store: Store) -> None:
    before = time.time()
    w = await store.update_worker("w1", heartbeat_stats={"cpu_cores": 8, "host": "h1"})
    assert isinstance(w, Worker) and w.status == "unknown"
    assert w.heartbeat_stats is not None and w.heartbeat_stats["cpu_cores"] == 8
    assert w.heartbeat_stats["host"] == "h1"
    assert w.last_heartbeat_time is not None and w.last_heartbeat_time >= before
    again = await store.update_worker("w1")
    assert again.heartbeat_stats == w.heartbeat_stats
    assert again.last_heartbeat_time is not None and again.last_heartbeat_time >= w.last_heartbeat_time
    assert await store.get_worker_by_id("w1") == again
    rid, aid = await started(store, worker_id="w1")
    busy = await store.update_worker("w1", heartbeat_stats={"cpu_cores": 4})
    assert busy.status == "busy" and busy.current_attempt_id == aid and busy.current_rollout_id == rid
    assert busy.heartbeat_stats is not None and busy.heartbeat_stats["cpu_cores"] == 4


# ---------------------------------------------------------------- statistics


async def test_statistics_counts(store: Store) -> None:
    empty = await store.statistics()
    assert (empty["total_rollouts"], empty["total_resources"], empty["total_workers"]) == (0, 0, 0)
    assert empty["total_span_events"] == 0
    res = await store.add_resources(PROMPT)
    await store.update_resources(res.resources_id, PROMPT)
    await store.enqueue_rollout("a")
    rid, aid = await started(store, worker_id="w1")
    await store.update_worker("w2")
    await store.add_many_spans([span(rid, aid, i, span_id=f"{i:016x}") for i in (1, 2, 3)])
    stats = await store.statistics()
    assert stats["name"] == "Store"
    assert stats["total_rollouts"] == 2
    assert stats["total_resources"] == 1  # one bundle (with two versions), as Agent Lightning counts ids
    assert stats["total_workers"] == 2
    assert stats["total_span_events"] == 3
    assert stats["control_events"] > empty["control_events"] and stats["spans_bytes"] > 0


# ---------------------------------------------------------------- wait_for_rollouts


async def test_wait_for_rollouts_returns_finished_at_once(store: Store) -> None:
    rid, aid = await started(store)
    await store.update_attempt(rid, aid, status="succeeded")
    c = await store.enqueue_rollout("c")
    await store.cancel_rollout(c.rollout_id)
    t0 = time.monotonic()
    got = await store.wait_for_rollouts(rollout_ids=[c.rollout_id, rid], timeout=30)
    assert time.monotonic() - t0 < 5
    assert [(r.rollout_id, r.status) for r in got] == [(c.rollout_id, "cancelled"), (rid, "succeeded")]


async def test_wait_for_rollouts_omits_unfinished_at_timeout(store: Store) -> None:
    done, aid = await started(store)
    await store.update_attempt(done, aid, status="failed")
    pending, _ = await started(store)
    t0 = time.monotonic()
    got = await store.wait_for_rollouts(rollout_ids=[pending, done], timeout=0.3)
    assert 0.25 <= time.monotonic() - t0 < 5
    assert [r.rollout_id for r in got] == [done]


@pytest.mark.parametrize("timeout", [0, -1])
async def test_wait_for_rollouts_nonpositive_timeout_only_checks(store: Store, timeout: float) -> None:
    done, aid = await started(store)
    await store.update_attempt(done, aid, status="succeeded")
    pending, _ = await started(store)
    t0 = time.monotonic()
    assert [r.rollout_id for r in await store.wait_for_rollouts(rollout_ids=[pending], timeout=timeout)] == []
    got = await store.wait_for_rollouts(rollout_ids=[pending, done], timeout=timeout)
    assert [r.rollout_id for r in got] == [done]
    assert time.monotonic() - t0 < 2


async def test_wait_for_rollouts_unknown_raises(store: Store) -> None:
    with pytest.raises(UnknownRollout):
        await store.wait_for_rollouts(rollout_ids=["ro-missing"], timeout=0)


def checked_all(monkeypatch: pytest.MonkeyPatch, store: Store, ids: list[str]) -> asyncio.Event:
    """An event set once the store has read every one of ``ids`` (the waiter's first check is done)."""
    checked, seen, read = asyncio.Event(), set(), store._state_at

    async def spy(rollout_id: str):  # type: ignore[no-untyped-def]
        state = await read(rollout_id)
        seen.add(rollout_id)
        if seen >= set(ids):
            checked.set()
        return state

    monkeypatch.setattr(store, "_state_at", spy)
    return checked


async def test_wait_for_rollouts_wakes_when_the_last_one_finishes(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, a1 = await started(store)
    second, a2 = await started(store)
    await store.update_attempt(first, a1, status="succeeded")
    go = checked_all(monkeypatch, store, [first, second])

    async def finisher() -> None:
        await go.wait()  # the waiter has seen `second` unfinished and is now waiting
        await store.update_attempt(second, a2, status="succeeded")

    task = asyncio.create_task(finisher())
    t0 = time.monotonic()
    got = await store.wait_for_rollouts(rollout_ids=[first, second], timeout=30)
    await task
    assert time.monotonic() - t0 < 5  # woken by the finish, well before the 30 s timeout
    assert [(r.rollout_id, r.status) for r in got] == [(first, "succeeded"), (second, "succeeded")]


async def test_wait_for_rollouts_without_timeout(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    rid, _ = await started(store)
    other, _ = await started(store)  # unrelated traffic does not end the wait
    go = checked_all(monkeypatch, store, [rid])

    async def finisher() -> None:
        await go.wait()
        await store.cancel_rollout(other)
        await store.update_rollout(rid, status="failed")

    task = asyncio.create_task(finisher())
    got = await asyncio.wait_for(store.wait_for_rollouts(rollout_ids=[rid, rid]), 10)
    await task
    assert [(r.rollout_id, r.status) for r in got] == [(rid, "failed")]


# ---------------------------------------------------------------- read-your-writes


async def test_a_caller_always_sees_its_own_writes(store: Store) -> None:
    res = await store.add_resources(PROMPT)
    assert await store.get_latest_resources() == res
    for i in range(5):
        r = await store.enqueue_rollout(i)
        assert r.resources_id == f"{res.resources_id}:{i + 1}"
        assert await store.get_rollout_by_id(r.rollout_id) == r
        u = await store.update_rollout(r.rollout_id, metadata={"i": i})
        assert await store.get_rollout_by_id(r.rollout_id) == u and u.metadata == {"i": i}
        d = await store.dequeue_rollout(worker_id=f"w{i}")
        assert d is not None and d.rollout_id == r.rollout_id
        assert await store.get_latest_attempt(r.rollout_id) == d.attempt
        assert (await store.get_worker_by_id(f"w{i}")).status == "busy"  # type: ignore[union-attr]
        await store.add_span(span(r.rollout_id, d.attempt.attempt_id, 1))
        assert (await store.get_latest_attempt(r.rollout_id)).status == "running"  # type: ignore[union-attr]
        await store.update_attempt(r.rollout_id, "latest", status="succeeded")
        assert (await store.get_rollout_by_id(r.rollout_id)).status == "succeeded"  # type: ignore[union-attr]
        assert (await store.get_worker_by_id(f"w{i}")).status == "idle"  # type: ignore[union-attr]
        w = await store.update_worker(f"w{i}", heartbeat_stats={"cpu_cores": i})
        assert await store.get_worker_by_id(f"w{i}") == w
        res = await store.update_resources(res.resources_id, PROMPT)
        assert await store.get_latest_resources() == res
        assert await store.get_resources_by_id(res.resources_id) == res


async def test_a_second_client_sees_acknowledged_writes(store: Store, nats_settings: NatsSettings) -> None:
    other = await connect(settings=nats_settings, name="other")
    try:
        r = await store.enqueue_rollout("q")
        assert await other.get_rollout_by_id(r.rollout_id) == r
        claimed = await other.dequeue_rollout(worker_id="w1")
        assert claimed is not None and claimed.rollout_id == r.rollout_id
        assert await store.get_rollout_by_id(r.rollout_id) == claimed
        assert (await store.get_worker_by_id("w1")).status == "busy"  # type: ignore[union-attr]
    finally:
        await other.close()


async def test_wait_for_rollouts_reads_a_finished_rollout_again_when_it_changed(store: Store) -> None:
    """A rollout seen finished is kept by its last sequence: asked again unchanged it is not folded again, but a
    later event (here a metadata update) is seen."""
    rid, aid = await started(store)
    await store.update_attempt(rid, aid, status="succeeded")
    [first] = await store.wait_for_rollouts(rollout_ids=[rid], timeout=0)
    assert first.status == "succeeded" and rid in store._finished_states
    await store.update_rollout(rid, metadata={"checked": True})
    [again] = await store.wait_for_rollouts(rollout_ids=[rid], timeout=0)
    assert again.metadata == {"checked": True}
