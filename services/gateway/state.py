"""What the handlers share, built once per app in its lifespan and kept on ``app.state.gateway``."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec
from starlette.requests import Request

from voltbus.schemas.errors import VoltbusError
from voltbus.services.clients.store import Store
from voltbus.services.httpguard import BodyTooLarge, bounded_body
from voltbus.services.settings import GatewaySettings

from .attribution import Attribution
from .errors import GatewayError
from .pause import PauseState
from .record import Call
from .upstream import Upstream
from .versions import ServedVersions

log = logging.getLogger(__name__)


@dataclass
class Gateway:
    """The gateway's resources: settings, store (bus), engine client, attribution, pause state, and
    the versions the engines serve."""

    settings: GatewaySettings
    store: Store
    upstream: Upstream
    attribution: Attribution
    pause: PauseState
    gateway_id: str = "gateway"
    versions: ServedVersions = field(init=False)
    """The version each engine serves, per the weight-swap protocol (``versions``)."""

    def __post_init__(self) -> None:
        self.versions = ServedVersions(self.upstream.router.engines)

    def served_version(self, call: Call) -> str | None:
        """The version the swap protocol says served ``call`` (None: unknown)."""
        return self.versions.label(call.upstream, call.epoch)

    async def announce(self, event: Any) -> str | None:
        """Append a control event (pause, resume); the error text if the bus refused it (logged)."""
        try:
            await self.store.log.append([event])
        except (VoltbusError, OSError, TimeoutError) as exc:
            log.error("gateway/announce_failed %s: %s", type(event).__name__, exc)
            return str(exc) or type(exc).__name__
        return None

    async def record(self, events: Sequence[Any]) -> str | None:
        """Publish events to the spans stream; the error text if the bus refused them (logged)."""
        try:
            await self.store.log.publish_spans(events)
        except (VoltbusError, OSError, TimeoutError) as exc:
            log.error("gateway/record_failed events=%d: %s", len(events), exc)
            return str(exc) or type(exc).__name__
        return None


def gateway_of(request: Request) -> Gateway:
    """The app's Gateway (the lifespan put it there)."""
    return request.app.state.gateway


async def read_json(request: Request, limit: int) -> dict[str, Any]:
    """The body as a JSON object; 413 past ``limit`` bytes (read no further), 400 if not a JSON object."""
    try:
        raw = await bounded_body(request, limit)
    except BodyTooLarge as exc:
        raise GatewayError(413, "body_too_large", str(exc)) from None
    try:
        body = msgspec.json.decode(raw) if raw.strip() else {}
    except (msgspec.DecodeError, UnicodeDecodeError) as exc:  # msgspec checks a string's UTF-8 as it decodes it
        raise GatewayError(400, "invalid_json", f"invalid JSON in request body: {exc}") from None
    except RecursionError:  # msgspec's depth limit is the interpreter's recursion limit
        raise GatewayError(400, "invalid_json", "request body nested too deeply") from None
    if not isinstance(body, dict):
        raise GatewayError(400, "invalid_request", "request body must be a JSON object")
    return body
