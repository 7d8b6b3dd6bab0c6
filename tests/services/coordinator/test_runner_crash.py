"""kill -9 of a runner process holding a claim: its attempt goes unresponsive and the rollout is retried."""

from __future__ import annotations

import asyncio
import subprocess
import sys

from voltbus.schemas.rollouts import AttemptMarkedUnresponsive, RolloutConfig, RolloutRequeued
from voltbus.services.eventlog import Envelope
from voltbus.services.settings import NatsSettings
from voltbus.store import Store

from .conftest import until_event, until_worker


async def test_killed_runner_attempt_becomes_unresponsive_and_is_retried(
    store: Store, coordinator: None, nats_settings: NatsSettings
) -> None:
    # the holder beats every 0.05 s: 2 s of silence (not 0.5) only after the kill, even on a loaded machine
    config = RolloutConfig(unresponsive_seconds=2.0, max_attempts=2, retry_condition=["unresponsive"])
    rollout = await store.enqueue_rollout({"question": "2+2"}, config=config)
    holder = subprocess.Popen(  # noqa: ASYNC220 - started once, then read off the loop
        [sys.executable, "-m", "tests.services.coordinator.holder", nats_settings.url, nats_settings.namespace],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        line = await asyncio.wait_for(asyncio.to_thread(holder.stdout.readline), timeout=30)  # type: ignore[union-attr]
        rollout_id, dead_attempt = line.split()
        assert rollout_id == rollout.rollout_id
        assert (await store.get_worker_by_id("doomed")).status == "busy"
    finally:
        holder.kill()  # SIGKILL: no cleanup, no goodbye
        holder.wait()
    marked = await until_event(store, rollout_id, lambda e: isinstance(e, AttemptMarkedUnresponsive))
    assert marked.attempt_id == dead_attempt and marked.last_heartbeat_at is not None
    await until_event(store, rollout_id, lambda e: isinstance(e, RolloutRequeued))
    retry = await store.dequeue_rollout(worker_id="survivor")
    assert retry is not None and retry.rollout_id == rollout_id and retry.attempt.sequence_id == 2
    await store.update_attempt(rollout_id, retry.attempt.attempt_id, status="succeeded")
    finished = await store.wait_for_rollouts(rollout_ids=[rollout_id], timeout=5)
    assert [r.status for r in finished] == ["succeeded"]
    attempts = await store.get_attempts(rollout_id)
    assert [(a.attempt_id, a.status) for a in attempts] == [
        (dead_attempt, "unresponsive"),
        (retry.attempt.attempt_id, "succeeded"),
    ]
    await until_worker(store, "doomed", "unknown")
    heartbeats = [e async for e in store.log.telemetry() if isinstance(e, Envelope)]
    assert heartbeats and {e.event.attempt_id for e in heartbeats} == {dead_attempt}  # the dead attempt's own
