"""The weight push's HTTP requests: each with a deadline, and a ``VllmPushError`` naming what failed."""

from __future__ import annotations

from typing import Any

import httpx

from voltbus.schemas.errors import VoltbusError


class VllmPushError(VoltbusError):
    """A weight push failed; the gateway was resumed (unless the message says it could not be)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status
        """The HTTP status of a refusal; None when no answer came (the request may have been applied)."""


async def request(
    http: httpx.AsyncClient, method: str, url: str, what: str, timeout: float, **kw: Any
) -> httpx.Response:
    """One request; VllmPushError naming ``what`` when no answer came in ``timeout`` seconds, or an
    answer other than 2xx (404 is returned: some routes are optional)."""
    try:
        resp = await http.request(method, url, timeout=timeout, **kw)
    except httpx.TimeoutException:
        raise VllmPushError(f"{what}: no answer within {timeout:g} s") from None
    except httpx.HTTPError as exc:
        raise VllmPushError(f"{what}: {type(exc).__name__}: {exc}") from None
    if resp.status_code >= 300 and resp.status_code != 404:
        raise VllmPushError(f"{what}: HTTP {resp.status_code}: {resp.text[:300]}", resp.status_code)
    return resp
