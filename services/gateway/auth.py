"""Keys: agents send ``agent_key``, the learner and operators ``admin_key`` (either header AL accepts)."""

from __future__ import annotations

import hmac

from starlette.requests import Request

from voltbus.services.settings import GatewaySettings

from .errors import GatewayError


def presented_key(request: Request) -> str | None:
    """The key in ``Authorization: Bearer <key>`` or ``x-api-key``, if any."""
    auth = request.headers.get("authorization", "")
    if auth.lower().startswith("bearer "):
        return auth[7:].strip()
    return request.headers.get("x-api-key")


def _matches(key: str | None, expected: str) -> bool:
    return key is not None and hmac.compare_digest(key.encode(), expected.encode())


def require_agent(request: Request, settings: GatewaySettings) -> None:
    """Refuse (401) unless the agent key (or the admin key) is presented; open when no agent key is set."""
    if settings.agent_key is None:
        return
    key = presented_key(request)
    if _matches(key, settings.agent_key) or (settings.admin_key is not None and _matches(key, settings.admin_key)):
        return
    raise GatewayError(401, "unauthorized", "invalid or missing API key")


def require_admin(request: Request, settings: GatewaySettings) -> None:
    """Refuse (401) unless the admin key is presented; open when no admin key is set."""
    if settings.admin_key is not None and not _matches(presented_key(request), settings.admin_key):
        raise GatewayError(401, "unauthorized", "invalid or missing admin key")
