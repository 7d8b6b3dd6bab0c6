"""An isolated agent process holds no bus credentials and no bus connection, and can write to its
own attempt only: requests about any other rollout are refused by its runner, nothing appended."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path

import pytest

from voltbus.schemas.resources import PromptTemplate
from voltbus.schemas.spans import RewardReported, SpanRecorded
from voltbus.services.eventlog import Envelope, EventLog
from voltbus.services.ops.natsserver import NatsServer
from voltbus.services.runner.app import Runner
from voltbus.services.runner.isolate import ChildJob
from voltbus.services.settings import NatsSettings, RunnerSettings, Settings
from voltbus.store import Rollout, Store, connect

from .test_bus_permissions import admin_log, auth_dir, role_settings, secured_server  # noqa: F401

AGENTS = "tests.security.isolated_agents"
RESOURCES = {"prompt": PromptTemplate(template="Q: {question}", engine="f-string")}


async def run_isolated_until_done(nats: NatsSettings, agent: str, store: Store, rollout_id: str) -> Rollout:
    stop = asyncio.Event()
    settings = Settings(nats=nats, runner=RunnerSettings(isolate=True, claim_wait_s=0.2, heartbeat_s=0.2))
    async with Runner(settings, agent) as runner:
        running = asyncio.create_task(runner.run(stop))
        [done] = await store.wait_for_rollouts(rollout_ids=[rollout_id], timeout=60)
        stop.set()
        await running
    return done


async def rewards_of(log: EventLog, rollout_id: str) -> list[float | None]:
    events = [e.event async for e in log.telemetry() if isinstance(e, Envelope)]
    return [e.value for e in events if isinstance(e, RewardReported) and e.rollout_id == rollout_id]


def test_the_child_job_has_no_bus_settings() -> None:
    assert not {"nats", "url", "user", "password", "token"} & set(ChildJob.__struct_fields__)


def runner_secrets_in_environment(
    server: NatsServer,
    auth_dir: Path,  # noqa: F811 (the argument, not the imported fixture of the same name)
    monkeypatch: pytest.MonkeyPatch,
) -> NatsSettings:
    """The runner user's settings, its user and password also in this process's environment (as compose sets
    them): an agent must inherit neither."""
    runner_nats = role_settings(server, auth_dir, "runner").model_copy(update={"request_timeout_s": 5.0})
    assert runner_nats.password
    monkeypatch.setenv("VOLTBUS_NATS__USER", "runner")
    monkeypatch.setenv("VOLTBUS_NATS__PASSWORD", runner_nats.password)
    return runner_nats


async def test_isolated_agent_finds_no_bus_credentials(
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
        task = {"url": secured_server.url, "dump": str(dump)}
        rollout = await store.enqueue_rollout(task)
        done = await run_isolated_until_done(runner_nats, f"{AGENTS}:credential_hunter", store, rollout.rollout_id)
        assert done.status == "succeeded", done.attempt.error
        assert await rewards_of(store.log, rollout.rollout_id) == [1.0], "the agent connected to the bus"
    finally:
        await store.close()
    seen = dump.read_text()
    assert runner_nats.password not in seen
    assert not any(name.startswith("VOLTBUS_") for name in json.loads(seen)["environ"])
    assert "nats://" not in seen.replace(secured_server.url, "")  # only the URL the test handed it


async def test_forged_request_for_another_rollout_is_refused(
    nats_settings: NatsSettings, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = await connect(settings=nats_settings)
    try:
        await store.add_resources(RESOURCES)
        victim = await store.start_rollout({"question": "mine"}, worker_id="victim-worker")  # not claimable
        dump = tmp_path / "replies.json"
        task = {"victim": victim.rollout_id, "victim_attempt": victim.attempt.attempt_id, "dump": str(dump)}
        rollout = await store.enqueue_rollout(task)
        with caplog.at_level(logging.WARNING, logger="voltbus.services.runner.pipe"):
            done = await run_isolated_until_done(nats_settings, f"{AGENTS}:forger", store, rollout.rollout_id)
        assert done.status == "succeeded", done.attempt.error
        assert await rewards_of(store.log, rollout.rollout_id) == [1.0], dump.read_text()
        replies = json.loads(dump.read_text())
        assert [r["kind"] for r in replies] == ["refused"] * 4
        assert all(victim.rollout_id in r["error"] for r in replies)
        assert sum("refused the agent process's request" in r.message for r in caplog.records) == 4
        events = [e.event async for e in store.log.telemetry() if isinstance(e, Envelope)]
        assert not [e for e in events if isinstance(e, SpanRecorded) and e.rollout_id == victim.rollout_id]
        [attempt] = await store.get_attempts(victim.rollout_id)
        assert attempt.status in ("preparing", "running") and attempt.end_time is None
        assert await store.get_next_span_sequence_id(victim.rollout_id, victim.attempt.attempt_id) == 1
    finally:
        await store.close()
