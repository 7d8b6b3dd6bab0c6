"""Pause, drain and resume for weight swaps (Agent Lightning 1.0's ``ProxyPauseState`` contract).

While paused, new model calls are refused with 429, ``Retry-After`` and ``X-Agl-Paused: true``;
calls already in flight finish. ``wait_drained`` lets the learner wait until none is left.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from starlette.responses import JSONResponse


class PauseState:
    """Whether new calls are admitted, and how many are in flight."""

    def __init__(self, retry_after_s: int) -> None:
        self.paused = False
        self.retry_after_s = retry_after_s
        self.reason: str | None = None
        self.inflight = 0
        self.paused_since: float | None = None
        self.changed = asyncio.Condition()

    def snapshot(self) -> dict[str, Any]:
        """The state as Agent Lightning's ``/proxy/state`` reports it."""
        return {
            "paused": self.paused,
            "retry_after_seconds": self.retry_after_s,
            "reason": self.reason,
            "inflight": self.inflight,
        }

    def pause(self, retry_after_s: int | None = None, reason: str | None = None) -> None:
        """Refuse new calls from now on."""
        if not self.paused:
            self.paused_since = time.monotonic()
        self.paused = True
        self.retry_after_s = self.retry_after_s if retry_after_s is None else retry_after_s
        self.reason = reason

    def resume(self) -> float | None:
        """Admit new calls again; how long calls were refused (None if it was not paused)."""
        since, self.paused_since = self.paused_since, None
        self.paused = False
        self.reason = None
        return time.monotonic() - since if since is not None else None

    def refusal(self) -> JSONResponse:
        """The 429 a new call gets while paused."""
        headers = {"Retry-After": str(self.retry_after_s), "X-Agl-Paused": "true"}
        body = {"error": {"message": "gateway paused", "type": "gateway_paused", "reason": self.reason}}
        return JSONResponse(body, status_code=429, headers=headers)

    async def enter(self) -> None:
        """Count one call in flight."""
        async with self.changed:
            self.inflight += 1

    async def leave(self) -> None:
        """Count one call finished, waking drain waiters."""
        async with self.changed:
            self.inflight = max(0, self.inflight - 1)
            self.changed.notify_all()

    async def wait_drained(self, timeout_s: float) -> bool:
        """Wait until nothing is in flight; False at the deadline."""
        try:
            async with asyncio.timeout(timeout_s), self.changed:
                await self.changed.wait_for(lambda: self.inflight == 0)
        except TimeoutError:
            return False
        return True
