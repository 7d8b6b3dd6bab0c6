"""Per-rollout agent keys: an agent can only speak for its own rollout.

With ``gateway.key_secret`` set, each rollout's key is derived from the secret and the rollout id
(HMAC-SHA256), so the runner that hands a key to an agent and the gateway that checks it share
nothing but the secret, and no key table has to be stored or synchronized. A key for one rollout
is refused on every other rollout's routes.
"""

from __future__ import annotations

import hashlib
import hmac

from voltbus.services.settings import GatewaySettings

PREFIX = "vbk-"
NO_KEY = "voltbus-no-key"
"""What agents get as their key (``AGL_KEY``, a ProxyLLM's ``api_key``) when the gateway requires none (no
``key_secret``, no ``agent_key``): the openai client refuses an empty key, and a gateway without keys
accepts any. It grants nothing where keys are required."""


def rollout_key(secret: str, rollout_id: str) -> str:
    """The agent key of one rollout.

    >>> rollout_key("s3cret", "ro-1") == rollout_key("s3cret", "ro-1") != rollout_key("s3cret", "ro-2")
    True
    >>> rollout_key("s3cret", "ro-1").startswith("vbk-")
    True
    """
    digest = hmac.new(secret.encode(), rollout_id.encode(), hashlib.sha256).hexdigest()
    return f"{PREFIX}{digest[:40]}"


def agent_key_for(settings: GatewaySettings, rollout_id: str) -> str | None:
    """The key an agent of ``rollout_id`` presents: its own with a secret set, else the shared agent key."""
    if settings.key_secret:
        return rollout_key(settings.key_secret, rollout_id)
    return settings.agent_key
