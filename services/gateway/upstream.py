"""Talking to the engines: one shared ``aiohttp.ClientSession``, routing, retries, failover, health.

Each call goes to the engine ``Router`` picks (sticky by rollout id, round robin when
unattributed, engines that are down last). A transport error, timeout, 408, 429 or 5xx marks the
engine down for the cool-down and the call is tried again, ``retries`` more times at most, on the
next engine: at once when that engine is up and not yet tried by this call, else after a
doubling backoff. A streamed call is retried only while opening it, before any byte reaches the
agent. The outcome says what finally happened, on which engine, after how many retries, and
which engines were tried, so the call can be recorded and answered (502/504 naming the engines).

The client is aiohttp rather than httpx: httpcore's pool re-checks every pooled connection
(``getpeername``) on every request, a large share of the gateway's CPU per call
(BENCHMARKS.md, "Gateway"). Bodies go out as bytes encoded once (``Call.body``), and
the engine's answer is kept as bytes (``Outcome.raw``) so it can be passed on and recorded as is.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import msgspec
from starlette.responses import JSONResponse

from voltbus.services.restart import stop_if_cancelled
from voltbus.services.settings import GatewaySettings

from .errors import error_response
from .routing import Router

log = logging.getLogger(__name__)

RETRYABLE = frozenset({408, 429})
MAX_CONNECTIONS = 1024
"""Open connections to the engines at most (all engines together), as httpx's ``max_connections`` was."""
KEEPALIVE_S = 4.0
"""Seconds an idle connection to an engine is kept for the next call: less than the engines' own
idle timeout (5 s in uvicorn, so in vLLM and the CPU inference server), so the gateway does not
send a call on a connection the engine is closing (aiohttp does not resend a POST)."""


@dataclass
class Outcome:
    """What the engine answered, or why it did not."""

    status: int | None
    """HTTP status; None when no answer came."""
    body: Any
    """Parsed JSON body, or None (no answer, or not JSON)."""
    retries: int
    """Tries after the first."""
    failure: str | None = None
    """``timeout`` or ``transport`` when no answer came."""
    detail: str = ""
    """Error text for a failure."""
    upstream: str = ""
    """Base URL of the engine that gave this answer (the last one tried)."""
    tried: list[str] = field(default_factory=list)
    """Base URL of every engine tried, in order (one entry per try)."""
    stream: aiohttp.ClientResponse | None = None
    """For a streamed call that opened: the engine's open response (the caller closes it)."""
    raw: bytes | None = None
    """The engine's body as it came, when it parsed as JSON with ``msgspec`` (so it can be passed on
    and recorded without re-encoding); None otherwise."""

    @property
    def retryable(self) -> bool:
        """Whether another try (on another engine) may do better."""
        return self.failure is not None or self.status in RETRYABLE or (self.status or 0) >= 500

    @property
    def reason(self) -> str:
        """Why the engine is marked down, in a few words."""
        return f"{self.failure}: {self.detail}"[:200] if self.failure else f"HTTP {self.status}"


def routing_key(rollout_id: str) -> str | None:
    """The sticky key of a call: its rollout id; None (round robin) for unattributed calls."""
    return None if rollout_id == "unattributed" else rollout_id


CLIENT_ERRORS = (aiohttp.ClientError, TimeoutError, OSError)
"""What a request to an engine raises when no (whole) answer came: aiohttp's errors, its timeouts
(``TimeoutError`` subclasses), and socket errors."""


def _answer(status: int, content: bytes) -> Outcome:
    """An answer's outcome: the body parsed (``msgspec``, falling back to ``json`` for what only it
    reads, such as ``NaN``), the raw bytes kept when they are strict JSON, the text when not JSON."""
    parsed, raw = None, None
    if content:
        try:
            parsed, raw = msgspec.json.decode(content), content
        except msgspec.DecodeError:
            try:
                parsed = json.loads(content)
            except ValueError:
                pass
    detail = content[:500].decode(errors="replace") if parsed is None else ""
    return Outcome(status, parsed, 0, detail=detail, raw=raw)


def _no_answer(exc: BaseException) -> Outcome:
    kind = "timeout" if isinstance(exc, TimeoutError) else "transport"
    return Outcome(None, None, 0, kind, f"{type(exc).__name__}: {exc}")


def timeouts(settings: GatewaySettings) -> aiohttp.ClientTimeout:
    """The engine client's timeouts: ``timeout_s`` between any two reads (the response head, each
    chunk of a stream) and to get a connection from the pool; ``connect_timeout_s`` to open one.
    No limit on a whole call, so a long stream that keeps sending is never cut.

    >>> t = timeouts(GatewaySettings(timeout_s=60, connect_timeout_s=2))
    >>> (t.total, t.connect, t.sock_connect, t.sock_read)
    (None, 60.0, 2.0, 60.0)
    """
    return aiohttp.ClientTimeout(
        total=None, connect=settings.timeout_s, sock_connect=settings.connect_timeout_s, sock_read=settings.timeout_s
    )


class Upstream:
    """The engines behind the gateway (``upstream_urls``, or the one ``upstream_url``)."""

    def __init__(
        self, settings: GatewaySettings, client: aiohttp.ClientSession, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.settings = settings
        self.client = client
        self.clock = clock
        self.router = Router(settings.engines, settings.engine_cooldown_s)
        self.headers = {"Authorization": f"Bearer {settings.upstream_api_key}"} if settings.upstream_api_key else {}
        self.post_headers = {**self.headers, "Content-Type": "application/json"}

    @staticmethod
    def make_client(settings: GatewaySettings) -> aiohttp.ClientSession:
        """The shared client (create it inside the running loop; close it with ``async with``).

        At most ``MAX_CONNECTIONS`` open connections in all (a call beyond that waits for one, up to
        ``timeout_s``), kept alive for reuse ``KEEPALIVE_S`` after their last call; every engine may
        use all of them. ``timeouts`` maps the settings' timeouts.
        """
        connector = aiohttp.TCPConnector(limit=MAX_CONNECTIONS, limit_per_host=0, keepalive_timeout=KEEPALIVE_S)
        return aiohttp.ClientSession(connector=connector, timeout=timeouts(settings))

    @property
    def tries(self) -> int:
        """Tries per call: ``retries + 1``; by default one per engine."""
        retries = self.settings.retries
        return (len(self.router.engines) - 1 if retries is None else retries) + 1

    async def _route(self, key: str | None, once: Callable[[str], Awaitable[Outcome]]) -> Outcome:
        """Try ``once(engine base URL)`` on engines in routing order until an answer is not retryable."""
        counts: dict[int, int] = {}
        tried: list[str] = []
        outcome = Outcome(None, None, 0)
        for attempt in range(self.tries):
            index = self.router.pick(self.router.order(key, self.clock()), counts)
            fresh = not counts.get(index) and self.router.health[index].up(self.clock())
            if attempt and not fresh:  # same engine again, or one that is down: back off first
                await asyncio.sleep(min(self.settings.retry_backoff_s * 2 ** (attempt - 1), 8.0))
            counts[index] = counts.get(index, 0) + 1
            base = self.router.engines[index]
            tried.append(base)
            outcome = await once(base)
            outcome.retries, outcome.upstream, outcome.tried = attempt, base, tried
            if not outcome.retryable:
                self.router.succeeded(index)
                break
            self.router.failed(index, outcome.reason, self.clock())
            log.warning("gateway/engine_failed engine=%s attempt=%d: %s", base, attempt, outcome.reason)
        return outcome

    async def call(self, path: str, body: bytes, key: str | None = None) -> Outcome:
        """POST ``body`` (encoded JSON) to ``{engine}/{path}``, retrying what is worth retrying on the next engine."""
        return await self._route(key, lambda base: self._once(base, path, body))

    async def _once(self, base: str, path: str, body: bytes) -> Outcome:
        try:
            async with self.client.post(f"{base}/{path}", data=body, headers=self.post_headers) as resp:
                return _answer(resp.status, await resp.read())
        except CLIENT_ERRORS as exc:
            return _no_answer(exc)

    async def open_stream(self, path: str, body: bytes, key: str | None = None) -> Outcome:
        """Start a streamed call; ``outcome.stream`` is the open response (caller closes it), else the failure.

        Retried like a non-streamed call, but only up to the engine's response head: once bytes
        flow to the agent, a broken stream is reported, never retried.
        """
        return await self._route(key, lambda base: self._open_once(base, path, body))

    async def _open_once(self, base: str, path: str, body: bytes) -> Outcome:
        try:
            resp = await self.client.post(f"{base}/{path}", data=body, headers=self.post_headers)
        except CLIENT_ERRORS as exc:
            return _no_answer(exc)
        if resp.status < 400:
            return Outcome(resp.status, None, 0, stream=resp)
        try:
            content = await resp.read()
        except CLIENT_ERRORS as exc:
            return _no_answer(exc)
        finally:
            resp.release()
        outcome = _answer(resp.status, content)
        outcome.detail = content[:500].decode(errors="replace")
        return outcome

    async def get(self, path: str) -> Outcome:
        """GET ``{engine}/{path}`` (``/models``), round robin with failover."""
        return await self._route(None, lambda base: self._get_once(base, path))

    async def _get_once(self, base: str, path: str) -> Outcome:
        try:
            async with self.client.get(f"{base}/{path}", headers=self.headers) as resp:
                return _answer(resp.status, await resp.read())
        except CLIENT_ERRORS as exc:
            return _no_answer(exc)

    async def probe(self) -> None:
        """Active health check: GET ``{engine}/models`` on every engine once, marking each up or down."""

        async def one(index: int) -> None:
            outcome = await self._get_once(self.router.engines[index], "models")
            if outcome.retryable:
                self.router.failed(index, outcome.reason, self.clock())
            else:
                self.router.succeeded(index)

        await asyncio.gather(*(one(i) for i in range(len(self.router.engines))))

    async def probe_forever(self, interval_s: float) -> None:
        """Run ``probe`` every ``interval_s`` seconds until cancelled."""
        while True:
            await asyncio.sleep(interval_s)
            try:
                await self.probe()
            except Exception:  # a probe must never take the gateway down
                stop_if_cancelled()
                log.exception("gateway/health_probe_failed")

    def health(self) -> dict[str, Any]:
        """The health view for ``/healthz``: ``engines`` (URL, state, cool-down left, failures, last error)
        and ``engines_up``."""
        engines = self.router.snapshot(self.clock())
        return {"engines_up": sum(e["state"] == "up" for e in engines), "engines": engines}


def failure_answer(outcome: Outcome) -> tuple[JSONResponse | None, tuple[str, str] | None]:
    """How a failed outcome is answered and recorded: (response to send instead, (error type, message)).

    The answer names the engines tried (``engines_tried``) so the agent sees that all of them failed.
    """
    tried = list(dict.fromkeys(outcome.tried))
    where = f" (engines tried: {', '.join(tried)}; {outcome.retries + 1} tries)" if tried else ""
    extra = {"engines_tried": tried, "retries": outcome.retries}
    if outcome.failure == "timeout":
        msg = f"upstream model server timed out{where}"
        return error_response(504, "upstream_timeout", msg, **extra), ("UpstreamTimeout", f"{outcome.detail}{where}")
    if outcome.failure == "transport":
        msg = f"upstream unreachable: {outcome.detail}{where}"
        return error_response(502, "upstream_unreachable", msg, **extra), ("UpstreamUnreachable", msg)
    status = outcome.status or 0
    if status >= 500:
        msg = f"upstream model server answered {status}{where}"
        answer = error_response(502, "upstream_error", msg, upstream_status=status, upstream_body=outcome.body, **extra)
        return answer, ("UpstreamError", f"{msg}: {outcome.detail or outcome.body}")
    if status >= 400:  # the agent's own mistake (bad params, unknown model): pass through, record as failed
        return None, ("UpstreamRejected", f"upstream answered {status}: {outcome.detail or outcome.body}")
    return None, None
