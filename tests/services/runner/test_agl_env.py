"""An Agent Lightning 1.0-style agent, using only AGL_OPENAI_BASE_URL / AGL_EVENT_URL / AGL_KEY, runs
unchanged: an isolated runner gives each rollout's process those variables pointing at the gateway."""

from __future__ import annotations

from contextlib import AsyncExitStack

import pytest

from voltbus.schemas.spans import ModelCalled, RewardReported
from voltbus.services.eventlog import Envelope
from voltbus.services.gateway import build_app
from voltbus.services.settings import GatewaySettings, NatsSettings, RunnerSettings, Settings
from voltbus.store import Store, connect

from ..gateway.stub_llm import StubControl, serve, stub_app
from .test_runner import AGENTS, run_until_done


@pytest.mark.parametrize("key_secret", [None, "per-rollout-secret"], ids=["open", "rollout-keys"])
async def test_agent_lightning_1_0_agent_runs_through_the_gateway(
    store: Store, nats_settings: NatsSettings, key_secret: str | None
) -> None:
    """With per-rollout keys on, the gateway accepts only the rollout's own key: the runner hands it over."""
    async with AsyncExitStack() as stack:
        engine = await stack.enter_async_context(serve(stub_app(StubControl())))
        gateway_settings = GatewaySettings(upstream_url=f"{engine}/v1", key_secret=key_secret)
        gateway = await stack.enter_async_context(
            serve(build_app(Settings(nats=nats_settings, gateway=gateway_settings)), "on")
        )
        rollout = await store.enqueue_rollout({"question": "6*7", "answer": 42}, mode="train")  # the stub says 42
        settings = Settings(
            nats=nats_settings,
            gateway=gateway_settings,
            runner=RunnerSettings(isolate=True, gateway_url=gateway, claim_wait_s=0.2, heartbeat_s=0.2),
        )
        [done] = await run_until_done(settings, f"{AGENTS}:agl_env_agent", store, [rollout.rollout_id], timeout=60)
    assert done.status == "succeeded", done.attempt.error
    events = [e.event async for e in store.log.telemetry() if isinstance(e, Envelope)]
    calls = [e for e in events if isinstance(e, ModelCalled)]
    rewards = [e for e in events if isinstance(e, RewardReported)]
    assert [(c.rollout_id, c.attempt_id) for c in calls] == [(rollout.rollout_id, done.attempt.attempt_id)]
    assert calls[0].response_ids and calls[0].status == "ok"
    assert [(r.attempt_id, r.value) for r in rewards] == [(done.attempt.attempt_id, 1.0)]


async def test_an_agent_lightning_1_0_agent_runs_where_no_resources_were_published(nats_settings: NatsSettings) -> None:
    """AL 1.0 agents use no resources: a rollout naming none runs with none (one pinned to a version the log
    does not have still fails with MissingResources)."""
    async with AsyncExitStack() as stack:
        store = await connect(settings=nats_settings)  # no resources published
        stack.push_async_callback(store.close)
        engine = await stack.enter_async_context(serve(stub_app(StubControl())))
        gateway_settings = GatewaySettings(upstream_url=f"{engine}/v1")
        gateway = await stack.enter_async_context(
            serve(build_app(Settings(nats=nats_settings, gateway=gateway_settings)), "on")
        )
        rollout = await store.enqueue_rollout({"question": "6*7", "answer": 42})
        pinned = await store.enqueue_rollout({"question": "1+1", "answer": 2}, resources_id="gone:1")
        settings = Settings(
            nats=nats_settings,
            gateway=gateway_settings,
            runner=RunnerSettings(isolate=True, gateway_url=gateway, claim_wait_s=0.2, heartbeat_s=0.2),
        )
        agent = f"{AGENTS}:agl_env_agent_without_resources"
        done, missing = await run_until_done(settings, agent, store, [rollout.rollout_id, pinned.rollout_id], 60)
        events = [e.event async for e in store.log.telemetry() if isinstance(e, Envelope)]
        rewards = [e for e in events if isinstance(e, RewardReported)]
    assert done.status == "succeeded", done.attempt.error
    assert [(r.rollout_id, r.value) for r in rewards] == [(rollout.rollout_id, 1.0)]
    assert missing.status == "failed" and missing.attempt.error["type"] == "MissingResources"
