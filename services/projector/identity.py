"""Which bus and namespace a projector follows (``GET /identity``), and the check every command that queries a
projector makes first: a projector of another bus or namespace is refused, never queried."""

from __future__ import annotations

import asyncio
import contextlib
from urllib.parse import urlsplit, urlunsplit

import httpx
import nats.errors
import nats.js.errors
from nats.aio.client import Client

from voltbus.schemas.errors import InvalidCommand, VoltbusError
from voltbus.services.eventlog import connect, topology_of
from voltbus.services.settings import NatsSettings, Settings


def public_url(url: str) -> str:
    """A bus URL without the credentials it may carry.

    >>> public_url("nats://admin:s3cret@127.0.0.1:4222"), public_url("nats://nats:4222")
    ('nats://127.0.0.1:4222', 'nats://nats:4222')
    """
    parts = urlsplit(url)
    host = parts.hostname or ""
    netloc = f"[{host}]" if ":" in host else host
    netloc += f":{parts.port}" if parts.port else ""
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


async def bus_id(nc: Client, bus: NatsSettings) -> str:
    """The namespace's control stream as the bus knows it (its creation time): the same on every URL that
    reaches that bus, different on another bus; ``""`` where the stream does not exist."""
    try:
        info = await nc.jetstream(timeout=bus.request_timeout_s).stream_info(topology_of(bus).control_stream)
    except nats.js.errors.NotFoundError:
        return ""
    return str(info.created or "")


def identity(bus: NatsSettings, stream_id: str) -> dict[str, str]:
    """The body of ``GET /identity``."""
    return {"bus": public_url(bus.url), "namespace": bus.namespace, "bus_id": stream_id}


def describe(url: str, found: dict[str, str]) -> str:
    """One line naming a projector and what it follows."""
    return f"projector {url} (bus {found.get('bus', '?')}, namespace {found.get('namespace', '?')})"


async def _own_bus_id(bus: NatsSettings) -> str | None:
    """This command's own bus id, or None where its bus cannot be reached (then the URLs are compared)."""
    with contextlib.suppress(VoltbusError, OSError, TimeoutError, nats.errors.Error):
        nc = await asyncio.wait_for(connect(bus, "voltbus-cli"), bus.connect_timeout_s + 1)
        try:
            return await bus_id(nc, bus)
        finally:
            await nc.close()
    return None


def check_projector(settings: Settings) -> str:
    """``check`` from code outside an event loop (the CLI)."""
    return asyncio.run(check(settings))


async def check(settings: Settings) -> str:
    """Refuse (``InvalidCommand``, one line) a projector that follows another bus or namespace than ``settings``;
    return the line naming the projector that will answer."""
    url = settings.projector.url.rstrip("/")
    try:
        async with httpx.AsyncClient(timeout=10) as client:
            answer = await client.get(f"{url}/identity", headers=settings.projector.auth_headers)
    except httpx.TransportError:
        return f"projector {url}"  # nothing answers: the query says so, with its hint
    if answer.status_code in (401, 403):
        raise InvalidCommand(
            f"the projector at {url} refused the SQL token (HTTP {answer.status_code}): set VOLTBUS_PROJECTOR__TOKEN "
            "(compose and voltbus up: source admin.env)"
        )
    if answer.status_code != 200:
        raise InvalidCommand(
            f"{url} is not a voltbus projector that answers /identity (HTTP {answer.status_code}): "
            "pass --projector-url (or VOLTBUS_PROJECTOR__URL) with the URL of this bus's projector"
        )
    found: dict[str, str] = answer.json()
    ours = identity(settings.nats, "")
    mine = await _own_bus_id(settings.nats)
    same_bus = found.get("bus_id") == mine if mine else found.get("bus") == ours["bus"]
    if found.get("namespace") != ours["namespace"] or not same_bus:
        raise InvalidCommand(
            f"refusing {describe(url, found)}: it follows another bus or namespace than this command "
            f"(bus {ours['bus']}, namespace {ours['namespace']}); pass --projector-url with this bus's projector, "
            "or --nats-url / VOLTBUS_NATS__NAMESPACE for its bus"
        )
    return describe(url, found)
