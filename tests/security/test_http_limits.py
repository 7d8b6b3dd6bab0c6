"""Attacks on every HTTP service (issue 24, findings 10 and 11), by raw sockets against the services' own
``run()`` on random ports with small limits from settings: big or many headers, slow heads and bodies,
connection floods, bad ids and bad bytes, each refused with a precise status (never 500)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack
from pathlib import Path

import pytest

from tests.conftest import wait_for
from tests.services.gateway import conftest as gateway_fixtures
from tests.services.gateway.conftest import GatewayFactory
from tests.services.gateway.stub_llm import StubControl, serve, stub_app
from tests.services.inference import conftest as inference_fixtures
from voltbus.schemas import ModelCalled, RewardReported
from voltbus.services.dashboard import app as dashboard_app
from voltbus.services.eventlog import EventLog
from voltbus.services.gateway import app as gateway_app
from voltbus.services.inference import app as inference_app
from voltbus.services.projector import app as projector_app
from voltbus.services.serving import free_port
from voltbus.services.settings import (
    DashboardSettings,
    GatewaySettings,
    HttpSettings,
    InferenceSettings,
    NatsSettings,
    ProjectorSettings,
    Settings,
)

make_gateway, store = gateway_fixtures.make_gateway, gateway_fixtures.store  # the gateway tests' fixtures
model_dirs = inference_fixtures.model_dirs  # the tiny models of the inference tests

LIMITS = HttpSettings(max_header_bytes=4096, max_headers=20, header_timeout_s=1.0, body_timeout_s=1.0)
SERVICES = ("gateway", "projector", "dashboard", "inference")
ANSWER_S = 20.0
"""Generous deadline for any answer (the machine may be busy); a missing timeout fails at it."""


class Conn:
    """One raw client connection: bytes out, parsed answers in."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    async def send(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def answer(self, head: bytes | None = None) -> tuple[int, dict[bytes, bytes], bytes]:
        """The next response (its head already read, or not): status, headers (lower-case names), body."""
        async with asyncio.timeout(ANSWER_S):
            head = head or await self.reader.readuntil(b"\r\n\r\n")
            lines = head.split(b"\r\n")
            headers = dict(line.lower().split(b": ", 1) for line in lines[1:] if line)
            body = await self.reader.readexactly(int(headers.get(b"content-length", b"0")))
        return int(lines[0].split()[1]), headers, body

    async def closed(self) -> bool:
        """True once the server has closed the connection (nothing more is sent after what was read)."""
        async with asyncio.timeout(ANSWER_S):
            return await self.reader.read() == b""

    def close(self) -> None:
        self.writer.close()


async def connect(port: int) -> Conn:
    return Conn(*await asyncio.open_connection("127.0.0.1", port))


def request(method: str, path: bytes, body: bytes = b"", headers: tuple[bytes, ...] = ()) -> bytes:
    """A raw HTTP/1.1 request (any bytes in the path and headers)."""
    lines = [method.encode() + b" " + path + b" HTTP/1.1", b"host: 127.0.0.1", *headers]
    if method == "POST":
        lines += [b"content-type: application/json", b"content-length: %d" % len(body)]
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


async def run_until_stopped(run: Callable[..., Awaitable[None]], settings: Settings, stack: AsyncExitStack) -> None:
    """Start a service's own ``run(settings, stop, ready)``; it is stopped when ``stack`` closes."""
    stop, ready = asyncio.Event(), asyncio.Event()
    task = asyncio.create_task(run(settings, stop, ready))
    waiting = asyncio.create_task(ready.wait())
    await asyncio.wait([task, waiting], timeout=60, return_when=asyncio.FIRST_COMPLETED)
    waiting.cancel()
    if task.done():
        await task
    assert ready.is_set(), "the service did not start"

    async def stopped() -> None:
        stop.set()
        await task

    stack.push_async_callback(stopped)


ServiceFactory = Callable[..., Awaitable[tuple[int, bytes]]]


@pytest.fixture
async def service(
    nats_settings: NatsSettings, tmp_path: Path, model_dirs: dict[int, Path]
) -> AsyncIterator[ServiceFactory]:
    """Start one of the four services by its own ``run()`` with these HTTP limits; its port and a path it
    answers 200 on."""
    async with AsyncExitStack() as stack:

        async def start(name: str, http: HttpSettings, engine_control: StubControl | None = None) -> tuple[int, bytes]:
            port = free_port()
            if name == "gateway":
                engine = await stack.enter_async_context(serve(stub_app(engine_control or StubControl())))
                cfg = GatewaySettings(port=port, upstream_url=f"{engine}/v1")
                settings, run, path = Settings(nats=nats_settings, gateway=cfg, http=http), gateway_app.run, b"/healthz"
            elif name == "projector":
                cfg = ProjectorSettings(port=port, db=tmp_path / "p.duckdb", span_readers=0)
                settings, run, path = (
                    Settings(nats=nats_settings, projector=cfg, http=http),
                    projector_app.run,
                    b"/health",
                )
            elif name == "dashboard":
                cfg = DashboardSettings(port=port, projector_url="http://127.0.0.1:9")
                settings, run, path = Settings(dashboard=cfg, http=http), dashboard_app.run, b"/api/config"
            else:
                cfg = InferenceSettings(port=port, model_dir=model_dirs[0], seed=0)
                settings, run, path = Settings(inference=cfg, http=http), inference_app.run, b"/healthz"
            await run_until_stopped(run, settings, stack)
            return port, path

        yield start


async def refused(port: int, data: bytes, status: int, says: str) -> None:
    """Send ``data`` on a new connection: the answer is ``status`` naming ``says``, then the server closes."""
    conn = await connect(port)
    await conn.send(data)
    got, headers, body = await conn.answer()
    assert (got, headers[b"connection"]) == (status, b"close") and says in body.decode(), body
    assert await conn.closed()


@pytest.mark.parametrize("name", SERVICES)
async def test_every_service_refuses_big_heads_and_slow_clients(service: ServiceFactory, name: str) -> None:
    port, path = await service(name, LIMITS)
    idle, slow = await connect(port), await connect(port)
    await slow.send(b"GET " + path)  # the rest of the request line never comes
    big = request("GET", path, headers=(b"x-big: " + b"a" * 8000,))
    await refused(port, big, 431, "http.max_header_bytes")
    many = request("GET", path, headers=tuple(b"x-h%d: 1" % i for i in range(21)))
    await refused(port, many, 431, "http.max_headers")
    status, _, body = await slow.answer()
    assert status == 408 and "http.header_timeout_s" in body.decode()
    assert await slow.closed() and await idle.closed()  # a connection that never sends is closed too
    good = await connect(port)
    for _ in range(2):  # within the limits: answered, and the connection is kept for the next request
        await good.send(request("GET", path, headers=tuple(b"x-h%d: 1" % i for i in range(18))))
        assert (await good.answer())[0] == 200
    good.close()


@pytest.mark.parametrize("name", ["gateway", "projector"])
async def test_dripping_clients_are_cut_off_while_others_are_served(service: ServiceFactory, name: str) -> None:
    port, path = await service(name, LIMITS)
    drippers = [await connect(port) for _ in range(8)]

    async def drip(conn: Conn) -> tuple[int, dict[bytes, bytes], bytes]:
        """A slowloris client: one more byte of a header every 0.1 s, never the end, until answered."""
        await conn.send(b"GET " + path + b" HTTP/1.1\r\nx-slow: ")
        async with asyncio.timeout(ANSWER_S):
            while True:
                try:  # the attacker's pace: well inside any per-byte idle timer
                    return await conn.answer(await asyncio.wait_for(conn.reader.readuntil(b"\r\n\r\n"), 0.1))
                except TimeoutError:
                    await conn.send(b"a")

    dripping = [asyncio.create_task(drip(conn)) for conn in drippers]
    good = await connect(port)
    await good.send(request("GET", path))
    assert (await good.answer())[0] == 200
    for conn, answered in zip(drippers, dripping, strict=True):  # the bytes did not restart the head's clock
        status, _, body = await answered
        assert status == 408 and "http.header_timeout_s" in body.decode()
        assert await conn.closed()
    slow_body = request("POST", b"/sql" if name == "projector" else b"/v1/chat/completions", b"{}")
    conn = await connect(port)
    await conn.send(slow_body.replace(b"content-length: 2", b"content-length: 50"))  # 48 bytes never come
    status, _, body = await conn.answer()
    assert status == 408 and "http.body_timeout_s" in body.decode()
    assert await conn.closed()


@pytest.mark.parametrize("name", ["gateway", "projector"])
async def test_connections_past_the_cap_are_refused_at_once(service: ServiceFactory, name: str) -> None:
    port, path = await service(name, LIMITS.model_copy(update={"max_connections": 6, "header_timeout_s": 60.0}))
    held = [await connect(port) for _ in range(6)]  # idle: they send nothing
    await refused(port, b"", 503, "http.max_connections")
    for conn in held[1:]:  # the held connections still work
        await conn.send(request("GET", path))
        assert (await conn.answer())[0] == 200
    held[0].close()

    async def served() -> bool:  # a place frees once the server has seen the close
        conn = await connect(port)
        await conn.send(request("GET", path))
        status = (await conn.answer())[0]
        conn.close()
        return status == 200

    await wait_for(served, ANSWER_S, "a new connection once one closed")
    for conn in held[1:]:
        conn.close()


async def test_a_slow_answer_outlives_the_read_deadlines(service: ServiceFactory) -> None:
    engine = StubControl(hold=asyncio.Event())
    port, _ = await service("gateway", LIMITS, engine)
    conn = await connect(port)
    await conn.send(request("POST", b"/v1/chat/completions", b'{"model": "m", "messages": []}'))
    await asyncio.wait_for(engine.entered.wait(), ANSWER_S)
    await asyncio.sleep(LIMITS.header_timeout_s + LIMITS.body_timeout_s + 0.5)  # an engine slower than both
    engine.hold.set()  # type: ignore[union-attr]
    assert (await conn.answer())[0] == 200  # the deadlines are for what the client sends, not for the answer
    await conn.send(request("GET", b"/healthz"))
    assert (await conn.answer())[0] == 200
    conn.close()


BAD_IDS = [b"%2e%2e", b"%00", b"*", b"a.b", b"x" * 5000, b"a%20b", b"%ff", b">"]
"""Rollout or attempt ids that cannot be NATS subject tokens, as they appear in a path."""
BAD_HEADER_IDS = [b"..", b"*", b"a.b", b"x" * 5000, b"a b", b"\xff", b"vb.ro.>"]
"""The same in ``X-Voltbus-Rollout-Id`` / ``X-Voltbus-Attempt-Id`` (a NUL byte there is not HTTP at all)."""


async def spans_events(eventlog: EventLog) -> list[object]:
    return [e.event async for e in eventlog.replay("spans")]  # type: ignore[union-attr]


async def test_bad_ids_get_400_and_the_connection_is_kept(make_gateway: GatewayFactory, eventlog: EventLog) -> None:
    g = await make_gateway()
    rid, aid = g.rid.encode(), g.aid.encode()
    chat = b'{"model": "m", "messages": [{"role": "user", "content": "2+2"}]}'
    reward = b'{"event_type": "reward", "data": {"value": 1.0}}'
    before = await spans_events(eventlog)
    conn = await connect(int(g.url.rsplit(":", 1)[1]))
    asked: list[bytes] = []
    for bad in BAD_IDS:
        asked += [
            request("POST", b"/rollout/%s/attempt/%s/v1/chat/completions" % (bad, aid), chat),
            request("POST", b"/rollout/%s/attempt/%s/v1/chat/completions" % (rid, bad), chat),
            request("POST", b"/proxy/rollout/%s/attempt/%s/mode/train/openai/v1/chat/completions" % (bad, aid), chat),
            request("POST", b"/api/rollouts/%s/attempt/%s/events" % (bad, aid), reward),
            request("POST", b"/api/rollouts/%s/attempt/%s/events" % (rid, bad), reward),
            request("GET", b"/rollout/%s/attempt/%s/v1/models" % (bad, aid)),
        ]
    for bad in BAD_HEADER_IDS:
        asked += [
            request("POST", b"/v1/chat/completions", chat, (b"x-voltbus-rollout-id: " + bad,)),
            request(
                "POST",
                b"/v1/chat/completions",
                chat,
                (b"x-voltbus-rollout-id: " + rid, b"x-voltbus-attempt-id: " + bad),
            ),
        ]
    for data in asked:  # all on one connection: each refusal leaves it open for the next request
        await conn.send(data)
        status, _, body = await conn.answer()
        assert status == 400 and b'"invalid_id"' in body and b"use 1-128 characters" in body, (data[:120], body)
    await conn.send(request("POST", b"/rollout/no-such-rollout/attempt/%s/v1/chat/completions" % aid, chat))
    status, _, body = await conn.answer()
    assert status == 404 and b"unknown_rollout" in body
    await conn.send(request("POST", b"/rollout/%s/attempt/%s/v1/chat/completions" % (rid, aid), chat))
    assert (await conn.answer())[0] == 200  # the same connection still serves a good call
    conn.close()
    assert len(g.engine.received) == 1  # no refused call reached the engine
    after = await spans_events(eventlog)  # the good call was recorded before it was answered
    recorded = [e for e in after if e not in before]
    assert [type(e) for e in recorded] == [ModelCalled] and not any(isinstance(e, RewardReported) for e in after)


async def test_the_dashboard_refuses_bad_ids_and_keeps_the_connection(service: ServiceFactory) -> None:
    port, _ = await service("dashboard", HttpSettings())
    conn = await connect(port)
    for bad in BAD_IDS:
        for path in (b"/api/rollout?rollout_id=", b"/api/run?run_id="):
            await conn.send(request("GET", path + bad))
            status, _, body = await conn.answer()
            assert status == 400 and (b"use 1-128 characters" in body or b"over the limit" in body), (bad, body)
    await conn.send(request("GET", b"/api/config"))
    assert (await conn.answer())[0] == 200
    conn.close()


BAD_BODIES = [
    b'{"model": "m", "messages": [{"role": "user", "content": "\xff\xfe"}]}',
    b"\xff\xfe{}",
    b'{"sql": "\xc3\x28"}',
]
"""Bodies that are not UTF-8 (so not JSON): inside a string, before it, a broken two-byte sequence."""


@pytest.mark.parametrize("name", ["gateway", "projector", "inference"])
async def test_bodies_that_are_not_utf8_get_400_and_the_connection_is_kept(
    service: ServiceFactory, name: str, make_gateway: GatewayFactory
) -> None:
    if name == "gateway":
        g = await make_gateway()
        port, paths = int(g.url.rsplit(":", 1)[1]), [f"/rollout/{g.rid}/attempt/{g.aid}/v1/chat/completions"]
        paths.append(f"/api/rollouts/{g.rid}/attempt/{g.aid}/events")
        good = request("POST", paths[0].encode(), b'{"model": "m", "messages": []}')
    else:
        port, health = await service(name, HttpSettings())
        paths = ["/sql"] if name == "projector" else ["/v1/completions", "/v1/chat/completions", "/update_weights"]
        good = request("GET", health)
    conn = await connect(port)
    for path in paths:
        for body in BAD_BODIES:
            await conn.send(request("POST", path.encode(), body))
            status, _, text = await conn.answer()
            assert status == 400 and b"JSON" in text, (path, body, text)
    await conn.send(good)
    assert (await conn.answer())[0] == 200  # the same connection still serves
    conn.close()
    if name == "gateway":
        assert len(g.engine.received) == 1  # only the good call reached the engine


def test_a_service_raises_its_open_file_limit_to_fit_its_connection_cap() -> None:
    """With a soft limit of 1024 (a common default), accept() failed with EMFILE before max_connections applied."""
    import resource

    from voltbus.services.serving import FILES_BESIDE, room_for

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (512, hard))
        room_for(1000 + FILES_BESIDE)
        wanted = 1000 + FILES_BESIDE if hard == resource.RLIM_INFINITY else min(1000 + FILES_BESIDE, hard)
        assert resource.getrlimit(resource.RLIMIT_NOFILE) == (wanted, hard)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
