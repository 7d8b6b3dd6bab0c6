"""Gateway security: keys revoked with their attempt, admin keys apart from agent keys, no secret in
events or logs, HTTPS. Every refusal is checked against a real gateway on a real bus."""

from __future__ import annotations

import asyncio
import logging
import re
import ssl
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from tests.conftest import running, wait_for
from tests.security.certs import self_signed
from tests.services.gateway import conftest as gateway_fixtures
from tests.services.gateway.conftest import GatewayFactory, model_calls
from voltbus.schemas import RolloutConfig
from voltbus.services.eventlog import EventLog
from voltbus.services.gateway import app as gateway_app
from voltbus.services.keys import rollout_key
from voltbus.services.serving import free_port, serving
from voltbus.services.settings import GatewaySettings, NatsSettings, Settings
from voltbus.store import Store

make_gateway, store = gateway_fixtures.make_gateway, gateway_fixtures.store  # the gateway tests' fixtures
SECRET = "rollout-key-secret"
CALL = {"model": "stub", "messages": [{"role": "user", "content": "2+40"}]}
REWARD = {"event_type": "reward", "data": {"value": 1.0}}


def chat(rid: str, aid: str) -> str:
    return f"/proxy/rollout/{rid}/attempt/{aid}/mode/train/openai/v1/chat/completions"


def events(rid: str, aid: str) -> str:
    return f"/api/rollouts/{rid}/attempt/{aid}/events"


async def refused_once_ended(http: httpx.AsyncClient, path: str, body: dict, key: str) -> httpx.Response:
    """The answer once the gateway has seen the attempt end (it follows the log: wait, bounded)."""

    async def refused() -> httpx.Response | None:
        answer = await http.post(path, json=body, headers={"Authorization": f"Bearer {key}"})
        return answer if answer.status_code != 200 else None

    return await wait_for(refused, 5, f"the gateway to refuse {path}", every=0.02)


async def test_a_rollout_key_stops_working_when_its_attempt_succeeds(
    make_gateway: GatewayFactory, store: Store
) -> None:
    g = await make_gateway(key_secret=SECRET)
    key = rollout_key(SECRET, g.rid)
    async with httpx.AsyncClient(base_url=g.url, headers={"Authorization": f"Bearer {key}"}) as http:
        assert (await http.post(chat(g.rid, g.aid), json=CALL)).status_code == 200
        assert (await http.post(events(g.rid, g.aid), json=REWARD)).status_code == 200
        await store.finish_attempt(g.rid, g.aid)
        late = await refused_once_ended(http, chat(g.rid, g.aid), CALL, key)
        forwarded = len(g.engine.received)  # calls in the moment between the end and the gateway seeing it pass
        assert late.status_code == 403
        error = late.json()["error"]
        assert error["type"] == "attempt_ended" and "succeeded" in error["message"] and "revoked" in error["message"]
        assert (await http.post(events(g.rid, g.aid), json=REWARD)).status_code == 403
        by_header = {"X-Voltbus-Rollout-Id": g.rid}
        assert (await http.post("/v1/chat/completions", json=CALL, headers=by_header)).status_code == 403
    assert len(g.engine.received) == forwarded  # refused calls never reached the engine


async def test_a_timed_out_attempts_straggler_is_refused_while_its_retry_works(
    make_gateway: GatewayFactory, store: Store, eventlog: EventLog
) -> None:
    g = await make_gateway(key_secret=SECRET)
    config = RolloutConfig(max_attempts=2, retry_condition=["timeout"])
    queued = await store.enqueue_rollout({"question": "1+1"}, mode="train", config=config)
    first = await store.dequeue_rollout()
    assert first is not None and first.rollout_id == queued.rollout_id
    rid, old = first.rollout_id, first.attempt.attempt_id
    key = rollout_key(SECRET, rid)
    async with httpx.AsyncClient(base_url=g.url, headers={"Authorization": f"Bearer {key}"}) as http:
        assert (await http.post(chat(rid, old), json=CALL)).status_code == 200
        await store.expire_attempt(rid, old, "timeout")
        straggler = await refused_once_ended(http, chat(rid, old), CALL, key)
        assert straggler.status_code == 403 and "timeout" in straggler.json()["error"]["message"]
        retry = await store.dequeue_rollout()
        assert retry is not None and retry.attempt.attempt_id != old
        assert (await http.post(chat(rid, retry.attempt.attempt_id), json=CALL)).status_code == 200
        assert (await http.post(events(rid, old), json=REWARD)).status_code == 403
    calls = await model_calls(eventlog, len(g.engine.received))  # every forwarded call, and only those
    assert {c.attempt_id for c in calls} == {old, retry.attempt.attempt_id}


async def test_a_cancelled_rollout_revokes_its_running_attempt(make_gateway: GatewayFactory, store: Store) -> None:
    g = await make_gateway(key_secret=SECRET)
    key = rollout_key(SECRET, g.rid)
    async with httpx.AsyncClient(base_url=g.url) as http:
        ok = await http.post(chat(g.rid, g.aid), json=CALL, headers={"Authorization": f"Bearer {key}"})
        assert ok.status_code == 200
        await store.cancel_rollout(g.rid, "operator")
        late = await refused_once_ended(http, chat(g.rid, g.aid), CALL, key)
        assert late.status_code == 403 and "cancelled" in late.json()["error"]["message"]


async def test_admin_routes_tell_a_missing_key_from_an_agent_key(make_gateway: GatewayFactory) -> None:
    g = await make_gateway(key_secret=SECRET, agent_key="shared", admin_key="root")
    async with httpx.AsyncClient(base_url=g.url) as http:

        async def status(method: str, path: str, key: str | None) -> int:
            headers = {"Authorization": f"Bearer {key}"} if key else {}
            return (await http.request(method, path, json={}, headers=headers)).status_code

        for method, path in (("POST", "/admin/pause"), ("GET", "/proxy/state"), ("POST", "/proxy/resume")):
            assert await status(method, path, None) == 401
            assert await status(method, path, "guessed") == 401
            assert await status(method, path, "shared") == 403
            assert await status(method, path, rollout_key(SECRET, g.rid)) == 403
        assert (await http.get("/healthz")).json()["paused"] is False  # no refused pause took effect
        assert await status("POST", "/admin/pause", "root") == 200
        assert await status("GET", "/admin/inflight", "root") == 200
        assert await status("POST", "/admin/resume", "root") == 200


async def test_admin_routes_are_closed_when_agents_have_keys_but_no_admin_key_is_set(
    make_gateway: GatewayFactory,
) -> None:
    g = await make_gateway(key_secret=SECRET)
    async with httpx.AsyncClient(base_url=g.url) as http:
        own = {"Authorization": f"Bearer {rollout_key(SECRET, g.rid)}"}
        refused = await http.post("/admin/pause", json={}, headers=own)
        assert refused.status_code == 403 and "admin_key" in refused.json()["error"]["message"]
        assert (await http.get("/healthz")).json()["paused"] is False


def header_engine(seen: list[dict[str, str]]) -> Starlette:
    """An engine that keeps the headers of every call and answers one fixed completion."""

    async def completions(request: Request) -> JSONResponse:
        seen.append(dict(request.headers))
        message = {"role": "assistant", "content": "42"}
        return JSONResponse({"id": "c", "model": "m", "choices": [{"index": 0, "message": message}]})

    return Starlette(routes=[Route("/v1/chat/completions", completions, methods=["POST"])])


async def test_no_key_reaches_an_event_a_log_line_or_the_engine(
    make_gateway: GatewayFactory, eventlog: EventLog, caplog: pytest.LogCaptureFixture
) -> None:
    seen: list[dict[str, str]] = []
    async with serving(header_engine(seen), free_port()) as engine:
        g = await make_gateway(upstream=f"{engine}/v1", key_secret=SECRET, upstream_api_key="engine-secret-123")
        agent_key = rollout_key(SECRET, g.rid)
        caplog.set_level(logging.DEBUG)
        async with httpx.AsyncClient(base_url=g.url) as http:
            headers = {"Authorization": f"Bearer {agent_key}", "x-api-key": agent_key}
            assert (await http.post(chat(g.rid, g.aid), json=CALL, headers=headers)).status_code == 200
            wrong = await http.post(chat(g.rid, g.aid), json=CALL, headers={"Authorization": "Bearer wrong-key-456"})
            assert wrong.status_code == 401 and "wrong-key-456" not in wrong.text
        [call] = await model_calls(eventlog, 1)
    recorded = bytes(call.request) + bytes(call.response)
    assert b'"2+40"' in recorded  # the request is recorded ...
    for secret in (agent_key, "engine-secret-123", "wrong-key-456", SECRET):
        assert secret.encode() not in recorded  # ... without any key
        assert secret not in caplog.text
    assert "gateway/call" in caplog.text  # the call was logged
    assert seen[0]["authorization"] == "Bearer engine-secret-123"  # the engine gets its own key only
    assert agent_key not in str(seen)


def test_every_key_comparison_is_constant_time() -> None:
    """Keys are compared with hmac.compare_digest only: no ``==`` on a key in the gateway's code."""
    root = Path(__file__).parents[2] / "services"
    sources = [*sorted((root / "gateway").glob("*.py")), root / "keys.py"]
    plain = re.compile(r"\bkey\w*\s*[!=]=|[!=]=\s*\w*key\b", re.IGNORECASE)
    offenders = [
        f"{p.name}: {line.strip()}"
        for p in sources
        for line in p.read_text().splitlines()
        if plain.search(line) and not line.lstrip().startswith(">>>")
    ]
    assert offenders == []
    assert "hmac.compare_digest" in (root / "gateway" / "auth.py").read_text()


async def test_the_gateway_serves_https_with_its_certificate(nats_settings: NatsSettings, tmp_path: Path) -> None:
    cert, key = self_signed(tmp_path)
    port = free_port()
    cfg = GatewaySettings(port=port, tls_cert=cert, tls_key=key, upstream_url="http://127.0.0.1:9/v1")
    async with running(gateway_app.run, Settings(nats=nats_settings, gateway=cfg), within=10):
        trusted = ssl.create_default_context(cafile=str(cert))
        async with httpx.AsyncClient(verify=trusted) as http:
            health: dict[str, Any] = (await http.get(f"https://127.0.0.1:{port}/healthz")).json()
            assert "paused" in health
        async with httpx.AsyncClient() as http:  # plain HTTP, or a client that does not trust it, gets nothing
            with pytest.raises(httpx.TransportError):
                await http.get(f"http://127.0.0.1:{port}/healthz")
            with pytest.raises(httpx.ConnectError):
                await http.get(f"https://127.0.0.1:{port}/healthz")


def test_tls_needs_both_the_certificate_and_its_key(tmp_path: Path) -> None:
    cfg = GatewaySettings(port=free_port(), tls_cert=tmp_path / "gw.pem")
    with pytest.raises(Exception, match="tls_cert and tls_key"):
        asyncio.run(gateway_app.run(Settings(gateway=cfg)))
