"""The heartbeat thread's work: a sign of life only for attempts that stored no span lately, worker
heartbeats written through the runner's own store while its event loop answers, and both kept going by the
thread itself while an agent blocks that loop."""

from __future__ import annotations

import asyncio
import json
import time

from voltbus.schemas.spans import AttemptHeartbeatSent
from voltbus.schemas.workers import WorkerStatusReported
from voltbus.services.eventlog import Envelope
from voltbus.services.runner.heartbeat import Heartbeat
from voltbus.services.settings import NatsSettings
from voltbus.store import Store

from ...conftest import wait_for
from .conftest import runner_settings
from .test_runner import AGENTS, run_until_done, telemetry


async def test_beat_skips_attempts_with_recent_spans_and_writes_workers_on_the_main_loop(
    store: Store, nats_settings: NatsSettings
) -> None:
    beat = Heartbeat(nats_settings, ["w-quiet", "w-tracing"], interval=5.0)
    beat.active = {"w-quiet": ("ro-quiet", "at-1"), "w-tracing": ("ro-tracing", "at-2")}
    beat.spans_stored = {"ro-tracing": time.monotonic()}  # its spans already are a sign of life
    beat.main = (asyncio.get_running_loop(), store)
    beat.start()  # the thread beats once at start with its own connection
    try:
        await wait_for(lambda: beat.beats >= 1, 10, "the heartbeat thread to beat")
    finally:
        await asyncio.to_thread(beat.stop)
    events = [e.event async for e in store.log.telemetry() if isinstance(e, Envelope)]
    beats = [e for e in events if isinstance(e, AttemptHeartbeatSent)]
    assert [(e.rollout_id, e.attempt_id) for e in beats] == [("ro-quiet", "at-1")]
    for worker_id in beat.worker_ids:
        worker = await store.get_worker_by_id(worker_id)
        assert worker is not None and worker.last_heartbeat_time is not None
        assert worker.heartbeat_stats is not None and worker.heartbeat_stats["cpu_cores"]
    assert set(store._known_workers) == set(beat.worker_ids)  # written by the runner's store, not the thread's


async def test_heartbeats_go_on_while_an_async_agent_blocks_the_runners_event_loop(
    store: Store, nats_settings: NatsSettings
) -> None:
    rollout = await store.enqueue_rollout({"seconds": 1.5})
    settings = runner_settings(nats_settings, heartbeat_s=0.2)
    [done] = await run_until_done(settings, f"{AGENTS}:blocks_the_loop", store, [rollout.rollout_id])
    assert done.status == "succeeded"
    spans, _ = await telemetry(store, rollout.rollout_id)
    [window] = [s.attributes["agentlightning.object.json"] for s in spans if s.name == "agentlightning.object"]
    began, ended = json.loads(window)["blocked_from"], json.loads(window)["blocked_to"]
    events = [e.event async for e in store.log.telemetry() if isinstance(e, Envelope)]
    beats = [e.at for e in events if isinstance(e, AttemptHeartbeatSent) and e.rollout_id == rollout.rollout_id]
    assert len([at for at in beats if began < at < ended]) >= 3  # 1.5 s blocked, a beat due every 0.2 s
    subject = store.topology.worker(done.attempt.worker_id)
    reports = [e.event async for e in store.log.replay("control", subject=subject) if isinstance(e, Envelope)]
    worker_beats = {e.last_heartbeat_time for e in reports if isinstance(e, WorkerStatusReported)}
    assert len([at for at in worker_beats if at is not None and began < at < ended]) >= 3  # the thread wrote them
