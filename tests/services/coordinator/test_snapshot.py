"""The coordinator's snapshots on a real bus: a snapshot plus the events after it fold to what the whole log
folds to; a coordinator starts from its snapshot; a snapshot of another log, or too large, is never used."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from pathlib import Path

import msgspec
import pytest

from voltbus.schemas.rollouts import AttemptTimedOut, RolloutConfig
from voltbus.services.coordinator import snapshot
from voltbus.services.coordinator.app import run
from voltbus.services.coordinator.handlers import catch_up
from voltbus.services.coordinator.tracker import Tracker
from voltbus.services.eventlog import Envelope
from voltbus.services.eventlog.streams import ensure_streams
from voltbus.services.lifecycle import AttemptState, RolloutState
from voltbus.services.ops.backup import backup
from voltbus.services.ops.restore import restore
from voltbus.services.settings import CoordinatorSettings, NatsSettings, Settings
from voltbus.store import Store, connect

from ...conftest import wait_for
from .conftest import until_event


async def fold(store: Store, to_seq: int | None = None) -> Tracker:
    """A tracker fed the whole control stream (up to ``to_seq``), as a start without snapshots builds it."""
    tracker = Tracker()
    async for item in store.log.replay("control", to_seq=to_seq):
        if isinstance(item, Envelope):
            tracker.apply_control(item)
    return tracker


def same(a: Tracker, b: Tracker) -> None:
    assert a.rollouts == b.rollouts
    assert a.claims == b.claims
    assert a.workers == b.workers


async def mixed_log(store: Store, tag: str) -> list[str]:
    """Unfinished (queued, claimed, running) and ended (succeeded, cancelled) rollouts, workers' reports."""
    ids = [(await store.enqueue_rollout({"task": f"{tag}-{n}"})).rollout_id for n in range(6)]
    claimed = await store.dequeue_many_rollouts(limit=4, worker_id=f"w-{tag}")
    await store.update_attempt(claimed[0].rollout_id, claimed[0].attempt.attempt_id, status="running")
    await store.update_attempt(claimed[1].rollout_id, claimed[1].attempt.attempt_id, status="succeeded")
    await store.cancel_rollout(ids[5], reason="not needed")
    await store.start_worker_session(f"w-{tag}", f"session-{tag}")
    await store.heartbeat(claimed[2].rollout_id, claimed[2].attempt.attempt_id, f"w-{tag}")
    await store.update_worker(f"w-{tag}")
    return ids


async def last_seq(store: Store) -> int:
    return (await store.log.js.stream_info(store.topology.control_stream)).state.last_seq


@contextlib.asynccontextmanager
async def coordinator(settings: Settings) -> AsyncIterator[None]:
    """A coordinator running for the block, stopped cleanly after it."""
    stop = asyncio.Event()
    task = asyncio.create_task(run(settings, stop))
    try:
        yield
    finally:
        stop.set()
        await asyncio.wait_for(task, 20)


async def test_snapshot_plus_the_events_after_it_fold_to_the_whole_log(store: Store) -> None:
    await mixed_log(store, "a")
    before = await fold(store)
    at = await last_seq(store)
    assert await snapshot.save(store, before, at, max_bytes=1 << 30)
    later = await mixed_log(store, "b")  # the tail: new rollouts, and ends of rollouts the snapshot holds unfinished
    claimed = await store.dequeue_many_rollouts(limit=10, worker_id="w-a")
    await store.update_attempt(claimed[0].rollout_id, claimed[0].attempt.attempt_id, status="failed")
    await store.cancel_rollout(later[4], reason="late cancel")
    whole = await fold(store)
    assert whole.rollouts and whole.claims and whole.workers and whole.rollouts != before.rollouts
    resumed = Tracker()
    assert await snapshot.load(store, resumed) == at
    same(resumed, before)
    assert await catch_up(store, resumed, at) == await last_seq(store)
    same(resumed, whole)


async def test_a_coordinator_starts_from_its_snapshot_and_folds_the_events_after_it(
    store: Store, nats_settings: NatsSettings, caplog: pytest.LogCaptureFixture
) -> None:
    rollout = await store.enqueue_rollout("slow", config=RolloutConfig(timeout_seconds=0.5, max_attempts=1))
    settings = Settings(nats=nats_settings, coordinator=CoordinatorSettings(tick_s=0.05, snapshot_every_s=0.1))
    at = await last_seq(store)
    async with coordinator(settings):
        await wait_for(lambda: stored(store, at), 30, "the first coordinator's snapshot", every=0.1)
    claimed = await store.dequeue_rollout(worker_id="w-late")  # after the snapshot: only the tail knows it
    assert claimed is not None and claimed.rollout_id == rollout.rollout_id
    with caplog.at_level(logging.INFO, logger="voltbus.services.coordinator"):
        async with coordinator(settings):
            ended = await until_event(store, rollout.rollout_id, lambda e: isinstance(e, AttemptTimedOut), 30)
    assert ended.attempt_id == claimed.attempt.attempt_id
    assert f"coordinator snapshot at control seq {at}: 1 rollouts unfinished" in caplog.text
    assert f"(from snapshot seq {at})" in caplog.text


async def test_a_long_catch_up_is_snapshotted_at_once_and_a_stop_writes_the_last_one(
    store: Store, nats_settings: NatsSettings
) -> None:
    """The fold a start made is written as soon as it is caught up (not one ``snapshot_every_s`` later: a
    coordinator stopped before then folded the whole log again at its next start), and a clean stop writes
    what it folded since."""
    await mixed_log(store, "early")
    settings = Settings(nats=nats_settings, coordinator=CoordinatorSettings(tick_s=0.05, snapshot_every_s=3600))
    at = await last_seq(store)
    async with coordinator(settings):
        await wait_for(lambda: stored(store, at), 30, "a snapshot right after the catch-up", every=0.1)
        rollout = await store.enqueue_rollout("late", config=RolloutConfig(timeout_seconds=0.2, max_attempts=1))
        claimed = await store.dequeue_many_rollouts(limit=2, worker_id="w-late")  # mixed_log left one queued
        assert rollout.rollout_id in [c.rollout_id for c in claimed]
        late = await last_seq(store)  # the claim: the coordinator has folded it once it times the attempt out
        await until_event(store, rollout.rollout_id, lambda e: isinstance(e, AttemptTimedOut), 30)
    assert await stored(store, late)


async def stored(store: Store, seq: int) -> bool:
    """Whether the latest snapshot is at ``seq`` or later: read as a starting coordinator reads it, so that a read
    whose chunks a running coordinator's next write replaced ends (retried or timed out) instead of hanging."""
    try:
        found = await snapshot.fetch(store)
    except Exception:  # no bucket or object yet, or a read that lost the race twice
        return False
    return snapshot.decode(found).seq >= seq


async def replaced_log(nats_settings: NatsSettings, rollouts: int) -> Store:
    """The control stream deleted and made again with ``rollouts`` new rollouts (a restore of another log)."""
    admin = await connect(settings=nats_settings)
    await admin.log.js.delete_stream(admin.topology.control_stream)
    await admin.close()
    fresh = await connect(settings=nats_settings)
    await ensure_streams(fresh.log.js, nats_settings)
    for n in range(rollouts):
        await fresh.enqueue_rollout({"other log": n})
    return fresh


@pytest.mark.parametrize(("rollouts", "why"), [(2, "past the stream's last sequence"), (20, "is not the one")])
async def test_a_snapshot_of_another_log_is_refused(
    store: Store, nats_settings: NatsSettings, caplog: pytest.LogCaptureFixture, rollouts: int, why: str
) -> None:
    await mixed_log(store, "gone")
    assert await snapshot.save(store, await fold(store), await last_seq(store), max_bytes=1 << 30)
    fresh = await replaced_log(nats_settings, rollouts)
    try:
        tracker = Tracker()
        with caplog.at_level(logging.WARNING):
            assert await snapshot.load(fresh, tracker) == 0
        assert why in caplog.text and "folding the control stream from its start" in caplog.text
        assert not tracker.rollouts and not tracker.workers
        await catch_up(fresh, tracker, 0)
        same(tracker, await fold(fresh))
        assert len(tracker.rollouts) == rollouts
    finally:
        await fresh.close()


async def test_a_forged_or_corrupt_snapshot_is_refused(store: Store, caplog: pytest.LogCaptureFixture) -> None:
    await mixed_log(store, "f")
    tracker = await fold(store)
    at = await last_seq(store)
    assert await snapshot.save(store, tracker, at, max_bytes=1 << 30)
    bucket = await store.log.js.object_store(store.topology.snapshots_bucket)
    genuine = snapshot.decode((await bucket.get(snapshot.OBJECT)).data or b"")
    tracker_mark = genuine.mark
    forged = msgspec.structs.replace(genuine, mark="0" * 64)
    await bucket.put(snapshot.OBJECT, snapshot.encode(forged))
    with caplog.at_level(logging.WARNING):
        assert await snapshot.load(store, Tracker()) == 0
    assert "is not the one it was folded to" in caplog.text
    older = msgspec.structs.replace(forged, mark=tracker_mark, schema="another shape")
    await bucket.put(snapshot.OBJECT, snapshot.encode(older))  # e.g. written before an upgrade
    with caplog.at_level(logging.WARNING):
        assert await snapshot.load(store, Tracker()) == 0
    assert "it was written in format 1/another shape" in caplog.text
    await bucket.put(snapshot.OBJECT, b"not a snapshot")
    with caplog.at_level(logging.WARNING):
        assert await snapshot.load(store, Tracker()) == 0
    assert "coordinator snapshot unreadable" in caplog.text


async def test_a_large_state_is_chunked_and_one_above_the_limit_is_skipped(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    await store.enqueue_rollout("one real event")
    at = await last_seq(store)
    tracker = Tracker()
    for n in range(100_000):
        rid = f"r{n:06d}"
        attempt = AttemptState(attempt_id=f"a{n}", sequence_id=1, status="running", worker_id="w", start_time=1.0)
        tracker.rollouts[rid] = RolloutState(rollout_id=rid, status="running", input=msgspec.Raw(b'{"q":"%d"}' % n),
                                             attempts=(attempt,), start_time=1.0)  # fmt: skip
    with caplog.at_level(logging.WARNING):
        assert await snapshot.save(store, tracker, at, max_bytes=1000) is None
    assert "not written" in caplog.text and "snapshot_max_bytes" in caplog.text
    size = await snapshot.save(store, tracker, at, max_bytes=1 << 30)
    assert size is not None and size > 128 * 1024  # more than one object store chunk
    resumed = Tracker()
    assert await snapshot.load(store, resumed) == at
    assert resumed.rollouts == tracker.rollouts


async def test_two_coordinators_snapshotting_at_once_leave_a_correct_fold(
    store: Store, nats_settings: NatsSettings
) -> None:
    settings = Settings(nats=nats_settings, coordinator=CoordinatorSettings(tick_s=0.05, snapshot_every_s=0.05))
    stop = asyncio.Event()
    tasks = [asyncio.create_task(run(settings, stop)) for _ in range(2)]
    try:
        for n in range(5):
            await mixed_log(store, f"two-{n}")
        await wait_for(lambda: stored(store, 1), 30, "a snapshot", every=0.1)
    finally:
        stop.set()
        await asyncio.wait_for(asyncio.gather(*tasks), 20)
    resumed = Tracker()
    at = await snapshot.load(store, resumed)
    assert at > 0
    same(resumed, await fold(store, to_seq=at))


async def test_after_a_restore_of_an_older_backup_the_snapshot_is_refused(
    store: Store, nats_settings: NatsSettings, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    await mixed_log(store, "kept")
    await backup(store.log.nc, store.topology, tmp_path / "bk", lambda _: None)  # the snapshots are not in it
    await mixed_log(store, "lost")
    assert await snapshot.save(store, await fold(store), await last_seq(store), max_bytes=1 << 30)
    await restore(store.log.nc, store.topology, tmp_path / "bk", lambda _: None, force=True)
    restored = await connect(settings=nats_settings)
    try:
        for why, rollouts in (("past the stream's last sequence", 0), ("is not the one it was folded to", 30)):
            for n in range(rollouts):  # the restored log goes on past the snapshot's sequence
                await restored.enqueue_rollout({"after restore": n})
            caplog.clear()
            tracker = Tracker()
            with caplog.at_level(logging.WARNING):
                assert await snapshot.load(restored, tracker) == 0
            assert why in caplog.text
            await catch_up(restored, tracker, 0)
            same(tracker, await fold(restored))
    finally:
        await restored.close()


async def test_a_snapshot_whose_chunks_are_gone_is_refused_not_waited_on(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    await mixed_log(store, "purged")
    assert await snapshot.save(store, await fold(store), await last_seq(store), max_bytes=1 << 30)
    bucket = await store.log.js.object_store(store.topology.snapshots_bucket)
    nuid = (await bucket.get_info(snapshot.OBJECT)).nuid  # as another coordinator's write leaves the one read
    await store.log.js.purge_stream(
        store.topology.snapshots_stream, subject=f"$O.{store.topology.snapshots_bucket}.C.{nuid}"
    )
    with caplog.at_level(logging.WARNING):
        assert await asyncio.wait_for(snapshot.load(store, Tracker()), 60) == 0
    assert "coordinator snapshot unreadable" in caplog.text
