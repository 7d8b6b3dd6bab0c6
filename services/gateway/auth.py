"""Keys: agents send ``agent_key`` or their rollout's own key, the learner and operators ``admin_key``
(either header Agent Lightning accepts); admin routes need ``admin_key`` (401 without it, 403 with
an agent key). With ``key_secret`` set, a call attributed to a rollout must
carry that rollout's key (``services/keys.py``); another rollout's key gets 403, no key 401."""

from __future__ import annotations

import hmac

from starlette.requests import Request

from voltbus.services.keys import PREFIX, rollout_key
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


def require_agent(request: Request, settings: GatewaySettings, rollout_id: str | None = None) -> None:
    """Refuse unless the key presented may act for ``rollout_id`` (None: an unattributed call).

    The admin key always may; with ``key_secret`` set, a rollout's calls need that rollout's key
    (401 without, 403 with another rollout's); otherwise the shared agent key (open when unset)."""
    key = presented_key(request)
    if settings.admin_key is not None and _matches(key, settings.admin_key):
        return
    if settings.key_secret and rollout_id:
        if _matches(key, rollout_key(settings.key_secret, rollout_id)):
            return
        if key is not None and key.startswith(PREFIX):
            raise GatewayError(403, "forbidden", f"this key belongs to another rollout than {rollout_id!r}")
        raise GatewayError(401, "unauthorized", f"missing or invalid key of rollout {rollout_id!r}")
    if settings.agent_key is None and not settings.key_secret:
        return
    if settings.agent_key is not None and _matches(key, settings.agent_key):
        return
    raise GatewayError(401, "unauthorized", "invalid or missing API key")


def require_admin(request: Request, settings: GatewaySettings) -> None:
    """Refuse unless the admin key is presented: 401 without a key or with an unknown one, 403 with an
    agent's key. Open when no key at all is set; closed (403) when agent keys are set but no admin key."""
    key = presented_key(request)
    if settings.admin_key is None:
        if settings.agent_key is None and not settings.key_secret:
            return
        raise GatewayError(403, "forbidden", "admin routes are closed: agent keys are set but no gateway.admin_key")
    if _matches(key, settings.admin_key):
        return
    if key is None:
        raise GatewayError(401, "unauthorized", "this route needs the admin key")
    if key.startswith(PREFIX) or (settings.agent_key is not None and _matches(key, settings.agent_key)):
        raise GatewayError(403, "forbidden", "an agent key may not use admin routes: this route needs the admin key")
    raise GatewayError(401, "unauthorized", "invalid admin key")
