"""Talking to the engine: one shared ``httpx.AsyncClient``, retries for non-streamed calls.

Transport errors, timeouts, 408, 429 and 5xx are retried ``retries`` times with doubling backoff;
the outcome says what finally happened so the call can be recorded and answered (502/504).
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any

import httpx
from starlette.responses import JSONResponse

from voltbus.services.settings import GatewaySettings

from .errors import error_response

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


class Upstream:
    """The engine behind the gateway."""

    def __init__(self, settings: GatewaySettings, client: httpx.AsyncClient) -> None:
        self.settings = settings
        self.client = client
        self.base = settings.upstream_url.rstrip("/")
        self.headers = {"Authorization": f"Bearer {settings.upstream_api_key}"} if settings.upstream_api_key else {}

    @staticmethod
    def make_client(settings: GatewaySettings) -> httpx.AsyncClient:
        """The shared client, with the configured timeouts and generous pooling."""
        timeout = httpx.Timeout(settings.timeout_s, connect=settings.connect_timeout_s)
        limits = httpx.Limits(max_connections=1024, max_keepalive_connections=256)
        return httpx.AsyncClient(timeout=timeout, limits=limits)

    async def call(self, path: str, body: dict[str, Any]) -> Outcome:
        """POST ``body`` to ``{upstream}/{path}``, retrying what is worth retrying."""
        tries = self.settings.retries + 1
        outcome = Outcome(None, None, 0)
        for attempt in range(tries):
            outcome = await self._once(path, body, attempt)
            retryable = outcome.failure is not None or outcome.status in RETRYABLE or (outcome.status or 0) >= 500
            if not retryable or attempt == tries - 1:
                break
            await asyncio.sleep(min(self.settings.retry_backoff_s * 2**attempt, 8.0))  # backoff, not sync
        return outcome

    async def _once(self, path: str, body: dict[str, Any], attempt: int) -> Outcome:
        try:
            resp = await self.client.post(f"{self.base}/{path}", json=body, headers=self.headers)
        except httpx.TimeoutException as exc:
            return Outcome(None, None, attempt, "timeout", f"{type(exc).__name__}: {exc}")
        except httpx.HTTPError as exc:
            return Outcome(None, None, attempt, "transport", f"{type(exc).__name__}: {exc}")
        try:
            parsed = json.loads(resp.content) if resp.content else None
        except ValueError:
            parsed = None
        return Outcome(resp.status_code, parsed, attempt, detail=resp.text[:500] if parsed is None else "")

    async def open_stream(self, path: str, body: dict[str, Any]) -> httpx.Response | Outcome:
        """Start a streamed call; the open response (caller closes it), or the failure."""
        request = self.client.build_request("POST", f"{self.base}/{path}", json=body, headers=self.headers)
        try:
            resp = await self.client.send(request, stream=True)
        except httpx.TimeoutException as exc:
            return Outcome(None, None, 0, "timeout", f"{type(exc).__name__}: {exc}")
        except httpx.HTTPError as exc:
            return Outcome(None, None, 0, "transport", f"{type(exc).__name__}: {exc}")
        if resp.status_code >= 400:
            content = await resp.aread()
            await resp.aclose()
            try:
                parsed = json.loads(content) if content else None
            except ValueError:
                parsed = None
            return Outcome(resp.status_code, parsed, 0, detail=content[:500].decode(errors="replace"))
        return resp

    async def get(self, path: str) -> Outcome:
        """GET ``{upstream}/{path}`` once (``/models``)."""
        try:
            resp = await self.client.get(f"{self.base}/{path}", headers=self.headers)
        except httpx.HTTPError as exc:
            kind = "timeout" if isinstance(exc, httpx.TimeoutException) else "transport"
            return Outcome(None, None, 0, kind, f"{type(exc).__name__}: {exc}")
        try:
            return Outcome(resp.status_code, resp.json(), 0)
        except ValueError:
            return Outcome(resp.status_code, None, 0, detail=resp.text[:500])


def failure_answer(outcome: Outcome) -> tuple[JSONResponse | None, tuple[str, str] | None]:
    """How a failed outcome is answered and recorded: (response to send instead, (error type, message))."""
    if outcome.failure == "timeout":
        return error_response(504, "upstream_timeout", "upstream model server timed out"), (
            "UpstreamTimeout",
            outcome.detail,
        )
    if outcome.failure == "transport":
        return error_response(502, "upstream_unreachable", f"upstream unreachable: {outcome.detail}"), (
            "UpstreamUnreachable",
            outcome.detail,
        )
    status = outcome.status or 0
    if status >= 500:
        msg = f"upstream model server answered {status}"
        answer = error_response(502, "upstream_error", msg, upstream_status=status, upstream_body=outcome.body)
        return answer, ("UpstreamError", f"{msg}: {outcome.detail or outcome.body}")
    if status >= 400:  # the agent's own mistake (bad params, unknown model): pass through, record as failed
        return None, ("UpstreamRejected", f"upstream answered {status}: {outcome.detail or outcome.body}")
    return None, None
