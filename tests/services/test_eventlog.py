"""The event log against a real nats-server: dedup, OCC, ambiguity, atomic batches, reads, replay."""

from __future__ import annotations

import asyncio
import dataclasses

import msgspec
import pytest
from nats.js.api import DiscardPolicy, StorageType, StreamConfig

from voltbus.schemas.base import derive_id
from voltbus.schemas.errors import (
    BusUnavailable,
    ConcurrencyConflict,
    DecodeError,
    InvalidId,
    PayloadTooLarge,
    StreamConfigMismatch,
)
from voltbus.schemas.rollouts import (
    AttemptClaimed,
    AttemptFailed,
    AttemptStarted,
    ErrorInfo,
    RolloutQueued,
    RolloutRequeued,
)
from voltbus.services.eventlog import BadEvent, Envelope, EventLog, connect, control_config, read
from voltbus.services.settings import NatsSettings


def queued(rid: str, tag: str = "q", size: int = 0) -> RolloutQueued:
    payload = msgspec.json.encode({"task": rid, "pad": "x" * size})
    return RolloutQueued(event_id=derive_id(rid, tag), rollout_id=rid, input=msgspec.Raw(payload), queued_at=1.0)


def started(rid: str, n: int, writer: str = "") -> AttemptStarted:
    return AttemptStarted(event_id=derive_id(rid, "started", n, writer), rollout_id=rid, attempt_id=f"a{n}", at=n)


async def stored(log: EventLog) -> list[Envelope]:
    return [e async for e in log.replay() if isinstance(e, Envelope)]


async def test_streams_are_created_once_with_safe_settings(eventlog: EventLog) -> None:
    assert await eventlog.ensure_streams() == []  # already there: idempotent
    ctrl = (await eventlog.js.stream_info(eventlog.topology.control_stream)).config
    assert (ctrl.discard, ctrl.deny_delete, ctrl.deny_purge, ctrl.allow_atomic) == ("new", True, True, True)
    assert ctrl.duplicate_window >= 1800
    spans = (await eventlog.js.stream_info(eventlog.topology.spans_stream)).config
    assert spans.persist_mode == "async"


async def test_incompatible_stream_is_refused_naming_the_setting(nats_settings: NatsSettings) -> None:
    log = EventLog(await connect(nats_settings), nats_settings)
    try:
        wanted = control_config(nats_settings)
        bad = StreamConfig(
            name=wanted.name, subjects=wanted.subjects, storage=StorageType.FILE, discard=DiscardPolicy.OLD
        )
        await log.js.add_stream(bad)
        with pytest.raises(StreamConfigMismatch, match="discard") as err:
            await log.ensure_streams()
        assert err.value.stream == wanted.name
    finally:
        await log.close()


async def test_a_stream_from_an_older_version_gains_the_new_subjects(nats_settings: NatsSettings) -> None:
    log = EventLog(await connect(nats_settings), nats_settings)
    try:
        wanted = control_config(nats_settings)
        await log.js.add_stream(dataclasses.replace(wanted, subjects=wanted.subjects[:-1]))  # no gateway subject
        await log.ensure_streams()
        found = (await log.js.stream_info(wanted.name)).config
        assert sorted(found.subjects) == sorted(wanted.subjects)
    finally:
        await log.close()


async def test_repeated_event_without_occ_is_stored_once(eventlog: EventLog) -> None:
    first = await eventlog.append([queued("r1")])
    again = await eventlog.append([queued("r1")])
    assert (first.already_applied, again.already_applied, again.seq) == (False, True, first.seq)
    assert len(await stored(eventlog)) == 1


async def test_occ_conflict_when_another_writer_was_first(eventlog: EventLog) -> None:
    await eventlog.append([queued("r1")], expected_seq=0)
    with pytest.raises(ConcurrencyConflict) as err:
        await eventlog.append([queued("r1", tag="other")], expected_seq=0)
    assert (err.value.expected_seq, err.value.actual_seq) == (0, 1)
    assert len(await stored(eventlog)) == 1


async def test_retried_append_that_applied_is_reported_applied(eventlog: EventLog) -> None:
    first = await eventlog.append([queued("r1")], expected_seq=0)
    await eventlog.append([started("r1", 1)], expected_seq=first.seq)
    # the same append again, as after a lost ack, even though the rollout moved on since
    again = await eventlog.append([queued("r1")], expected_seq=0)
    assert again == type(again)(seq=first.seq, already_applied=True)
    assert len(await stored(eventlog)) == 2


async def test_twenty_concurrent_writers_one_transition_per_sequence(eventlog: EventLog) -> None:
    base = await eventlog.append([queued("hot")], expected_seq=0)
    wins: list[int] = []

    async def writer(w: int) -> None:
        done = 0
        while done < 5:
            head = await eventlog.head("hot")
            try:
                ack = await eventlog.append([started("hot", done, writer=str(w))], expected_seq=head)
            except ConcurrencyConflict:
                continue
            wins.append(ack.seq)
            done += 1

    await asyncio.gather(*(writer(w) for w in range(20)))
    envelopes, last = await eventlog.read("hot")
    assert len(envelopes) == 1 + 100 and last == envelopes[-1].seq
    assert sorted(wins) == [e.seq for e in envelopes[1:]]
    chain = [base.seq] + [e.seq for e in envelopes[1:]]
    for env, previous in zip(envelopes[1:], chain, strict=False):
        raw = await eventlog.js.get_msg(eventlog.topology.control_stream, seq=env.seq, direct=True)
        assert int(raw.headers["Nats-Expected-Last-Subject-Sequence"]) == previous


async def test_multi_event_append_is_atomic_and_idempotent(eventlog: EventLog) -> None:
    q = await eventlog.append([queued("r2")], expected_seq=0)
    failed = AttemptFailed(
        event_id=derive_id("r2", "failed"),
        rollout_id="r2",
        attempt_id="a1",
        error=ErrorInfo(type="ValueError", message="boom"),
        at=2.0,
    )
    requeued = RolloutRequeued(
        event_id=derive_id("r2", "requeued"),
        rollout_id="r2",
        attempt_id="a1",
        attempt_status="failed",
        at=2.0,
    )
    ack = await eventlog.append([failed, requeued], expected_seq=q.seq)
    envelopes, last = await eventlog.read("r2")
    assert [e.event for e in envelopes] == [queued("r2"), failed, requeued]
    assert [e.subject for e in envelopes] == [f"{eventlog.topology.namespace}.ro.r2.{s}" for s in "qeq"]
    assert last == ack.seq
    again = await eventlog.append([failed, requeued], expected_seq=q.seq)
    assert again.already_applied and again.seq == ack.seq
    assert len(await stored(eventlog)) == 3


async def test_read_unknown_rollout_is_empty(eventlog: EventLog) -> None:
    assert await eventlog.read("nobody") == ([], 0)
    assert await eventlog.head("nobody") == 0


async def test_replay_reports_garbage_with_its_sequence_and_continues(eventlog: EventLog) -> None:
    await eventlog.append([queued("g1")], expected_seq=0)
    bad = await eventlog.js.publish(eventlog.topology.rollout_events("g1"), b"\x00not an event")
    await eventlog.append([queued("g2")], expected_seq=0)
    items = [item async for item in eventlog.replay()]
    assert [type(i) for i in items] == [Envelope, BadEvent, Envelope]
    assert items[1].seq == bad.seq and "malformed" in items[1].reason
    assert items[2].event == queued("g2")


async def test_replay_windows(eventlog: EventLog) -> None:
    for i in range(10):
        await eventlog.append([queued(f"w{i}")], expected_seq=0)
    assert [e.seq async for e in eventlog.replay(from_seq=4, to_seq=6)] == [4, 5, 6]
    all_items = [e async for e in eventlog.replay()]
    between = (all_items[4].time + all_items[5].time) / 2  # appends are sequential, so times differ
    assert [e.seq async for e in eventlog.replay(from_time=between)] == [6, 7, 8, 9, 10]
    assert [e async for e in eventlog.replay(from_seq=11)] == []


async def test_rollouts_after_a_sequence_from_their_subjects(
    eventlog: EventLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rollouts with a message after a sequence (undecodable ones count), read across requests; None past the
    bound; other aggregates' messages are not counted."""
    monkeypatch.setattr(read, "TAIL_BATCH", 2)
    for rid in ("t1", "t2", "t3"):
        await eventlog.append([queued(rid)], expected_seq=0)
    await eventlog.js.publish(eventlog.topology.worker("w1"), b"{}")
    await eventlog.js.publish(eventlog.topology.rollout_events("t1"), b"garbage")
    await eventlog.append([queued("t4")], expected_seq=0)
    assert await eventlog.rollouts_after(1, 10) == {"t1", "t2", "t3", "t4"}
    assert await eventlog.rollouts_after(3, 10) == {"t1", "t4"}
    assert await eventlog.rollouts_after(6, 10) == set()
    assert await eventlog.rollouts_after(1, 4) == {"t1", "t2", "t3", "t4"}
    assert await eventlog.rollouts_after(1, 3) is None


async def test_oversized_event_is_refused_before_sending(eventlog: EventLog) -> None:
    with pytest.raises(PayloadTooLarge) as err:
        await eventlog.append([queued("big", size=2 * 1024 * 1024)], expected_seq=0)
    assert err.value.limit == eventlog.nc.max_payload
    assert await eventlog.head("big") == 0


async def test_append_many_reports_each_outcome(eventlog: EventLog) -> None:
    await eventlog.append([queued("m7", tag="earlier")], expected_seq=0)
    results = await eventlog.append_many([queued(f"m{i}") for i in range(200)])
    conflicts = [i for i, r in enumerate(results) if isinstance(r, ConcurrencyConflict)]
    assert conflicts == [7]
    assert len(await stored(eventlog)) == 200
    again = await eventlog.append_many([queued(f"m{i}") for i in range(200) if i != 7])
    assert all(not isinstance(r, ConcurrencyConflict) and r.already_applied for r in again)


async def test_unreachable_bus_names_the_url() -> None:
    with pytest.raises(BusUnavailable, match=r"nats://127\.0\.0\.1:1\b"):
        await EventLog.connect(NatsSettings(url="nats://127.0.0.1:1", connect_timeout_s=0.5))


async def test_an_event_its_own_decoder_rejects_is_refused_before_sending(eventlog: EventLog) -> None:
    bad = AttemptClaimed(event_id="x", rollout_id="r9", attempt_id="a", sequence_id=0, at=1.0)  # ids start at 1
    with pytest.raises(DecodeError, match="sequence_id"):
        await eventlog.append([bad], expected_seq=0)
    with pytest.raises(InvalidId, match="rollout id"):
        await eventlog.append([msgspec.structs.replace(bad, rollout_id="not a token!", sequence_id=1)], expected_seq=0)
    assert await eventlog.head("r9") == 0


async def test_close_ends_an_unfinished_replay(eventlog: EventLog, nats_settings: NatsSettings) -> None:
    for i in range(20):
        await eventlog.append([queued(f"c{i}")], expected_seq=0)
    log = await EventLog.connect(nats_settings)
    async for _ in log.replay():
        break  # leave the replay unfinished
    await asyncio.wait_for(log.close(), timeout=5)


async def test_an_undecodable_message_in_a_rollout_is_reported_and_skipped_when_folding(eventlog: EventLog) -> None:
    await eventlog.append([queued("p1")], expected_seq=0)
    bad = await eventlog.js.publish(eventlog.topology.rollout_events("p1"), b"garbage")
    items, last = await eventlog.read("p1")
    assert [type(i) for i in items] == [Envelope, BadEvent] and items[1].seq == bad.seq == last
    await eventlog.append([started("p1", 1)], expected_seq=last)  # the rollout is not wedged
    assert [type(i) for i in (await eventlog.read("p1"))[0]] == [Envelope, BadEvent, Envelope]
