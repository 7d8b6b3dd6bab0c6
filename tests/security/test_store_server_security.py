"""Attacks on ``voltbus store-server``: Agent Lightning's store API lets its caller enqueue, claim, end and update
every rollout, so with a token set nothing but ``/v1/agl/health`` answers without it (a bearer header, or HTTP Basic
with the token as password: Agent Lightning's client sends that for ``http://agl:<token>@host``); web pages cannot
reach it (Host, Origin, no form bodies); with no token it refuses to listen beyond loopback; bodies are bounded."""

from __future__ import annotations

import asyncio
import base64
import gzip
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from voltbus.services.httpguard import Exposed
from voltbus.services.settings import NatsSettings, Settings, StoreServerSettings
from voltbus.services.storeserver.app import not_implemented, routes, run

from ..services.storeserver.conftest import AGL, store_server

TOKEN = "st0re-t0ken"


@pytest.fixture
async def guarded(nats_settings: NatsSettings, tmp_path: Path) -> AsyncIterator[str]:
    """A store server with a token and a small body limit."""
    async with store_server(nats_settings, tmp_path / "p.duckdb", token=TOKEN, max_body_bytes=64 * 1024) as running:
        yield running.url


def basic(password: str, user: str = "agl") -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


async def test_without_the_token_only_health_answers(guarded: str) -> None:
    async with httpx.AsyncClient(base_url=guarded, timeout=30) as http:
        assert (await http.get(AGL + "/health")).json() == {"status": "ok"}
        enqueue = {"rollouts": [{"input": 1}]}
        for headers in ({}, {"Authorization": "Bearer wrong"}, basic("wrong"), {"Authorization": f"Token {TOKEN}"}):
            for method, path, body in [
                ("POST", "/queues/rollouts/enqueue", enqueue),
                ("POST", "/queues/rollouts/dequeue", {}),
                ("GET", "/rollouts", None),
                ("POST", "/resources", {}),
                ("GET", "/statistics", None),
            ]:
                refused = await http.request(method, AGL + path, json=body, headers=headers)
                assert refused.status_code == 401, (path, headers)
                assert refused.json()["code"] == "unauthorized"
            traces = await http.post(
                "/v1/traces", content=b"", headers={"content-type": "application/x-protobuf", **headers}
            )
            assert traces.status_code == 401
        assert (await http.get(AGL + "/statistics", headers={"Authorization": f"Bearer {TOKEN}"})).status_code == 200
        # Agent Lightning's client puts the token in the URL (http://agl:<token>@host): aiohttp sends HTTP Basic
        assert (
            await http.post(AGL + "/queues/rollouts/enqueue", json=enqueue, headers=basic(TOKEN))
        ).status_code == 201
        assert (await http.get(AGL + "/rollouts", headers=basic(TOKEN, user=""))).json()["total"] == 1


async def test_web_pages_cannot_reach_it(guarded: str) -> None:
    auth = {"Authorization": f"Bearer {TOKEN}"}
    async with httpx.AsyncClient(base_url=guarded, timeout=30, headers=auth) as http:
        foreign = await http.get(AGL + "/rollouts", headers={"Origin": "http://evil.example"})
        assert foreign.status_code == 403 and foreign.json()["code"] == "origin"
        rebinding = await http.get(AGL + "/rollouts", headers={"Host": "evil.example"})
        assert rebinding.status_code == 400  # DNS rebinding: a name that is not this machine
        for kind in ("application/x-www-form-urlencoded", "text/plain", "multipart/form-data; boundary=x"):
            form = await http.post(
                AGL + "/queues/rollouts/enqueue", content=b"rollouts=1", headers={"content-type": kind}
            )
            assert form.status_code == 415, kind
        protobuf_elsewhere = await http.post(
            AGL + "/spans", content=b"\x0a\x00", headers={"content-type": "application/x-protobuf"}
        )
        assert protobuf_elsewhere.status_code == 415


async def test_bodies_are_bounded(guarded: str) -> None:
    auth = {"Authorization": f"Bearer {TOKEN}"}
    async with httpx.AsyncClient(base_url=guarded, timeout=30, headers=auth) as http:
        big = await http.post(AGL + "/queues/rollouts/enqueue", json={"rollouts": [{"input": "x" * 70_000}]})
        assert big.status_code == 413
        bomb = gzip.compress(b"\0" * (16 * 1024 * 1024))
        headers = {"content-type": "application/x-protobuf", "content-encoding": "gzip"}
        assert (await http.post("/v1/traces", content=bomb, headers=headers)).status_code == 413
        odd = await http.post("/v1/traces", content=b"x", headers={**headers, "content-encoding": "br"})
        assert odd.status_code == 415
        deep = b'{"resourceSpans": ' + b"[" * 20_000 + b"]" * 20_000 + b"}"
        nested = await http.post("/v1/traces", content=deep, headers={"content-type": "application/json"})
        assert nested.status_code == 400  # refused, never a 500 or a crash


async def test_no_token_no_listening_beyond_loopback() -> None:
    settings = Settings(store_server=StoreServerSettings(host="0.0.0.0", port=0))
    with pytest.raises(Exposed, match="VOLTBUS_STORE_SERVER__TOKEN"):
        await asyncio.wait_for(run(settings), 10)


GARBAGE = [b"", b"null", b"[]", b'"x"', b"1", b"{}", b'{"a":', b"\xff\xfe", b'{"rollouts": 5, "limit": "x"}']
GARBAGE += [b"[" * 5000, b'{"input": {"k": 1e999}, "rollout_ids": [1], "rollout_id": 7}']
ODD_QUERIES = {"limit": "abc", "offset": "-4", "sort_order": "sideways", "status_in": "zzz", "filter_logic": "xor"}


async def test_no_malformed_request_gets_a_500(guarded: str) -> None:
    """Every route, fed malformed bodies and query strings, answers 2xx or a 4xx that says why: never a 500."""
    auth = {"Authorization": f"Bearer {TOKEN}", "content-type": "application/json"}
    async with httpx.AsyncClient(base_url=guarded, timeout=30, headers=auth) as http:
        for route in routes():
            if route.endpoint is not_implemented:  # OTLP metrics and logs: 501 on purpose
                continue
            path = route.path.replace("{rollout_id}", "ro-x").replace("{attempt_id}", "at-x")
            path = path.replace("{worker_id}", "w-x").replace("{resources_id}", "rs-x")
            for method in route.methods or ():
                if method == "HEAD":
                    continue
                if method == "GET":
                    answered = await http.get(path, params=ODD_QUERIES)
                    assert answered.status_code < 500, (path, answered.text)
                    continue
                for body in GARBAGE:
                    answered = await http.post(path, content=body)
                    assert answered.status_code < 500, (path, body[:20], answered.text)
                    if answered.status_code >= 400:
                        assert answered.json()["detail"], (path, body[:20])
