"""Connecting to the bus with one clear error when it is not there."""

from __future__ import annotations

import asyncio
import logging

from nats.aio.client import Client

from voltbus.schemas.errors import BusUnavailable

from ..settings import NatsSettings

log = logging.getLogger(__name__)


async def connect(settings: NatsSettings, name: str = "voltbus") -> Client:
    """Connect to ``settings.url``; raise :class:`BusUnavailable` naming the URL if nothing answers.

    Once connected the client reconnects forever, so a restarted server is picked up again.
    """
    nc = Client()
    errors: list[str] = []

    async def on_error(exc: Exception) -> None:
        errors.append(str(exc) or type(exc).__name__)
        if nc.is_connected:
            log.warning("nats (%s): %s", name, errors[-1])

    async def on_disconnect() -> None:
        if nc.connected_url is None:
            return
        log.warning("nats: disconnected from %s, reconnecting", settings.url)

    async def on_reconnect() -> None:
        log.info("nats: reconnected to %s", settings.url)

    try:
        async with asyncio.timeout(settings.connect_timeout_s * 2):
            await nc.connect(
                settings.url,
                name=name,
                connect_timeout=settings.connect_timeout_s,
                max_reconnect_attempts=-1,
                reconnect_time_wait=0.25,
                drain_timeout=settings.request_timeout_s,
                error_cb=on_error,
                disconnected_cb=on_disconnect,
                reconnected_cb=on_reconnect,
            )
    except (TimeoutError, OSError, Exception) as exc:  # nats-py raises many unrelated types here
        await nc.close()
        reason = errors[-1] if errors else (str(exc) or type(exc).__name__)
        raise BusUnavailable(settings.url, reason) from None
    return nc
