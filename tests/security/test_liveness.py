"""Availability: attempts never stay ``running`` after their runner died, and heartbeats outlive bus outages.

Finding 13: a runner killed with SIGKILL while holding rollouts (default ``RolloutConfig``, no timeouts)
left them running forever, and a restarted runner with the same worker ids did not settle them.
Finding 14: after a bus outage the runner's heartbeat thread died and never beat again.
Runners are real ``voltbus runner`` processes; the coordinator runs in-process; the bus is a real nats-server.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path

import nats.errors
import pytest

from voltbus.schemas.errors import VoltbusError
from voltbus.schemas.resources import PromptTemplate
from voltbus.schemas.rollouts import AttemptClaimed, AttemptMarkedUnresponsive, RolloutConfig
from voltbus.schemas.workers import WorkerStatusReported
from voltbus.services.coordinator.app import run as run_coordinator
from voltbus.services.eventlog import Envelope
from voltbus.services.lifecycle.authority import verifies
from voltbus.services.ops.natsserver import NatsServer
from voltbus.services.runner.heartbeat import Heartbeat
from voltbus.services.settings import CoordinatorSettings, NatsSettings, RunnerSettings, Settings
from voltbus.store import Store, connect

from ..conftest import start_server, wait_for
from .test_bus_permissions import auth_dir, role_settings, secured_server  # noqa: F401

ROOT = Path(__file__).resolve().parents[2]
AGENT = "tests.reliability.agents:echo_agent"  # sleeps task["sleep"] seconds: a long rollout, held until killed
HOLD = {"sleep": 3600}
RETRIED = RolloutConfig(max_attempts=2, retry_condition=["unresponsive"])


@pytest.fixture
async def store(nats_settings: NatsSettings) -> AsyncIterator[Store]:
    """A store client with the resources the agent's rollouts pin."""
    client = await connect(settings=nats_settings)
    await client.add_resources({"prompt": PromptTemplate(template="{sleep}", engine="f-string")})
    yield client
    await client.close()


@contextmanager
def runner(nats: NatsSettings, log: Path, prefix: str, slots: int, busy_report_s: float = 1.0) -> Iterator[None]:
    """A ``voltbus runner`` process with worker ids ``<prefix>-0..``; SIGKILLed when the block ends (if alive)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("VOLTBUS_")} | {
        "VOLTBUS_NATS__URL": nats.url,
        "VOLTBUS_NATS__NAMESPACE": nats.namespace,
        "VOLTBUS_RUNNER__WORKER_PREFIX": prefix,
        "VOLTBUS_RUNNER__SLOTS": str(slots),
        "VOLTBUS_RUNNER__HEARTBEAT_S": "0.2",
        "VOLTBUS_RUNNER__CLAIM_WAIT_S": "0.2",
        "VOLTBUS_RUNNER__BUSY_REPORT_S": str(busy_report_s),
    }
    if nats.user:  # a bus with users: the runner's own
        env |= {"VOLTBUS_NATS__USER": nats.user, "VOLTBUS_NATS__PASSWORD": nats.password or ""}
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "voltbus.services.runner", AGENT],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        yield
    finally:
        kill(proc)


def kill(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the process and its group: no cleanup, no goodbye."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


@asynccontextmanager
async def coordinator(nats: NatsSettings, worker_timeout_s: float) -> AsyncIterator[None]:
    """The coordinator, in-process, with a worker timeout for the test."""
    stop = asyncio.Event()
    watch = CoordinatorSettings(tick_s=0.05, restart_delay_s=0.05, worker_timeout_s=worker_timeout_s)
    task = asyncio.create_task(run_coordinator(Settings(nats=nats, coordinator=watch), stop))
    try:
        yield
    finally:
        stop.set()
        await asyncio.wait_for(task, timeout=20)


async def held(store: Store, rollout_ids: list[str], prefix: str, sequence: int = 1) -> dict[str, str] | None:
    """rollout id -> attempt id, once each rollout's attempt ``sequence`` runs on a ``prefix`` worker."""
    found = {}
    for rollout_id in rollout_ids:
        attempt = await store.get_latest_attempt(rollout_id)
        if attempt is None or attempt.sequence_id != sequence or attempt.status != "running":
            return None
        if not (attempt.worker_id or "").startswith(f"{prefix}-"):
            return None
        found[rollout_id] = attempt.attempt_id
    return found


async def events(store: Store, rollout_id: str) -> list[Envelope]:
    """The rollout's stored control events."""
    envelopes, _ = await store.log.read(rollout_id)
    return [e for e in envelopes if isinstance(e, Envelope)]


async def statuses(store: Store, rollout_id: str) -> list[tuple[int, str]]:
    """(sequence id, status) of each attempt."""
    return [(a.sequence_id, a.status) for a in await store.get_attempts(rollout_id)]


@pytest.mark.long
async def test_attempts_of_a_killed_runner_end_unresponsive_after_the_worker_timeout(
    store: Store, nats_settings: NatsSettings, tmp_path: Path
) -> None:
    plain = (await store.enqueue_rollout(HOLD)).rollout_id  # the default RolloutConfig: no timeouts, no retry
    retried = (await store.enqueue_rollout(HOLD, config=RETRIED)).rollout_id
    ids = [plain, retried]
    async with coordinator(nats_settings, worker_timeout_s=5.0):  # 25 beats: a stall of a busy machine is not silence
        with runner(nats_settings, tmp_path / "runner.log", "liv", slots=2):
            attempts = await wait_for(lambda: held(store, ids, "liv"), 60, "both rollouts running on the runner")
            claims = [e for r in ids for e in await events(store, r) if isinstance(e.event, AttemptClaimed)]
            claimed = max(e.time for e in claims)
            # alive and beating through more than two worker timeouts: nothing is expired
            await wait_for(lambda: beaten_after(store, "liv-0", claimed + 12.0), 90, "12 s of heartbeats")
            assert await held(store, ids, "liv") == attempts, "an attempt of a live, beating worker was expired"
        # the runner was SIGKILLed holding both
        await wait_for(lambda: ended(store, plain), 60, "the default-config rollout to end")
        await wait_for(lambda: statuses_are(store, retried, [(1, "unresponsive")], "requeuing"), 60, "the retry")
    assert await statuses(store, plain) == [(1, "unresponsive")]
    assert (await store.get_rollout_by_id(plain)).status == "failed"  # type: ignore[union-attr]
    for rollout_id in ids:
        [marked] = [e for e in await events(store, rollout_id) if isinstance(e.event, AttemptMarkedUnresponsive)]
        assert marked.event.attempt_id == attempts[rollout_id]
        assert marked.event.last_heartbeat_at is not None and marked.event.last_heartbeat_at >= claimed
        assert marked.time - marked.event.last_heartbeat_at > 5.0  # silent longer than the worker timeout


async def test_a_restarted_runner_settles_its_old_attempts_before_it_claims(
    store: Store, nats_settings: NatsSettings, tmp_path: Path
) -> None:
    plain = (await store.enqueue_rollout(HOLD)).rollout_id
    with runner(nats_settings, tmp_path / "runner.log", "rst", slots=1, busy_report_s=0):  # reported busy at once
        [attempt] = (await wait_for(lambda: held(store, [plain], "rst"), 60, "the rollout running")).values()
        await wait_for(lambda: worker_holds(store, "rst-0", attempt), 30, "the worker reported busy with it")
    quick = (await store.enqueue_rollout({"sleep": 0})).rollout_id  # no coordinator runs in this test
    with runner(nats_settings, tmp_path / "runner.log", "rst", slots=1, busy_report_s=0):
        await wait_for(lambda: statuses_are(store, quick, [(1, "succeeded")], "succeeded"), 60, "new work done")
    assert await statuses(store, plain) == [(1, "unresponsive")]
    assert (await store.get_rollout_by_id(plain)).status == "failed"  # type: ignore[union-attr]
    [settled] = [e.seq for e in await events(store, plain) if isinstance(e.event, AttemptMarkedUnresponsive)]
    [claim] = [e.seq for e in await events(store, quick) if isinstance(e.event, AttemptClaimed)]
    assert settled < claim, "the restarted runner claimed new work before settling its old attempt"


async def test_on_a_bus_with_users_the_restarted_runner_settles_with_its_kept_key(
    secured_server: NatsServer,  # noqa: F811
    auth_dir: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    """Runners may not end others' attempts (the authority subject is closed to them), so a restarted runner ends
    its previous process's attempt as its holder: the key of fixed worker ids is kept in a file (mode 0600)."""
    learner = await connect(settings=role_settings(secured_server, auth_dir, "learner"))
    try:
        await learner.add_resources({"prompt": PromptTemplate(template="{sleep}", engine="f-string")})
        plain = (await learner.enqueue_rollout(HOLD)).rollout_id
        nats = role_settings(secured_server, auth_dir, "runner")
        with runner(nats, tmp_path / "runner.log", "key", slots=1, busy_report_s=0):
            [attempt] = (await wait_for(lambda: held(learner, [plain], "key"), 60, "the rollout running")).values()
            await wait_for(lambda: worker_holds(learner, "key-0", attempt), 30, "the worker reported busy with it")
        quick = (await learner.enqueue_rollout({"sleep": 0})).rollout_id
        with runner(nats, tmp_path / "runner.log", "key", slots=1, busy_report_s=0):
            await wait_for(lambda: statuses_are(learner, quick, [(1, "succeeded")], "succeeded"), 60, "new work done")
        assert await statuses(learner, plain) == [(1, "unresponsive")]
        stored = await events(learner, plain)
        [claim] = [e.event for e in stored if isinstance(e.event, AttemptClaimed)]
        [settled] = [e for e in stored if isinstance(e.event, AttemptMarkedUnresponsive)]
        assert settled.subject == learner.topology.rollout_events(plain)  # its own subject, as the holder
        assert claim.holder_key is not None and verifies(claim.holder_key, settled.event)
        key = RunnerSettings().key_dir / nats.namespace / "key.key"  # the runner's default, under the tests' data home
        assert key.stat().st_mode & 0o777 == 0o600
    finally:
        await learner.close()


async def test_the_coordinator_ends_what_a_restarted_runner_cannot_name(
    store: Store, nats_settings: NatsSettings, tmp_path: Path
) -> None:
    plain = (await store.enqueue_rollout(HOLD)).rollout_id
    retried = (await store.enqueue_rollout(HOLD, config=RETRIED)).rollout_id
    ids = [plain, retried]
    async with coordinator(nats_settings, worker_timeout_s=600):  # silence cannot be the reason within the test
        with runner(nats_settings, tmp_path / "runner.log", "orp", slots=2, busy_report_s=3600):  # never reported
            attempts = await wait_for(lambda: held(store, ids, "orp"), 60, "both rollouts running on the runner")
        with runner(nats_settings, tmp_path / "runner.log", "orp", slots=2, busy_report_s=3600):
            await wait_for(lambda: ended(store, plain), 60, "the default-config rollout to end")
            await wait_for(lambda: held(store, [retried], "orp", sequence=2), 60, "the retry running on the new runner")
    assert await statuses(store, plain) == [(1, "unresponsive")]
    for rollout_id in ids:
        [marked] = [e for e in await events(store, rollout_id) if isinstance(e.event, AttemptMarkedUnresponsive)]
        assert marked.event.attempt_id == attempts[rollout_id]


async def ended(store: Store, rollout_id: str) -> bool:
    rollout = await store.get_rollout_by_id(rollout_id)
    return rollout is not None and rollout.status in ("succeeded", "failed", "cancelled")


async def statuses_are(store: Store, rollout_id: str, expected: list[tuple[int, str]], status: str) -> bool:
    rollout = await store.get_rollout_by_id(rollout_id)
    return rollout is not None and rollout.status == status and await statuses(store, rollout_id) == expected


async def worker_holds(store: Store, worker_id: str, attempt_id: str) -> bool:
    worker = await store.get_worker_by_id(worker_id)
    return worker is not None and worker.status == "busy" and worker.current_attempt_id == attempt_id


async def beaten_after(store: Store, worker_id: str, server_time: float) -> bool:
    """Whether the worker's latest report was stored after ``server_time``."""
    return (await last_report_time(store, worker_id, newer_than=server_time)) is not None


async def test_heartbeats_resume_after_the_bus_restarts(tmp_path: Path) -> None:
    server = start_server(tmp_path / "nats")
    nats = NatsSettings(url=server.url, namespace="live", request_timeout_s=1.0, connect_timeout_s=1.0)
    store = await connect(settings=nats)
    beat = Heartbeat(nats, ["hb-0"], interval=0.1)
    beat.start()
    try:
        await wait_for(lambda: beat.beats >= 2, 20, "the first heartbeats")
        await asyncio.to_thread(server.kill)  # the outage: every beat now fails
        await wait_for(lambda: beat.failing or not beat.is_alive(), 20, "a beat to fail")
        await asyncio.to_thread(server.start)  # the same port and store
        assert beat.is_alive(), "the heartbeat thread died during the outage"
        before = beat.beats
        await wait_for(lambda: beat.beats >= before + 3, 30, "heartbeats after the bus came back")
        seen = await wait_for(lambda: last_report_time(store, "hb-0"), 20, "a stored report")
        assert beat.is_alive() and not beat.failing
        after = await wait_for(lambda: last_report_time(store, "hb-0", newer_than=seen), 20, "a newer heartbeat stored")
        assert after > seen
    finally:
        await asyncio.to_thread(beat.stop)
        await store.close()
        await asyncio.to_thread(server.stop)


async def last_report_time(store: object, worker_id: str, newer_than: float = 0.0) -> float | None:
    """Server receive time of the worker's latest report, when newer than ``newer_than``."""
    subject = store.topology.worker(worker_id)  # type: ignore[attr-defined]
    try:
        reports = [e async for e in store.log.replay("control", subject=subject)]  # type: ignore[attr-defined]
    except (nats.errors.Error, TimeoutError, OSError, VoltbusError):  # the client is still reconnecting: not yet
        return None
    times = [e.time for e in reports if isinstance(e, Envelope) and isinstance(e.event, WorkerStatusReported)]
    return times[-1] if times and times[-1] > newer_than else None
