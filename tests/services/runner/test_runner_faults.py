"""Runner faults on a real bus: kill -9 of a runner process mid-rollout, SIGTERM (rollouts that finish in the
grace period, and rollouts past it, ended and retried per their config), an isolated agent's grandchildren
killed at its timeout, and a 200-rollout run with 8 slots fully visible in the projections."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from voltbus.schemas.rollouts import RolloutConfig
from voltbus.schemas.spans import SpanRecorded
from voltbus.services.eventlog import Envelope
from voltbus.services.projector.follow import ends_at, project
from voltbus.services.projector.projector import Projector
from voltbus.services.settings import NatsSettings
from voltbus.store import EnqueueRolloutRequest, Store

from ...conftest import wait_for
from ..coordinator.conftest import running_coordinator
from .conftest import runner_settings
from .test_runner import AGENTS, run_until_done


def runner_process(nats: NatsSettings, agent: str, **runner: str) -> subprocess.Popen[bytes]:
    """``python -m voltbus.services.runner agent`` on the test's namespace; ``runner``: more runner settings."""
    env = {
        **os.environ,
        "VOLTBUS_NATS__URL": nats.url,
        "VOLTBUS_NATS__NAMESPACE": nats.namespace,
        "VOLTBUS_RUNNER__HEARTBEAT_S": "0.2",
        "VOLTBUS_RUNNER__CLAIM_WAIT_S": "0.2",
        "VOLTBUS_RUNNER__WORKER_PREFIX": "Doomed",
        **{f"VOLTBUS_RUNNER__{name.upper()}": value for name, value in runner.items()},
    }
    return subprocess.Popen(
        [sys.executable, "-m", "voltbus.services.runner", agent],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


async def spans_of(store: Store, rollout_id: str) -> list[SpanRecorded]:
    return [
        e.event
        async for e in store.log.telemetry()
        if isinstance(e, Envelope) and isinstance(e.event, SpanRecorded) and e.event.rollout_id == rollout_id
    ]


async def first_span(store: Store, rollout_id: str) -> SpanRecorded:
    replay = store.log.telemetry(follow=True)
    try:
        async with asyncio.timeout(30):
            async for item in replay:
                if (
                    isinstance(item, Envelope)
                    and isinstance(item.event, SpanRecorded)
                    and item.event.rollout_id == rollout_id
                ):
                    return item.event
    finally:
        await replay.aclose()  # type: ignore[attr-defined]
    raise AssertionError("unreachable")


async def test_killed_runner_process_the_rollout_completes_elsewhere(store: Store, nats_settings: NatsSettings) -> None:
    # attempt 2's runner beats every 0.2 s: 3 s of silence (not 1) only for the killed one, even on a loaded machine
    config = RolloutConfig(unresponsive_seconds=3.0, max_attempts=2, retry_condition=["unresponsive"])
    rollout = await store.enqueue_rollout({"q": 1}, config=config)
    doomed = runner_process(nats_settings, f"{AGENTS}:stuck_on_first_attempt")
    try:
        dead_span = await first_span(store, rollout.rollout_id)  # attempt 1 is running in that process
    finally:
        doomed.send_signal(signal.SIGKILL)
        doomed.wait()
    async with running_coordinator(nats_settings):
        [done] = await run_until_done(
            runner_settings(nats_settings), f"{AGENTS}:stuck_on_first_attempt", store, [rollout.rollout_id], timeout=30
        )
    assert done.status == "succeeded" and done.attempt.sequence_id == 2
    attempts = await store.get_attempts(rollout.rollout_id)
    assert [(a.status, a.worker_id) for a in attempts] == [("unresponsive", "Doomed-0"), ("succeeded", "Worker-0")]
    by_attempt = {}
    for span in await spans_of(store, rollout.rollout_id):
        by_attempt.setdefault(span.attempt_id, []).append(span.attributes.get("agentlightning.message.body"))
    assert (
        by_attempt[attempts[0].attempt_id]
        == ["attempt 1 started"]
        == [dead_span.attributes["agentlightning.message.body"]]
    )
    assert by_attempt[attempts[1].attempt_id][0] == "attempt 2 started"


async def test_sigterm_lets_the_running_rollout_finish(store: Store, nats_settings: NatsSettings) -> None:
    rollout = await store.enqueue_rollout({"q": 2})
    proc = runner_process(nats_settings, f"{AGENTS}:takes_a_second")
    try:
        await first_running(store, rollout.rollout_id)
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(proc.wait, 30) == 0
    finally:
        proc.kill()
    done = await store.get_rollout_by_id(rollout.rollout_id)
    assert done is not None and done.status == "succeeded"


@pytest.mark.parametrize("isolate", [False, True], ids=["in-process", "isolated"])
async def test_sigterm_past_the_grace_ends_running_rollouts_cancelled_per_their_retry_config(
    store: Store, nats_settings: NatsSettings, isolate: bool
) -> None:
    retried = await store.enqueue_rollout({"q": 3}, config=RolloutConfig(max_attempts=2, retry_condition=["failed"]))
    once = await store.enqueue_rollout({"q": 4})  # the default: one attempt
    agent = f"{AGENTS}:stuck_on_first_attempt"  # a sync agent, blocked (in its worker thread or child process)
    proc = runner_process(nats_settings, agent, slots="2", shutdown_grace_s="0.5", isolate=str(isolate).lower())
    try:
        for rollout in (retried, once):
            await first_running(store, rollout.rollout_id)
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(proc.wait, 30) == 0  # a thread stuck in the agent does not hold the exit
    finally:
        proc.kill()
    for rollout, status in ((retried, "requeuing"), (once, "failed")):
        [attempt] = await store.get_attempts(rollout.rollout_id)
        assert attempt.status == "failed" and attempt.error is not None
        reason = (attempt.error["type"], attempt.error["message"])
        assert reason == ("Cancelled", "the runner stopped during the rollout")
        ended = await store.get_rollout_by_id(rollout.rollout_id)
        assert ended is not None and ended.status == status
    [done] = await run_until_done(runner_settings(nats_settings), agent, store, [retried.rollout_id])
    assert done.status == "succeeded" and done.attempt.sequence_id == 2


def is_gone(pid: int) -> bool:
    """The process runs no more: it does not exist, or it is a zombie its new parent has not reaped yet."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


async def test_isolated_agent_timeout_kills_its_grandchildren_and_retries(
    store: Store, nats_settings: NatsSettings, tmp_path: Path
) -> None:
    pidfile = tmp_path / "grandchildren"
    # The timeout counts from the claim, so it covers the isolated child's Python start-up and imports (0.7 s on
    # an idle 2-core machine, 4.5 s beside two CPU hogs) before the agent can start its grandchild: 10 s leaves
    # the grandchild room to start on a loaded machine (2.5 s failed 6 runs of 7 there).
    config = RolloutConfig(timeout_seconds=10, max_attempts=2, retry_condition=["timeout"])
    rollout = await store.enqueue_rollout({"pidfile": str(pidfile)}, config=config)
    try:
        [done] = await run_until_done(
            runner_settings(nats_settings, isolate=True),
            f"{AGENTS}:spawns_and_hangs",
            store,
            [rollout.rollout_id],
            timeout=120,
        )
        assert done.status == "failed"
        attempts = await store.get_attempts(rollout.rollout_id)
        assert [(a.sequence_id, a.status) for a in attempts] == [(1, "timeout"), (2, "timeout")]
        pids = [int(p) for p in pidfile.read_text().split()] if pidfile.exists() else []
        assert len(pids) == 2, f"one grandchild per attempt, started within the 10 s timeout: {pids}"
        await wait_for(lambda: all(is_gone(p) for p in pids), 10, "the agent's grandchildren to be killed")
    finally:  # never leave a sleeper behind when the test fails
        for pid in [int(p) for p in pidfile.read_text().split()] if pidfile.exists() else []:
            if not is_gone(pid):
                os.kill(pid, signal.SIGKILL)


async def first_running(store: Store, rollout_id: str) -> None:
    """Until an attempt of the rollout runs (a runner's claim opens it running)."""
    replay = store.log.replay("control", follow=True, subject=store.topology.rollout_any(rollout_id))
    try:
        async with asyncio.timeout(30):
            async for item in replay:
                if isinstance(item, Envelope) and getattr(item.event, "running", False):
                    return
    finally:
        await replay.aclose()  # type: ignore[attr-defined]


async def test_two_hundred_rollouts_on_eight_slots_all_visible_in_sql(
    store: Store, nats_settings: NatsSettings, tmp_path: Path
) -> None:
    tasks = [{"question": f"{i}+1", "answer": i + 1} for i in range(200)]
    rollouts = await store.enqueue_many_rollouts([EnqueueRolloutRequest(input=t, mode="train") for t in tasks])
    finished = await run_until_done(
        runner_settings(nats_settings, slots=8),
        f"{AGENTS}:CalcAgent",
        store,
        [r.rollout_id for r in rollouts],
        timeout=120,
    )
    assert [r.status for r in finished] == ["succeeded"] * 200
    projector = Projector(tmp_path / "p.duckdb")
    try:
        await project(projector, store.log, ends=await ends_at(store.log))
        q = projector.con.execute
        assert q("SELECT status, count(*) FROM rollouts GROUP BY status").fetchall() == [("succeeded", 200)]
        assert q("SELECT count(DISTINCT worker_id) FROM attempts").fetchone()[0] > 1
        assert q("SELECT count(*), sum(value) FROM rewards").fetchone() == (200, 200.0)
        per_rollout = q("SELECT rollout_id, count(*) FROM spans GROUP BY 1").fetchall()
        assert len(per_rollout) == 200 and {n for _, n in per_rollout} == {3}  # message, object, reward
    finally:
        projector.close()
