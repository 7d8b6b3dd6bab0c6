"""The coordinator on a real bus: timeouts, silence, retries, cancellation, dead letters, two at once."""

from __future__ import annotations

import asyncio
import collections

from voltbus.schemas.rollouts import (
    AttemptMarkedUnresponsive,
    AttemptTimedOut,
    RolloutConfig,
    RolloutFailed,
    RolloutRequeued,
)
from voltbus.services.settings import NatsSettings
from voltbus.store import Store

from .conftest import running_coordinator, until_event, until_worker


async def test_timed_out_attempt_is_retried_then_fails(store: Store, coordinator: None) -> None:
    config = RolloutConfig(timeout_seconds=0.3, max_attempts=2, retry_condition=["timeout"])
    rollout = await store.enqueue_rollout({"task": 1}, config=config)
    first = await store.dequeue_rollout(worker_id="w1")
    assert first is not None and first.rollout_id == rollout.rollout_id
    await until_event(store, rollout.rollout_id, lambda e: isinstance(e, RolloutRequeued))
    second = await store.dequeue_rollout(worker_id="w1")
    assert second is not None and second.attempt.sequence_id == 2
    failed = await until_event(store, rollout.rollout_id, lambda e: isinstance(e, RolloutFailed))
    assert failed.attempt_id == second.attempt.attempt_id
    attempts = await store.get_attempts(rollout.rollout_id)
    assert [(a.sequence_id, a.status) for a in attempts] == [(1, "timeout"), (2, "timeout")]
    assert all(a.end_time is not None for a in attempts)
    await until_worker(store, "w1", "unknown")  # the worker sync follows the expiry
    assert (await store.get_worker_by_id("w1")).status == "unknown"


async def test_silent_attempt_is_unresponsive_while_a_beating_one_lives(store: Store, coordinator: None) -> None:
    config = RolloutConfig(unresponsive_seconds=2.0)  # the beating one must never miss 2 s on a loaded machine
    quiet = await store.enqueue_rollout("quiet", config=config)
    alive = await store.enqueue_rollout("alive", config=config)
    claimed = {r.rollout_id: r for r in await store.dequeue_many_rollouts(limit=2, worker_id="w2")}
    stop = asyncio.Event()

    async def beat() -> None:
        while not stop.is_set():
            await store.heartbeat(alive.rollout_id, claimed[alive.rollout_id].attempt.attempt_id, "w2")
            await asyncio.sleep(0.05)  # the heartbeat period itself, not synchronization

    beater = asyncio.create_task(beat())
    try:
        event = await until_event(store, quiet.rollout_id, lambda e: isinstance(e, AttemptMarkedUnresponsive))
        assert event.attempt_id == claimed[quiet.rollout_id].attempt.attempt_id
        assert (await store.get_rollout_by_id(quiet.rollout_id)).status == "failed"
        assert (await store.get_rollout_by_id(alive.rollout_id)).status in ("preparing", "running")
    finally:
        stop.set()
        await beater
    await store.update_attempt(alive.rollout_id, "latest", status="succeeded")
    assert (await store.get_rollout_by_id(alive.rollout_id)).status == "succeeded"


async def test_cancel_during_a_running_attempt_ends_it_and_frees_the_worker(store: Store, coordinator: None) -> None:
    rollout = await store.enqueue_rollout("long task")
    claimed = await store.dequeue_rollout(worker_id="w3")
    await store.update_attempt(rollout.rollout_id, claimed.attempt.attempt_id, status="running")
    cancelled = await store.cancel_rollout(rollout.rollout_id, reason="user stop")
    assert cancelled.status == "cancelled" and cancelled.attempt.status == "failed"
    assert cancelled.attempt.error["type"] == "Cancelled"
    done = await store.wait_for_rollouts(rollout_ids=[rollout.rollout_id], timeout=0)
    assert [r.status for r in done] == ["cancelled"]
    await until_worker(store, "w3", "idle")


async def test_undeliverable_dispatch_message_is_parked_with_its_reason(nats_settings: NatsSettings) -> None:
    settings = nats_settings.model_copy(update={"dispatch_max_deliver": 2, "dispatch_ack_wait_s": 1.0})
    from voltbus.store import connect

    store = await connect(settings=settings)
    try:
        async with running_coordinator(settings):
            started = await store.start_rollout("direct")  # no dispatch message of its own
            poison = await store.log.js.publish(store.topology.rollout_queue(started.rollout_id), b"{not json")
            parked = None
            for _ in range(100):  # runners keep pulling; each pull redelivers the poison until it is parked
                assert await store.dequeue_rollout() is None
                if (r := await store.get_rollout_by_id(started.rollout_id)).status == "failed":
                    parked = r
                    break
            assert parked is not None
            failed = await until_event(store, started.rollout_id, lambda e: isinstance(e, RolloutFailed))
            assert f"dispatch message {poison.seq} was delivered 2 times" in failed.reason
    finally:
        await store.close()


async def test_two_coordinators_never_double_a_transition(store: Store, nats_settings: NatsSettings) -> None:
    config = RolloutConfig(timeout_seconds=0.2, max_attempts=2, retry_condition=["timeout"])
    rollouts = [await store.enqueue_rollout(i, config=config) for i in range(10)]
    async with running_coordinator(nats_settings), running_coordinator(nats_settings):
        assert len(await store.dequeue_many_rollouts(limit=10, worker_id="w4")) == 10
        for r in rollouts:
            await until_event(store, r.rollout_id, lambda e: isinstance(e, RolloutRequeued))
        assert len(await store.dequeue_many_rollouts(limit=10, worker_id="w4")) == 10
        finished = await store.wait_for_rollouts(rollout_ids=[r.rollout_id for r in rollouts], timeout=20)
    assert [r.status for r in finished] == ["failed"] * 10
    for r in rollouts:
        envelopes, _ = await store.log.read(r.rollout_id)
        kinds = collections.Counter(type(e.event).__name__ for e in envelopes)
        assert kinds == {
            "RolloutQueued": 1,
            "AttemptClaimed": 2,
            "AttemptTimedOut": 2,
            "RolloutRequeued": 1,
            "RolloutFailed": 1,
        }, kinds
        timed_out = [e.event.attempt_id for e in envelopes if isinstance(e.event, AttemptTimedOut)]
        assert len(set(timed_out)) == 2


async def test_retry_policy_end_to_end_three_attempts_then_failed(store: Store) -> None:
    config = RolloutConfig(max_attempts=3, retry_condition=["failed"])
    rollout = await store.enqueue_rollout("flaky", config=config)
    for expected in (1, 2, 3):
        claimed = await store.dequeue_rollout(worker_id="w5")
        assert claimed is not None and claimed.attempt.sequence_id == expected
        await store.update_attempt(rollout.rollout_id, claimed.attempt.attempt_id, status="failed")
    assert await store.dequeue_rollout(worker_id="w5") is None
    final = await store.get_rollout_by_id(rollout.rollout_id)
    assert final.status == "failed" and final.end_time is not None
    assert [(a.sequence_id, a.status) for a in await store.get_attempts(rollout.rollout_id)] == [
        (1, "failed"),
        (2, "failed"),
        (3, "failed"),
    ]
