"""The engine client (aiohttp): timeouts from the settings, connections reused, a stream cut short
closes its connection, a stalled stream times out, and the engine's bytes reach agent and log unchanged."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx
import msgspec
import pytest

from voltbus.services.eventlog import EventLog
from voltbus.services.gateway.upstream import MAX_CONNECTIONS, Upstream, timeouts
from voltbus.services.settings import GatewaySettings

from .conftest import GatewayFactory, model_calls
from .stub_llm import StubControl, serve, stub_app
from .test_proxy import MESSAGES, al1_base

CALL = msgspec.json.encode({"model": "stub", "messages": MESSAGES})
STREAM = msgspec.json.encode({"model": "stub", "messages": MESSAGES, "stream": True})


def test_timeouts_map_the_settings() -> None:
    t = timeouts(GatewaySettings(timeout_s=42.0, connect_timeout_s=3.0))
    assert t.sock_read == 42.0  # between reads: the response head, and each chunk of a stream
    assert t.connect == 42.0  # waiting for a pooled connection, as httpx's pool timeout was
    assert t.sock_connect == 3.0  # opening a connection
    assert t.total is None  # a long stream that keeps sending is never cut


class Peers:
    """An ASGI wrapper that notes the client address (one per TCP connection) of every request."""

    def __init__(self, app: Any) -> None:
        self.app, self.seen = app, []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            self.seen.append(tuple(scope["client"]))
        await self.app(scope, receive, send)


@pytest.fixture
async def engine() -> AsyncIterator[tuple[Upstream, Peers, StubControl]]:
    control = StubControl()
    peers = Peers(stub_app(control))
    async with serve(peers) as url:
        settings = GatewaySettings(upstream_url=f"{url}/v1", timeout_s=5.0)
        async with Upstream.make_client(settings) as client:
            assert client.connector is not None and client.connector.limit == MAX_CONNECTIONS
            yield Upstream(settings, client), peers, control


async def test_connections_are_reused(engine: tuple[Upstream, Peers, StubControl]) -> None:
    upstream, peers, _ = engine
    for _ in range(5):
        assert (await upstream.call("chat/completions", CALL)).status == 200
    for _ in range(3):  # a stream read to its end gives its connection back too
        opened = await upstream.open_stream("chat/completions", STREAM)
        assert opened.stream is not None
        assert (await opened.stream.read()).endswith(b"data: [DONE]\n\n")
        opened.stream.release()
    assert (await upstream.get("models")).status == 200
    assert len(peers.seen) == 9 and len(set(peers.seen)) == 1


async def test_a_stream_cut_short_closes_its_connection(engine: tuple[Upstream, Peers, StubControl]) -> None:
    upstream, peers, control = engine
    control.stream_gate = asyncio.Event()
    opened = await upstream.open_stream("chat/completions", STREAM)
    assert opened.stream is not None
    assert (await opened.stream.content.readline()).startswith(b"data: ")
    opened.stream.close()  # what RecordedStream does when the agent leaves
    control.stream_gate.set()
    assert (await upstream.call("chat/completions", CALL)).status == 200
    assert len(peers.seen) == 2 and peers.seen[0] != peers.seen[1]  # not reused: that connection is gone


async def test_parsed_answers_keep_their_bytes(engine: tuple[Upstream, Peers, StubControl]) -> None:
    upstream, _, control = engine
    ok = await upstream.call("chat/completions", CALL)
    assert ok.raw is not None and msgspec.json.decode(ok.raw) == ok.body
    control.fail_status = 503
    failed = await upstream.call("chat/completions", CALL)
    assert failed.status == 503 and failed.body == {"error": {"message": "engine overloaded"}}


async def test_the_engines_bytes_reach_the_agent_and_the_log_unchanged(
    make_gateway: GatewayFactory, eventlog: EventLog
) -> None:
    g = await make_gateway()
    async with httpx.AsyncClient(base_url=al1_base(g)) as http:
        resp = await http.post("/chat/completions", json={"model": "stub", "messages": MESSAGES})
    assert resp.status_code == 200 and resp.headers["content-type"] == "application/json"
    [call] = await model_calls(eventlog, 1)
    assert bytes(call.response) == resp.content  # recorded as the engine sent it, not re-encoded
    assert resp.json()["choices"][0]["message"]["content"] == "42"
    assert msgspec.json.decode(call.request) == g.engine.received[0]


async def test_a_stalled_stream_times_out_and_is_recorded(make_gateway: GatewayFactory, eventlog: EventLog) -> None:
    g = await make_gateway(timeout_s=0.3)
    g.engine.stream_gate = asyncio.Event()
    async with httpx.AsyncClient(base_url=al1_base(g)) as http:
        body = {"model": "stub", "messages": MESSAGES, "stream": True}
        resp = await http.post("/chat/completions", json=body)
    g.engine.stream_gate.set()
    assert resp.status_code == 200  # the head was sent with the first chunk
    assert resp.text.startswith("data: ") and "engine stream broke" in resp.text
    [call] = await model_calls(eventlog, 1)
    assert call.status == "error" and call.error and call.error.type == "UpstreamTimeout"
    assert call.response_ids == [52]  # what arrived before the stall is kept
