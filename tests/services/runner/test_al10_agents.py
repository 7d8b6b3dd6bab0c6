"""Agent Lightning 1.0's agent contract on an isolated runner: an agent class run as ``Class().run()`` (awaited
when it returns a coroutine) and a plain ``def agent(task)``, their task in ``env_map`` variables, their endpoint
in ``AGL_*``, their reward posted to ``AGL_EVENT_URL``; the record checked in SQL."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import duckdb
import pytest

from voltbus.schemas.rollouts import RolloutConfig
from voltbus.schemas.spans import RewardReported
from voltbus.services.eventlog import Envelope
from voltbus.services.gateway import build_app
from voltbus.services.projector.follow import ends_at, project
from voltbus.services.projector.projector import Projector
from voltbus.services.settings import GatewaySettings, NatsSettings, RunnerSettings, Settings
from voltbus.store import Store, connect

from ..gateway.stub_llm import PROMPT_IDS, StubControl, serve, stub_app
from .test_runner import run_until_done

AGENTS = "tests.services.runner.al10_agents"
GSM8K_MAP = {"QUESTION": "input.question", "ANSWER": "input.answer"}
"""``agentlightning.local.env_map`` of AL 1.0's ``examples/gsm8k/train_gsm8k_agent.py``."""


@asynccontextmanager
async def system(nats: NatsSettings, **runner: Any) -> AsyncIterator[tuple[Store, Settings]]:
    """A store (no resources published: AL 1.0 agents use none), the stub engine (it answers "42"), a gateway
    with per-rollout keys, and the settings of an isolated runner pointed at it."""
    async with AsyncExitStack() as stack:
        store = await connect(settings=nats)
        stack.push_async_callback(store.close)
        engine = await stack.enter_async_context(serve(stub_app(StubControl())))
        gw = GatewaySettings(upstream_url=f"{engine}/v1", key_secret="per-rollout-secret", model_name="policy")
        gateway = await stack.enter_async_context(serve(build_app(Settings(nats=nats, gateway=gw)), "on"))
        cfg = {"isolate": True, "gateway_url": gateway, "claim_wait_s": 0.2, "heartbeat_s": 0.2, **runner}
        yield store, Settings(nats=nats, gateway=gw, runner=RunnerSettings(**cfg))


async def sql(store: Store, path: Path, query: str) -> list[tuple[Any, ...]]:
    """``query``'s rows on a projection of everything the log holds now."""
    projector = Projector(path)
    await project(projector, store.log, ends=await ends_at(store.log))
    projector.close()
    with duckdb.connect(str(path), read_only=True) as con:
        return con.execute(query).fetchall()


async def test_an_agent_lightning_1_0_class_agent_with_env_map_runs_unchanged(
    nats_settings: NatsSettings, tmp_path: Path
) -> None:
    """gsm8k's ChatAgent, unchanged: QUESTION and ANSWER come from ``env_map``; each rollout's one model call is
    recorded with its token ids on its own attempt, with the reward the agent posted."""
    tasks = [{"question": "6*7", "answer": "42"}, {"question": "6*8", "answer": "48"}]
    async with system(nats_settings) as (store, settings):
        config = RolloutConfig(timeout_seconds=60, env_map=GSM8K_MAP)
        rollouts = [await store.enqueue_rollout(t, mode="train", config=config) for t in tasks]
        done = await run_until_done(settings, f"{AGENTS}.ChatAgent", store, [r.rollout_id for r in rollouts], 90)
        rows = await sql(
            store,
            tmp_path / "p.duckdb",
            """SELECT m.rollout_id, m.attempt_id, m.prompt_ids, m.response_ids, m.logprobs, r.value
               FROM model_calls AS m JOIN rewards AS r USING (rollout_id, attempt_id) ORDER BY m.rollout_id""",
        )
    assert [d.status for d in done] == ["succeeded", "succeeded"], [d.attempt.error for d in done]
    attempts = {d.rollout_id: d.attempt.attempt_id for d in done}
    expected = sorted((r.rollout_id, attempts[r.rollout_id], 1.0 if t["answer"] == "42" else 0.0) for r, t in
                      zip(rollouts, tasks, strict=True))  # fmt: skip
    assert [(r[0], r[1], r[5]) for r in rows] == expected
    assert all(r[2] == PROMPT_IDS and r[3] == [52, 50] and r[4] == [-0.125, -0.25] for r in rows)


async def test_a_sync_class_and_a_plain_function_of_the_task_run_too(nats_settings: NatsSettings) -> None:
    """``def run(self)`` (its task whole, as JSON, through ``env_map`` ``input``) and ``def agent(task)``."""
    async with system(nats_settings) as (store, settings):
        whole = RolloutConfig(env_map={"TASK": "input"})
        sync = await store.enqueue_rollout({"question": "6*7", "answer": 42}, mode="val", config=whole)
        [sync_done] = await run_until_done(settings, f"{AGENTS}:SyncAgent", store, [sync.rollout_id], 90)
        plain = await store.enqueue_rollout({"question": "6*7", "answer": 42}, mode="train")
        [plain_done] = await run_until_done(settings, f"{AGENTS}:agent", store, [plain.rollout_id], 90)
        rewards = await rewards_of(store)
    assert (sync_done.status, plain_done.status) == ("succeeded", "succeeded"), plain_done.attempt.error
    assert rewards == {sync.rollout_id: [1.0], plain.rollout_id: [1.0]}


async def rewards_of(store: Store) -> dict[str, list[float | None]]:
    """Every reward on the log, by rollout."""
    out: dict[str, list[float | None]] = {}
    async for item in store.log.telemetry():
        if isinstance(item, Envelope) and isinstance(item.event, RewardReported):
            out.setdefault(item.event.rollout_id, []).append(item.event.value)
    return out


async def test_what_fails_fails_the_attempt_with_the_reason(nats_settings: NatsSettings) -> None:
    """A ``run`` that raises, an ``env_map`` field the task lacks (AL: "path not found"), and the runner's own
    ``env_map`` under the rollout's (the rollout's wins)."""
    async with system(nats_settings, env_map={"QUESTION": "input.nope", "ANSWER": "input.answer"}) as (store, settings):
        raising = await store.enqueue_rollout({"question": "q", "answer": "1"}, config=RolloutConfig(env_map=GSM8K_MAP))
        missing = await store.enqueue_rollout({"question": "q", "answer": "1"})  # the runner's map: no input.nope
        ids = [raising.rollout_id, missing.rollout_id]
        raised, lacking = await run_until_done(settings, f"{AGENTS}.FailingAgent", store, ids, 90)
    assert raised.status == "failed" and raised.attempt.error["type"] == "RuntimeError"
    assert raised.attempt.error["message"] == "no answer for q"  # QUESTION came from the rollout's map
    assert lacking.status == "failed" and lacking.attempt.error["type"] == "EnvMapError"
    assert lacking.attempt.error["message"] == "env_map path not found: input.nope"


@pytest.mark.parametrize("agents", ["host", "in-process"])
async def test_a_runner_that_is_not_isolated_refuses_env_map_and_agent_classes(
    nats_settings: NatsSettings, agents: str
) -> None:
    """Variables per rollout need a process per rollout: such rollouts fail with the reason, never run without."""
    async with system(nats_settings, isolate=False, agents=agents) as (store, settings):
        mapped = await store.enqueue_rollout({"question": "q"}, config=RolloutConfig(env_map=GSM8K_MAP))
        plain = await store.enqueue_rollout({"question": "q"})
        ids = [mapped.rollout_id, plain.rollout_id]
        with_map, without = await run_until_done(settings, f"{AGENTS}:ChatAgent", store, ids, 90)
    assert with_map.status == "failed" and with_map.attempt.error["type"] == "EnvMapError"
    assert "only an isolated runner (voltbus runner --isolate)" in with_map.attempt.error["message"]
    assert without.status == "failed" and without.attempt.error["type"] == "NotIsolated"
    assert "ChatAgent is an Agent Lightning 1.0 agent class" in without.attempt.error["message"]


def test_a_runner_with_env_map_that_is_not_isolated_does_not_start() -> None:
    """``runner.env_map`` without ``--isolate``: one line and exit code 1, before the bus is asked anything."""
    env = {**os.environ, "VOLTBUS_RUNNER__ENV_MAP": '{"QUESTION": "input.question"}'}
    command = [sys.executable, "-c", "from voltbus.cli import main; main()", "runner", "--agent", f"{AGENTS}:ChatAgent"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, env=env)
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr.splitlines() == [
        "voltbus: error: runner.env_map sets variables per rollout: it needs isolated agents (--isolate)"
    ]
