"""Talking to the engines: one shared ``httpx.AsyncClient``, routing, retries, failover, health.

Each call goes to the engine ``Router`` picks (sticky by rollout id, round robin when
unattributed, engines that are down last). A transport error, timeout, 408, 429 or 5xx marks the
engine down for the cool-down and the call is tried again, ``retries`` more times at most, on the
next engine: at once when that engine is up and not yet tried by this call, else after a
doubling backoff. A streamed call is retried only while opening it, before any byte reaches the
agent. The outcome says what finally happened, on which engine, after how many retries, and
which engines were tried, so the call can be recorded and answered (502/504 naming the engines).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
from starlette.responses import JSONResponse

from voltbus.services.settings import GatewaySettings

from .errors import error_response
from .routing import Router

log = logging.getLogger(__name__)

RETRYABLE = frozenset({408, 429})


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
    stream: httpx.Response | None = None
    """For a streamed call that opened: the engine's open response (the caller closes it)."""

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


def _parse(content: bytes) -> Any:
    try:
        return json.loads(content) if content else None
    except ValueError:
        return None


def _no_answer(exc: httpx.HTTPError) -> Outcome:
    kind = "timeout" if isinstance(exc, httpx.TimeoutException) else "transport"
    return Outcome(None, None, 0, kind, f"{type(exc).__name__}: {exc}")


class Upstream:
    """The engines behind the gateway (``upstream_urls``, or the one ``upstream_url``)."""

    def __init__(
        self, settings: GatewaySettings, client: httpx.AsyncClient, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.settings = settings
        self.client = client
        self.clock = clock
        self.router = Router(settings.engines, settings.engine_cooldown_s)
        self.headers = {"Authorization": f"Bearer {settings.upstream_api_key}"} if settings.upstream_api_key else {}

    @staticmethod
    def make_client(settings: GatewaySettings) -> httpx.AsyncClient:
        """The shared client, with the configured timeouts and generous pooling."""
        timeout = httpx.Timeout(settings.timeout_s, connect=settings.connect_timeout_s)
        limits = httpx.Limits(max_connections=1024, max_keepalive_connections=256)
        return httpx.AsyncClient(timeout=timeout, limits=limits)

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

    async def call(self, path: str, body: dict[str, Any], key: str | None = None) -> Outcome:
        """POST ``body`` to ``{engine}/{path}``, retrying what is worth retrying on the next engine."""
        return await self._route(key, lambda base: self._once(base, path, body))

    async def _once(self, base: str, path: str, body: dict[str, Any]) -> Outcome:
        try:
            resp = await self.client.post(f"{base}/{path}", json=body, headers=self.headers)
        except httpx.HTTPError as exc:
            return _no_answer(exc)
        parsed = _parse(resp.content)
        return Outcome(resp.status_code, parsed, 0, detail=resp.text[:500] if parsed is None else "")

    async def open_stream(self, path: str, body: dict[str, Any], key: str | None = None) -> Outcome:
        """Start a streamed call; ``outcome.stream`` is the open response (caller closes it), else the failure.

        Retried like a non-streamed call, but only up to the engine's response head: once bytes
        flow to the agent, a broken stream is reported, never retried.
        """
        return await self._route(key, lambda base: self._open_once(base, path, body))

    async def _open_once(self, base: str, path: str, body: dict[str, Any]) -> Outcome:
        request = self.client.build_request("POST", f"{base}/{path}", json=body, headers=self.headers)
        try:
            resp = await self.client.send(request, stream=True)
        except httpx.HTTPError as exc:
            return _no_answer(exc)
        if resp.status_code < 400:
            return Outcome(resp.status_code, None, 0, stream=resp)
        try:
            content = await resp.aread()
        except httpx.HTTPError as exc:
            return _no_answer(exc)
        finally:
            await resp.aclose()
        return Outcome(resp.status_code, _parse(content), 0, detail=content[:500].decode(errors="replace"))

    async def get(self, path: str) -> Outcome:
        """GET ``{engine}/{path}`` (``/models``), round robin with failover."""
        return await self._route(None, lambda base: self._get_once(base, path))

    async def _get_once(self, base: str, path: str) -> Outcome:
        try:
            resp = await self.client.get(f"{base}/{path}", headers=self.headers)
        except httpx.HTTPError as exc:
            return _no_answer(exc)
        parsed = _parse(resp.content)
        return Outcome(resp.status_code, parsed, 0, detail=resp.text[:500] if parsed is None else "")

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
