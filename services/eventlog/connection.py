"""Connecting to the bus with one clear error when it is not there."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections.abc import Callable
from typing import Any

from nats.aio.client import Client

from voltbus.schemas.errors import BusAuthRefused, BusUnavailable

from ..settings import NatsSettings
from .parser import STORED, SinkParser

log = logging.getLogger(__name__)

Sink = Callable[[bytes, bytes, bytes], None]
"""Takes a delivered message's subject, reply subject and payload, as the protocol parser read them."""


class Connection(Client):
    """A nats-py client whose subscriptions can hand messages straight to a sink.

    A stored message delivered by JetStream (reply subject ``$JS.ACK...``) on a subscription that has a
    sink skips nats-py's per-message work (header parsing, a ``Msg``, the subscription's queue and task):
    about three quarters of what reading a stored event cost a projector (BENCHMARKS.md, issue 4). It goes
    to the sink in delivery order, payload or not; most are cut out of the socket's reads by ``SinkParser``
    before nats-py's parser sees them. Anything else (JetStream's flow control and heartbeats,
    which are only headers) takes nats-py's usual path to the subscription's callback.
    """

    def __init__(self) -> None:
        super().__init__()
        self.sinks: dict[int, Sink] = {}
        """Sink of each subscription id that has one."""
        self._ps = SinkParser(self)

    async def _process_msg(self, sid: int, subject: bytes, reply: bytes, data: bytes, headers: bytes | None) -> None:
        sink = self.sinks.get(sid)
        if sink is None or not reply.startswith(STORED):
            await super()._process_msg(sid, subject, reply, data, headers)
            return
        self.stats["in_msgs"] += 1
        self.stats["in_bytes"] += len(data)
        sink(subject, reply, data)


async def unsubscribe(sub: Any) -> None:
    """End a subscription, where there is one left to end: on a closed connection nats-py raises instead, and in
    a ``finally`` that error would replace what is on its way out (a cancel, the real error). The server
    forgets a closed connection's interest anyway."""
    with contextlib.suppress(Exception):
        await sub.unsubscribe()


def credentials(settings: NatsSettings) -> dict[str, Any]:
    """The connect options that authenticate (user, password, own inbox prefix) and encrypt (TLS).

    >>> credentials(NatsSettings(user="runner", password="pw"))["inbox_prefix"]
    '_INBOX_runner'
    >>> credentials(NatsSettings())
    {}
    """
    options: dict[str, Any] = {}
    if settings.user:
        options |= {"user": settings.user, "password": settings.password or ""}
    prefix = settings.inbox_prefix or (f"_INBOX_{settings.user}" if settings.user else None)
    if prefix:
        options["inbox_prefix"] = prefix
    if settings.tls_ca or settings.tls_cert:
        context = ssl.create_default_context(cafile=settings.tls_ca)
        if settings.tls_cert:
            context.load_cert_chain(settings.tls_cert, settings.tls_key)
        options["tls"] = context
    return options


async def connect(settings: NatsSettings, name: str = "voltbus") -> Connection:
    """Connect to ``settings.url`` (several servers of a cluster: comma-separated); raise
    :class:`BusUnavailable` naming the URL if nothing answers.

    Once connected the client reconnects forever, to any server of the cluster, so a restarted or
    lost server is survived.
    """
    servers = [url.strip() for url in settings.url.split(",") if url.strip()]
    nc = Connection()
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
                servers,
                name=name,
                connect_timeout=settings.connect_timeout_s,
                max_reconnect_attempts=-1,
                reconnect_time_wait=0.25,
                drain_timeout=settings.request_timeout_s,
                error_cb=on_error,
                disconnected_cb=on_disconnect,
                reconnected_cb=on_reconnect,
                **credentials(settings),
            )
    except (TimeoutError, OSError, Exception) as exc:  # nats-py raises many unrelated types here
        await nc.close()
        reason = errors[-1] if errors else (str(exc) or type(exc).__name__)
        refusals = [e for e in [*errors, str(exc)] if "authorization violation" in e.lower()]
        if refusals:  # the server may also reset the socket: its refusal is the reason, not the reset
            raise BusAuthRefused(settings.url, settings.user, refusals[-1]) from None
        raise BusUnavailable(settings.url, reason) from None
    return nc
