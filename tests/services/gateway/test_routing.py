"""Several engines behind one gateway: sticky routing by rollout, failover on 503, health, all engines down."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from voltbus.services.eventlog import EventLog
from voltbus.services.gateway import build_app
from voltbus.services.settings import GatewaySettings, NatsSettings, Settings
from voltbus.store import Store

from ...conftest import wait_for
from .conftest import model_calls
from .stub_llm import StubControl, free_port, serve, stub_app


@dataclass
class Pair:
    """A gateway in front of two stub engines."""

    url: str
    engines: list[str]
    """The engines' base URLs (with ``/v1``), as the gateway names them."""
    controls: list[StubControl]

    def served_by(self, tag: str) -> set[int]:
        """Which engines received a call whose message content is ``tag``."""
        return {n for n, c in enumerate(self.controls) for body in c.received if body["messages"][0]["content"] == tag}


@pytest.fixture
async def make_pair(nats_settings: NatsSettings) -> AsyncIterator[Callable[..., Awaitable[Pair]]]:
    """Start two stub engines (or take dead URLs) and a gateway over both, with settings overridden."""
    async with AsyncExitStack() as stack:

        async def make(dead: bool = False, **gateway: Any) -> Pair:
            controls = [StubControl(), StubControl()]
            if dead:
                engines = [f"http://127.0.0.1:{free_port()}/v1" for _ in controls]
            else:
                engines = [f"{await stack.enter_async_context(serve(stub_app(c)))}/v1" for c in controls]
            cfg = GatewaySettings(upstream_urls=engines, **{"retry_backoff_s": 0.01, **gateway})
            url = await stack.enter_async_context(serve(build_app(Settings(nats=nats_settings, gateway=cfg)), "on"))
            return Pair(url, engines, controls)

        yield make


async def chat(http: httpx.AsyncClient, rid: str, aid: str, tag: str, stream: bool = False) -> httpx.Response:
    """One chat call attributed to a rollout (AL 1.0 route), its message content the tag."""
    path = f"/proxy/rollout/{rid}/attempt/{aid}/mode/train/openai/v1/chat/completions"
    body = {"model": "stub", "messages": [{"role": "user", "content": tag}], "stream": stream}
    return await http.post(path, json=body)


async def test_sticky_routing_by_rollout_and_round_robin_otherwise(
    make_pair: Callable[..., Awaitable[Pair]], store: Store, eventlog: EventLog
) -> None:
    pair = await make_pair()
    rollouts = [await store.start_rollout({"n": n}, mode="train") for n in range(16)]
    async with httpx.AsyncClient(base_url=pair.url) as http:
        for r in rollouts:
            for n in range(4):
                resp = await chat(http, r.rollout_id, r.attempt.attempt_id, r.rollout_id, stream=n == 3)
                assert resp.status_code == 200
        for _ in range(4):
            body = {"model": "stub", "messages": [{"role": "user", "content": "anon"}]}
            assert (await http.post("/v1/chat/completions", json=body)).status_code == 200
    owner = {r.rollout_id: pair.served_by(r.rollout_id) for r in rollouts}
    assert all(len(engines) == 1 for engines in owner.values()), owner  # every call of a rollout: one engine
    assert set().union(*owner.values()) == {0, 1}  # rollouts spread over both engines
    anon = [sum(b["messages"][0]["content"] == "anon" for b in c.received) for c in pair.controls]
    assert anon == [2, 2]  # unattributed: round robin
    calls = await model_calls(eventlog, 16 * 4 + 4)
    for call in calls:
        if call.rollout_id in owner:
            assert call.upstream == pair.engines[next(iter(owner[call.rollout_id]))]
            assert call.retries == 0 and call.status == "ok"


@pytest.mark.parametrize("stream", [False, True])
async def test_a_503_is_retried_on_the_other_engine(
    make_pair: Callable[..., Awaitable[Pair]], store: Store, eventlog: EventLog, stream: bool
) -> None:
    pair = await make_pair(engine_cooldown_s=0.5)
    r = await store.start_rollout({}, mode="train")
    rid, aid = r.rollout_id, r.attempt.attempt_id
    async with httpx.AsyncClient(base_url=pair.url) as http:
        assert (await chat(http, rid, aid, "first")).status_code == 200
        [home] = pair.served_by("first")
        other = 1 - home
        pair.controls[home].fail_status = 503
        resp = await chat(http, rid, aid, "failover", stream=stream)
        assert resp.status_code == 200
        if stream:
            assert '"content": "4"' in resp.text and resp.text.endswith("data: [DONE]\n\n")
        else:
            assert resp.json()["choices"][0]["message"]["content"] == "42"
        assert pair.served_by("failover") == {0, 1}  # tried at home (503), then served by the other
        health = (await http.get("/healthz")).json()
        assert health["status"] == "ok" and health["engines_up"] == 1
        assert [e["state"] for e in health["engines"]] == ["down" if n == home else "up" for n in (0, 1)]
        assert health["engines"][home]["last_error"] == "HTTP 503" and health["engines"][home]["failures"] == 1
        assert (await chat(http, rid, aid, "while-down")).status_code == 200
        assert pair.served_by("while-down") == {other}  # a down engine is skipped, not tried first
        pair.controls[home].fail_status = None

        async def home_up() -> bool:
            return (await http.get("/healthz")).json()["engines"][home]["state"] == "up"

        await wait_for(home_up, 5, "the cool-down to end", every=0.05)  # then the rollout goes home again
        assert (await chat(http, rid, aid, "back")).status_code == 200
        assert pair.served_by("back") == {home}
    first, failover, while_down, back = await model_calls(eventlog, 4)
    assert (failover.status, failover.retries, failover.upstream) == ("ok", 1, pair.engines[other])
    assert failover.streamed is stream and failover.response_ids == [52, 50]
    assert (while_down.retries, while_down.upstream) == (0, pair.engines[other])
    assert (back.retries, back.upstream, first.upstream) == (0, pair.engines[home], pair.engines[home])


@pytest.mark.parametrize("stream", [False, True])
async def test_all_engines_failing_is_a_clear_502_and_an_error_event(
    make_pair: Callable[..., Awaitable[Pair]], store: Store, eventlog: EventLog, stream: bool
) -> None:
    pair = await make_pair()
    for c in pair.controls:
        c.fail_status = 503
    r = await store.start_rollout({}, mode="train")
    async with httpx.AsyncClient(base_url=pair.url) as http:
        resp = await chat(http, r.rollout_id, r.attempt.attempt_id, "doomed", stream=stream)
        health = (await http.get("/healthz")).json()
    assert resp.status_code == 502
    error = resp.json()["error"]
    assert error["type"] == "upstream_error" and error["upstream_status"] == 503
    assert sorted(error["engines_tried"]) == sorted(pair.engines) and error["retries"] == 1
    assert all(e in error["message"] for e in pair.engines)
    assert health["status"] == "degraded" and health["engines_up"] == 0
    [call] = await model_calls(eventlog, 1)
    assert call.status == "error" and call.http_status == 503 and call.retries == 1
    assert call.error and call.error.type == "UpstreamError" and all(e in call.error.message for e in pair.engines)


async def test_all_engines_unreachable(
    make_pair: Callable[..., Awaitable[Pair]], store: Store, eventlog: EventLog
) -> None:
    pair = await make_pair(dead=True, retries=3)
    r = await store.start_rollout({}, mode="train")
    async with httpx.AsyncClient(base_url=pair.url) as http:
        resp = await chat(http, r.rollout_id, r.attempt.attempt_id, "nowhere")
        models = await http.get("/v1/models")
    assert resp.status_code == 502 and resp.json()["error"]["type"] == "upstream_unreachable"
    assert sorted(resp.json()["error"]["engines_tried"]) == sorted(pair.engines)
    assert models.status_code == 502
    [call] = await model_calls(eventlog, 1)
    assert call.status == "error" and call.retries == 3 and call.error and call.error.type == "UpstreamUnreachable"


async def test_active_health_checks_mark_a_dead_engine_down(
    make_pair: Callable[..., Awaitable[Pair]], nats_settings: NatsSettings
) -> None:
    async with AsyncExitStack() as stack:
        live = f"{await stack.enter_async_context(serve(stub_app(StubControl())))}/v1"
        dead = f"http://127.0.0.1:{free_port()}/v1"
        cfg = GatewaySettings(upstream_urls=[live, dead], health_check_s=0.05)
        url = await stack.enter_async_context(serve(build_app(Settings(nats=nats_settings, gateway=cfg)), "on"))
        async with httpx.AsyncClient(base_url=url) as http:
            health: dict[str, Any] = {}

            async def one_up() -> bool:
                nonlocal health
                health = (await http.get("/healthz")).json()
                return health["engines_up"] == 1

            await wait_for(one_up, 5, "the probe to mark the dead engine down", every=0.05)
    assert [e["state"] for e in health["engines"]] == ["up", "down"]
    assert "transport" in health["engines"][1]["last_error"]


def test_one_engine_by_default() -> None:
    assert GatewaySettings().engines == [GatewaySettings().upstream_url]
    assert GatewaySettings(upstream_urls=["http://a/v1", "http://b/v1"]).engines == ["http://a/v1", "http://b/v1"]
