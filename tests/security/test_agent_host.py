"""Issue 24, finding 7: agents run under a default runner hold no bus credentials. They run in the agent
host, a process of their runner with no ``VOLTBUS_*`` variable, no password in memory and no bus connection;
it writes only to the attempts its runner gave it; killing it fails those attempts (retried per their config)
and the runner goes on with a new host. In-process agents are an opt-in that warns."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.conftest import wait_for
from tests.services.runner.conftest import runner_settings  # a runner as voltbus runner starts one, fast beats
from voltbus.schemas.resources import PromptTemplate
from voltbus.schemas.rollouts import RolloutConfig
from voltbus.schemas.spans import SpanRecorded
from voltbus.services.eventlog import Envelope, EventLog
from voltbus.services.ops.natsserver import NatsServer
from voltbus.services.runner.app import SHARED_CREDENTIALS, Runner
from voltbus.services.settings import NatsSettings, Settings
from voltbus.store import Store, connect

from .test_bus_permissions import admin_log, auth_dir, role_settings, secured_server  # noqa: F401
from .test_isolated_agent import rewards_of, runner_secrets_in_environment

AGENTS = "tests.security.host_agents"
RESOURCES = {"prompt": PromptTemplate(template="Q: {question}", engine="f-string")}


@pytest.fixture
async def store(nats_settings: NatsSettings) -> AsyncIterator[Store]:
    """A store client with resources published."""
    client = await connect(settings=nats_settings)
    await client.add_resources(RESOURCES)
    yield client
    await client.close()


async def run_until_done(settings: Settings, agent: str, store: Store, rollout_ids: list[str]) -> list:
    stop = asyncio.Event()
    async with Runner(settings, agent) as runner:
        running = asyncio.create_task(runner.run(stop))
        done = await store.wait_for_rollouts(rollout_ids=rollout_ids, timeout=60)
        stop.set()
        await running
    return done


async def test_agent_in_the_default_runner_finds_no_bus_credentials(
    secured_server: NatsServer,  # noqa: F811
    auth_dir: Path,  # noqa: F811
    admin_log: EventLog,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    runner_nats = runner_secrets_in_environment(secured_server, auth_dir, monkeypatch)
    store = await connect(settings=role_settings(secured_server, auth_dir, "admin"), name="admin")
    try:
        await store.add_resources(RESOURCES)
        dump = tmp_path / "seen.json"
        rollout = await store.enqueue_rollout({"url": secured_server.url, "dump": str(dump)})
        settings = runner_settings(runner_nats)
        assert settings.runner.mode == "host"
        [done] = await run_until_done(settings, f"{AGENTS}:credential_hunter", store, [rollout.rollout_id])
        assert done.status == "succeeded", done.attempt.error
        assert await rewards_of(store.log, rollout.rollout_id) == [1.0], "the agent connected to the bus"
    finally:
        await store.close()
    text = dump.read_text()
    seen = json.loads(text)
    assert runner_nats.password not in text  # environment, /proc, argv, settings, objects in memory, store
    assert seen["pid"] != os.getpid()
    assert not any(name.startswith("VOLTBUS_") for name in seen["environ"])
    assert "VOLTBUS_" not in seen["proc_environ"]
    assert seen["settings"]["password"] is None and seen["settings"]["nats"]["user"] is None
    assert all(s["password"] is None for s in seen["in_memory"])
    assert "nats://" not in text.replace(secured_server.url, "").replace("nats://127.0.0.1:4222", "")


async def test_forged_requests_for_another_rollout_are_refused(
    nats_settings: NatsSettings, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = await connect(settings=nats_settings)
    try:
        await store.add_resources(RESOURCES)
        victim = await store.start_rollout({"question": "mine"}, worker_id="victim-worker")  # not claimable
        dump = tmp_path / "refusals.json"
        task = {"victim": victim.rollout_id, "victim_attempt": victim.attempt.attempt_id, "dump": str(dump)}
        rollout = await store.enqueue_rollout(task)
        with caplog.at_level(logging.WARNING, logger="voltbus.services.runner.pipe"):
            [done] = await run_until_done(
                runner_settings(nats_settings), f"{AGENTS}:forger", store, [rollout.rollout_id]
            )
        assert done.status == "succeeded", done.attempt.error
        assert await rewards_of(store.log, rollout.rollout_id) == [1.0], dump.read_text()
        refusals = json.loads(dump.read_text())
        assert len(refusals) == 4 and all(victim.rollout_id in r for r in refusals)
        assert sum("refused the agent process's request" in r.message for r in caplog.records) == 8  # raw too
        events = [e.event async for e in store.log.telemetry() if isinstance(e, Envelope)]
        assert not [e for e in events if isinstance(e, SpanRecorded) and e.rollout_id == victim.rollout_id]
        [attempt] = await store.get_attempts(victim.rollout_id)
        assert attempt.status in ("preparing", "running") and attempt.end_time is None
        assert await store.get_next_span_sequence_id(victim.rollout_id, victim.attempt.attempt_id) == 1
    finally:
        await store.close()


def pids_in(pidfile: Path) -> list[tuple[int, int]]:
    if not pidfile.exists():
        return []
    return [(int(p), int(a)) for p, a in (line.split() for line in pidfile.read_text().splitlines())]


async def test_a_killed_host_fails_its_attempts_and_a_new_host_takes_over(
    store: Store, nats_settings: NatsSettings, tmp_path: Path
) -> None:
    pidfile = tmp_path / "pids"
    retried = await store.enqueue_rollout(
        {"pidfile": str(pidfile)}, config=RolloutConfig(max_attempts=2, retry_condition=["failed"])
    )
    once = await store.enqueue_rollout({"pidfile": str(pidfile)})
    stop = asyncio.Event()
    async with Runner(runner_settings(nats_settings, slots=2), f"{AGENTS}:waits_on_first_attempt") as runner:
        running = asyncio.create_task(runner.run(stop))
        await wait_for(lambda: len(pids_in(pidfile)) == 2, timeout=60, what="both rollouts in the host")
        [(host, _), (same, _)] = pids_in(pidfile)
        assert host == same == runner.host.pid and host != os.getpid()  # type: ignore[union-attr]
        os.kill(host, signal.SIGKILL)
        ended = await store.wait_for_rollouts(rollout_ids=[retried.rollout_id, once.rollout_id], timeout=60)
        done = {r.rollout_id: r for r in ended}
        stop.set()
        await running
        assert runner.host is not None and runner.host.started == 2
    assert done[once.rollout_id].status == "failed"
    assert done[once.rollout_id].attempt.error["type"] == "AgentProcessDied"
    assert "SIGKILL" in done[once.rollout_id].attempt.error["message"]
    assert done[retried.rollout_id].status == "succeeded"
    statuses = [a.status for a in await store.get_attempts(retried.rollout_id)]
    assert statuses == ["failed", "succeeded"]
    [(new_host, attempt)] = [p for p in pids_in(pidfile) if p[1] == 2]
    assert new_host not in (host, os.getpid())


async def test_in_process_is_an_opt_in_that_warns(
    store: Store, nats_settings: NatsSettings, caplog: pytest.LogCaptureFixture
) -> None:
    pids = {}
    for agents in ("host", "in-process"):
        rollout = await store.enqueue_rollout({"q": agents})
        with caplog.at_level(logging.WARNING, logger="voltbus.services.runner.app"):
            settings = runner_settings(nats_settings, agents=agents)
            await run_until_done(settings, f"{AGENTS}:reports_its_pid", store, [rollout.rollout_id])
        pids[agents] = await rewards_of(store.log, rollout.rollout_id)
        warned = [r for r in caplog.records if r.message.startswith(SHARED_CREDENTIALS)]
        assert len(warned) == (agents == "in-process"), agents
    assert pids["in-process"] == [float(os.getpid())]
    assert pids["host"] != pids["in-process"]


def test_agent_user_resolves_to_a_uid_and_its_group_or_is_refused_by_name() -> None:
    """``runner.agent_user``: agents as another OS user, so that they cannot read the runner's credentials file."""
    import pwd

    from voltbus.schemas.errors import InvalidCommand
    from voltbus.services.runner.isolate import as_user

    me = pwd.getpwuid(os.geteuid())
    assert as_user(me.pw_name) == as_user(str(me.pw_uid)) == {"user": me.pw_uid, "group": me.pw_gid, "extra_groups": []}
    with pytest.raises(InvalidCommand, match="no such user"):
        as_user("no-such-user-voltbus")


def test_telemetry_of_an_attempt_the_host_ran_is_stored_after_it_ends_and_nothing_else() -> None:
    """Found by the reconnect fault test: spans a bus outage held back in the host, of an attempt that ended
    meanwhile, were refused, and the next attempt's flush (which carries them) with them: the rollout failed."""
    from voltbus.schemas import RewardReported
    from voltbus.services.runner.pipe import FinishAttempt, NextSequence, PipeServer, PublishSpans
    from voltbus.store import Attempt, AttemptedRollout

    def attempt(aid: str) -> AttemptedRollout:
        return AttemptedRollout(
            rollout_id="ro-1", input=None, start_time=0,
            attempt=Attempt(rollout_id="ro-1", attempt_id=aid, sequence_id=1, start_time=0),
        )  # fmt: skip

    def reward(aid: str, rollout: str = "ro-1") -> PublishSpans:
        return PublishSpans(events=[RewardReported(event_id=f"rw-{aid}", rollout_id=rollout, attempt_id=aid, at=1.0)])

    server = PipeServer(None, None, -1, -1)  # type: ignore[arg-type]  # only its rule is asked here
    server.assigned["ro-1"] = attempt("at-1")
    server.release("ro-1")
    server.assigned["ro-1"] = attempt("at-2")  # the retry, on the same host
    assert server.refusal(reward("at-1")) is None and server.refusal(reward("at-2")) is None
    assert server.refusal(NextSequence(rollout_id="ro-1")) is None
    assert server.refusal(FinishAttempt(rollout_id="ro-1", attempt_id="at-1")) is not None  # its end: never again
    assert server.refusal(reward("at-9")) is not None and server.refusal(reward("at-1", "ro-2")) is not None
