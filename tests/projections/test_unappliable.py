"""Events that decode but whose rows DuckDB or Arrow refuse (a value beyond a column's range): each is
quarantined with its sequence, the reason and its stored bytes; the rest of the batch lands, the
checkpoint moves past it, and a replay in other batches quarantines the same events."""

from __future__ import annotations

import asyncio
from pathlib import Path

import msgspec

from tests.benchmarks.bench_projector import control_events
from voltbus.projections import lean
from voltbus.schemas import codec
from voltbus.schemas.spans import SpanBatch, Usage
from voltbus.services.eventlog import Envelope
from voltbus.services.projector.follow import ends_at, project
from voltbus.services.projector.projector import Projector
from voltbus.store import Store

from .conftest import dump, projected
from .test_lean import EVENTS, call_with
from .workload import write


def too_many_tokens() -> bytes:
    """A model call whose usage does not fit the INTEGER column (refused by the Arrow schema)."""
    usage = Usage(prompt_tokens=2**31, completion_tokens=2, total_tokens=2**31 + 2)
    return codec.encode(msgspec.structs.replace(EVENTS[1], usage=usage))


async def test_a_model_call_beyond_the_columns_is_quarantined_and_replays_alike(store: Store, tmp_path: Path) -> None:
    await write(store, 4)
    shard = store.topology.span_shard("ro-1")
    poison = [call_with(prompt_ids=f"[1,{2**31}]"), too_many_tokens(), call_with(response_ids=f"[{2**63}]")]
    seqs = [(await store.log.js.publish(shard, data)).seq for data in poison]
    await store.log.publish_spans(EVENTS[3:6])
    ends = await ends_at(store.log)

    live = Projector(tmp_path / "live.duckdb")
    stop, advanced = asyncio.Event(), asyncio.Event()
    following = asyncio.create_task(
        project(live, store.log, stop=stop, batch_size=500, max_wait=0.01, progress=lambda *_: advanced.set())
    )
    try:
        async with asyncio.timeout(20):
            while live.positions != ends:
                await advanced.wait()
                advanced.clear()
    finally:
        stop.set()
        await following
    tables = dump(live.con)
    live.close()

    parked = [q for q in tables["quarantine"] if q[0] == "spans"]
    assert [q[1] for q in parked] == seqs
    assert all(q[3].startswith("could not apply: ") for q in parked)
    assert "2147483648" in parked[0][3] and "2147483648" in parked[1][3]
    assert [q[4] for q in parked] == poison  # the stored bytes
    assert dict((s, q) for s, q, _ in tables["checkpoints"]) == ends
    calls = [c[1] for c in tables["model_calls"]]
    assert calls[-1] == EVENTS[4].event_id and EVENTS[1].event_id not in calls  # the call after the poison landed
    assert len(calls) == len(tables["spans"]) == len(tables["rewards"]) == 4

    replay = Projector(tmp_path / "replay.duckdb")
    try:
        await project(replay, store.log, ends=ends, batch_size=3)
        assert dump(replay.con) == tables
    finally:
        replay.close()


def test_a_refused_batch_lands_but_its_poison(tmp_path: Path) -> None:
    stored = [codec.encode(e) for e in EVENTS]
    stored[7], stored[13] = call_with(prompt_ids=f"[{2**31}]"), too_many_tokens()
    items = [Envelope(seq=k + 1, subject="s", time=1.0, event=lean.decode_spans(d)) for k, d in enumerate(stored)]
    projector = Projector(tmp_path / "p.duckdb")
    try:
        projector.apply("spans", items)
        tables = dump(projector.con)
    finally:
        projector.close()
    assert projector.positions["spans"] == len(stored)
    assert [(q[1], q[4]) for q in tables["quarantine"]] == [(8, stored[7]), (14, stored[13])]
    assert len(tables["model_calls"]) == 4 and len(tables["spans"]) == len(tables["rewards"]) == 6
    assert sum(a[3] for a in tables["attempt_activity"]) == len(stored) - 2


def test_a_control_event_beyond_the_columns_is_quarantined_alike_in_any_batches(tmp_path: Path) -> None:
    events = control_events("t", 10)  # 5 RolloutQueued, then their 5 AttemptClaimed
    events[7] = msgspec.structs.replace(events[7], sequence_id=2**31)  # attempts.sequence_id is INTEGER
    items = [Envelope(seq=k + 1, subject="s", time=1.0, event=e) for k, e in enumerate(events)]
    tables = []
    for name, batches in (("one", [items]), ("many", [items[:3], items[3:8], items[8:]])):
        projector = Projector(tmp_path / f"{name}.duckdb")
        try:
            for batch in batches:
                projector.apply("control", batch)
            tables.append(dump(projector.con))
        finally:
            projector.close()
    assert tables[0] == tables[1]
    [parked] = tables[0]["quarantine"]
    assert parked[:2] == ("control", 8) and parked[3].startswith("could not apply: ")
    assert parked[4] == codec.encode(events[7])
    assert [r[1] for r in tables[0]["rollouts"]] == ["preparing", "preparing", "queuing", "preparing", "preparing"]
    assert dict((s, q) for s, q, _ in tables[0]["checkpoints"])["control"] == len(events)


async def test_a_batch_is_applied_whole_or_quarantined_whole(store: Store, tmp_path: Path) -> None:
    shard = store.topology.span_shard("ro-1")
    good = SpanBatch(event_id="good", events=EVENTS[:6])  # type: ignore[arg-type]
    beyond = msgspec.structs.replace(good, event_id="beyond")
    poison = codec.encode(beyond).replace(b'"prompt_ids":[1,2,0]', b'"prompt_ids":[1,2,%d]' % 2**31, 1)
    undecodable = codec.encode(good).replace(b'"type":"RewardReported"', b'"type":"Nonsense"', 1)
    seqs = [(await store.log.js.publish(shard, data)).seq for data in (codec.encode(good), poison, undecodable)]
    ends, tables = await projected(store, tmp_path / "p.duckdb")
    parked = [q for q in tables["quarantine"] if q[0] == "spans"]
    assert [(q[1], q[4]) for q in parked] == [(seqs[1], poison), (seqs[2], undecodable)]
    assert "could not apply" in parked[0][3] and "Nonsense" in parked[1][3]
    assert [r[0] for r in tables["spans"] + tables["model_calls"] + tables["rewards"]] == [seqs[0]] * 6  # the good one
    assert [a[3:5] for a in tables["attempt_activity"]] == [(6, seqs[0])]

    replay = Projector(tmp_path / "replay.duckdb")
    try:
        await project(replay, store.log, ends=ends, batch_size=1)  # one message per transaction: alike
        assert dump(replay.con) == tables
    finally:
        replay.close()
