"""Rewards and events, pause/drain/resume, keys, and a client that leaves mid-stream."""

from __future__ import annotations

import asyncio

import httpx
import openai

from voltbus.schemas import GatewayPaused, GatewayResumed, RewardReported, SpanRecorded
from voltbus.services.eventlog import Envelope, EventLog

from .conftest import GatewayFactory, Setup, model_calls
from .test_proxy import MESSAGES, al1_base

CALL = {"model": "stub", "messages": MESSAGES}


async def spans(eventlog: EventLog) -> list[object]:
    return [e.event async for e in eventlog.replay("spans")]  # type: ignore[union-attr]


async def test_al1_agent_with_only_the_agl_variables(make_gateway: GatewayFactory, eventlog: EventLog) -> None:
    g = await make_gateway(agent_key="agent-secret")
    env = {"AGL_OPENAI_BASE_URL": al1_base(g), "AGL_EVENT_URL": f"{g.url}/api/rollouts/{g.rid}/attempt/{g.aid}/events"}
    client = openai.AsyncOpenAI(base_url=env["AGL_OPENAI_BASE_URL"], api_key="agent-secret")
    await client.chat.completions.create(model="auto", messages=MESSAGES)
    auth = {"Authorization": "Bearer agent-secret"}
    async with httpx.AsyncClient(headers=auth) as http:
        reward = {"event_type": "reward", "data": {"value": 0.7, "source": "agent"}}
        resp = await http.post(env["AGL_EVENT_URL"], json=reward)
        assert resp.status_code == 200 and resp.json()["event_type"] == "reward"
        assert resp.json()["rollout_id"] == g.rid and resp.json()["data"]["value"] == 0.7
        flat = await http.post(env["AGL_EVENT_URL"], json={"type": "reward", "value": 1.0, "dimensions": {"f": 0.5}})
        assert flat.status_code == 200
        custom = await http.post(env["AGL_EVENT_URL"], json={"event_type": "tool_used", "data": {"tool": "calc"}})
        assert custom.status_code == 200
        again = await http.post(env["AGL_EVENT_URL"], json=reward, headers={"Idempotency-Key": "k1"})
        twice = await http.post(env["AGL_EVENT_URL"], json=reward, headers={"Idempotency-Key": "k1"})
        assert again.status_code == twice.status_code == 200
        unknown = await http.post(f"{g.url}/api/rollouts/nope/attempt/0/events", json=reward)
        assert unknown.status_code == 404
    await model_calls(eventlog, 1)
    events = await spans(eventlog)
    rewards = [e for e in events if isinstance(e, RewardReported)]
    assert [(r.value, r.dimensions) for r in rewards] == [(0.7, {}), (1.0, {"f": 0.5}), (0.7, {})]
    assert all((r.rollout_id, r.attempt_id) == (g.rid, g.aid) for r in rewards)
    [span] = [e for e in events if isinstance(e, SpanRecorded)]
    assert span.name == "agl.event.tool_used" and span.attributes["agl.data"] == '{"tool": "calc"}'


async def test_keys_are_required_when_configured(make_gateway: GatewayFactory) -> None:
    g = await make_gateway(agent_key="a", admin_key="root")
    async with httpx.AsyncClient(base_url=g.url) as http:
        assert (await http.post(f"{al1_base(g)}/chat/completions", json=CALL)).status_code == 401
        wrong = {"Authorization": "Bearer a"}
        assert (await http.post("/admin/pause", json={}, headers=wrong)).status_code == 403  # an agent key
        ok = await http.post(f"{al1_base(g)}/chat/completions", json=CALL, headers={"x-api-key": "a"})
        assert ok.status_code == 200
        assert (await http.post("/admin/pause", json={}, headers={"x-api-key": "root"})).status_code == 200
        assert (await http.get("/healthz")).json()["paused"] is True


async def test_pause_refuses_new_calls_lets_inflight_finish_then_resume(gateway: Setup, eventlog: EventLog) -> None:
    gateway.engine.hold = asyncio.Event()
    async with httpx.AsyncClient(base_url=gateway.url) as http:
        url = f"{al1_base(gateway)}/chat/completions"
        first = asyncio.create_task(http.post(url, json=CALL))
        await asyncio.wait_for(gateway.engine.entered.wait(), 5)
        paused = await http.post("/admin/pause", json={"retry_after_seconds": 3, "reason": "weight swap"})
        assert paused.json() == {"paused": True, "retry_after_seconds": 3, "reason": "weight swap", "inflight": 1}
        refused = await http.post(url, json=CALL)
        assert refused.status_code == 429
        assert refused.headers["Retry-After"] == "3" and refused.headers["X-Agl-Paused"] == "true"
        assert (await http.get("/admin/inflight", params={"wait_s": 0.05})).json()["drained"] is False
        gateway.engine.hold.set()
        assert (await first).status_code == 200
        drained = (await http.get("/proxy/state", params={"wait_s": 5})).json()
        assert drained["drained"] is True and drained["inflight"] == 0
        assert (await http.post("/proxy/resume")).json()["paused"] is False
        assert (await http.post(url, json=CALL)).status_code == 200
    assert len(gateway.engine.received) == 2
    await model_calls(eventlog, 2)
    stored = [e.event async for e in eventlog.replay("control") if isinstance(e, Envelope)]
    paused, resumed = [e for e in stored if isinstance(e, GatewayPaused | GatewayResumed)]
    assert isinstance(paused, GatewayPaused) and isinstance(resumed, GatewayResumed)
    assert (paused.reason, paused.retry_after_s, paused.inflight) == ("weight swap", 3, 1)
    assert paused.gateway_id == resumed.gateway_id and resumed.paused_s is not None and resumed.paused_s > 0


async def test_client_leaving_mid_stream_is_recorded_as_cancelled(gateway: Setup, eventlog: EventLog) -> None:
    gateway.engine.stream_gate = asyncio.Event()
    async with httpx.AsyncClient(base_url=gateway.url) as http:
        body = {**CALL, "stream": True}
        async with http.stream("POST", f"{al1_base(gateway)}/chat/completions", json=body) as resp:
            async for line in resp.aiter_lines():
                if line.startswith("data:"):
                    break  # the first chunk arrived; leave
    [call] = await model_calls(eventlog, 1)
    gateway.engine.stream_gate.set()
    assert call.status == "error" and call.error and call.error.type == "Cancelled"
    assert call.response_ids == [52]
    async with httpx.AsyncClient(base_url=gateway.url) as http:
        assert (await http.get("/admin/inflight")).json()["inflight"] == 0
