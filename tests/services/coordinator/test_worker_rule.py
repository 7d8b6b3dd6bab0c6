"""The worker rule: the tracker folds worker reports and claims at server times, and the watch judges silence on
the server's clock only once the readers have read that far (a real nats-server answers the clock)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import msgspec

from voltbus.schemas.rollouts import AttemptClaimed, AttemptSucceeded, RolloutEvent, RolloutQueued
from voltbus.schemas.workers import WorkerStatusReported
from voltbus.services.coordinator.liveness import Watch, read_server
from voltbus.services.coordinator.tracker import Tracker
from voltbus.services.eventlog import Envelope
from voltbus.services.settings import NatsSettings
from voltbus.store import Store, connect

from ...conftest import start_server, wait_for


def env(seq: int, time: float, event: object) -> Envelope:
    return Envelope(seq=seq, subject="s", time=time, event=event)  # type: ignore[arg-type]


def report(beat: float | None, session: str | None = "s1", worker: str = "w") -> WorkerStatusReported:
    return WorkerStatusReported(event_id="e", worker_id=worker, at=0.0, last_heartbeat_time=beat, session_id=session)


def claimed(tracker: Tracker, seq: int, time: float, rollout: str = "r", worker: str | None = "w") -> None:
    """Queue ``rollout`` and claim its attempt ``a-<rollout>`` for ``worker`` at ``seq``, server time ``time``."""
    queued = RolloutQueued(event_id=f"q-{rollout}", rollout_id=rollout, input=msgspec.Raw(b"{}"), queued_at=0.0)
    claim: RolloutEvent = AttemptClaimed(
        event_id=f"c-{rollout}",
        rollout_id=rollout,
        attempt_id=f"a-{rollout}",
        sequence_id=1,
        worker_id=worker,
        at=-1e9,  # the claimant's clock, however wrong, is never read
        dispatch_event_id=f"q-{rollout}",
        running=True,
    )
    tracker.apply_control(env(seq - 1, time, queued))
    tracker.apply_control(env(seq, time, claim))


def test_silence_is_counted_from_the_latest_beat_at_server_times() -> None:
    tracker = Tracker()
    tracker.apply_control(env(1, 100.0, report(beat=1.0)))
    claimed(tracker, 3, 101.0)
    tracker.apply_control(env(4, 150.0, report(beat=2.0)))  # a beat: its own clock moved
    tracker.apply_control(env(5, 170.0, report(beat=2.0)))  # a copy by another writer: no beat
    assert tracker.lost(209.0, timeout=60) == []
    assert tracker.lost(211.0, timeout=60) == [("r", "a-r", ("unresponsive", 150.0))]
    assert tracker.lost(211.0, timeout=60, since=200.0) == []  # the coordinator watched for 11 s only
    assert tracker.lost(None, timeout=60) == [] and tracker.lost(10_000.0, timeout=0) == []


def test_an_attempt_with_signs_of_life_of_its_own_is_not_lost() -> None:
    tracker = Tracker()
    tracker.apply_control(env(1, 100.0, report(beat=1.0)))
    claimed(tracker, 3, 101.0)
    tracker.last_seen[("r", "a-r")] = 190.0  # spans, model calls, attempt heartbeats
    assert tracker.lost(240.0, timeout=60) == []
    assert tracker.lost(251.0, timeout=60) == [("r", "a-r", ("unresponsive", 190.0))]


def test_a_new_session_of_the_worker_orphans_the_attempts_claimed_before_it() -> None:
    tracker = Tracker()
    tracker.apply_control(env(1, 100.0, report(beat=1.0, session="s1")))
    claimed(tracker, 3, 101.0, rollout="old")
    tracker.apply_control(env(4, 102.0, report(beat=1.0, session="s1")))  # another writer's copy: same session
    assert tracker.lost() == []
    tracker.apply_control(env(5, 103.0, report(beat=9.0, session="s2")))  # the runner restarted
    claimed(tracker, 7, 104.0, rollout="new")
    assert tracker.lost() == [("old", "a-old", ("unresponsive", 103.0))]


def test_workers_that_never_beat_and_attempts_without_a_worker_are_not_watched() -> None:
    tracker = Tracker()
    tracker.apply_control(env(1, 100.0, report(beat=None, session=None, worker="quiet")))
    claimed(tracker, 3, 101.0, rollout="r1", worker="quiet")
    claimed(tracker, 5, 101.0, rollout="r2", worker=None)
    claimed(tracker, 7, 101.0, rollout="r3", worker="unknown-worker")
    assert tracker.lost(1e9, timeout=60) == []


def test_finished_rollouts_leave_no_claims_behind() -> None:
    tracker = Tracker()
    tracker.apply_control(env(1, 100.0, report(beat=1.0)))
    claimed(tracker, 3, 101.0)
    tracker.apply_control(env(4, 102.0, AttemptSucceeded(event_id="s", rollout_id="r", attempt_id="a-r", at=0.0)))
    assert tracker.claims == {} and tracker.lost(1e9, timeout=60) == []


async def test_read_server_gives_the_server_time_and_the_streams_ends(store: Store) -> None:
    await store.enqueue_rollout({"x": 1})
    reading = await read_server(store)
    control = await store.log.js.stream_info(store.topology.control_stream)
    spans = await store.log.js.stream_info(store.topology.spans_stream)
    assert (reading.control_end, reading.spans_end) == (control.state.last_seq, spans.state.last_seq)
    assert reading.control_end >= 1 and reading.time > 1.7e9  # seconds since the epoch, from the server


async def test_silence_is_judged_only_once_the_readers_reached_the_servers_reading(store: Store) -> None:
    tracker = Tracker()
    tracker.apply_control(env(1, 100.0, report(beat=1.0)))  # beat and claim long ago, by the server's clock
    claimed(tracker, 3, 101.0)
    await store.enqueue_rollout({"x": 1})  # the control stream holds something the readers have not read
    control, spans = [0], [0]
    watch = Watch(1.0, control, spans)
    assert await watch.lost(store, tracker) == []  # the first check: silence counts from now
    started = watch.since
    assert started > 1.7e9 and watch.pending is None

    def waited() -> bool:  # the pre-check by this host's clock found the attempt silent, and asked the server
        return watch.pending is not None

    await wait_for(lambda: _check(watch, store, tracker, waited), 30, "a server reading after the worker timeout")
    assert watch.pending is not None and watch.pending.time - started > 1.0
    for _ in range(3):  # the readers have not reached the reading's ends: nothing is judged
        assert await watch.lost(store, tracker) == []
    control[0], spans[0] = watch.pending.control_end, watch.pending.spans_end
    assert await watch.lost(store, tracker) == [("r", "a-r", ("unresponsive", 101.0))]


async def _check(watch: Watch, store: Store, tracker: Tracker, done: object) -> bool:
    assert await watch.lost(store, tracker) == []
    return done()  # type: ignore[operator,no-any-return]


async def test_silence_counts_again_from_a_reconnection_to_the_bus(tmp_path: Path) -> None:
    server = start_server(tmp_path / "nats")
    store = await connect(settings=NatsSettings(url=server.url, namespace="rc", request_timeout_s=1.0))
    tracker = Tracker()
    tracker.apply_control(env(1, 100.0, report(beat=1.0)))
    claimed(tracker, 3, 101.0)
    watch = Watch(1.0, [0], [0])
    try:
        assert await watch.lost(store, tracker) == []
        first = watch.since
        await asyncio.to_thread(server.kill)  # an outage: no worker could beat, nor the coordinator read
        await asyncio.to_thread(server.start)

        async def counted_again() -> bool:
            assert await watch.lost(store, tracker) == []  # never a verdict right after the outage
            return watch.since > first

        await wait_for(counted_again, 30, "the watch to restart its count after the reconnection")
    finally:
        await store.close()
        await asyncio.to_thread(server.stop)
