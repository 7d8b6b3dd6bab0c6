"""Connecting to the bus with one clear error when it is not there; a refused publish raised at once."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Sequence
from typing import Any, TypeVar

import nats.errors
from nats.aio.client import Client

from voltbus.schemas.errors import BusAuthRefused, BusUnavailable, PermissionDenied

from ..settings import NatsSettings
from .parser import STORED, SinkParser

log = logging.getLogger(__name__)

Sink = Callable[[bytes, bytes, bytes], None]
"""Takes a delivered message's subject, reply subject and payload, as the protocol parser read them."""

T = TypeVar("T")

_REFUSED = re.compile(r'permissions violation for publish to "([^"]+)"')
"""The server's ``-ERR`` for a refused publish, as nats-py hands it over (lower-cased)."""


class Connection(Client):
    """A nats-py client whose subscriptions can hand messages straight to a sink.

    A stored message delivered by JetStream (reply subject ``$JS.ACK...``) on a subscription that has a
    sink skips nats-py's per-message work (header parsing, a ``Msg``, the subscription's queue and task):
    most of what reading a stored event cost a projector (BENCHMARKS.md, "Event log"). It goes
    to the sink in delivery order, payload or not; most are cut out of the socket's reads by ``SinkParser``
    before nats-py's parser sees them. Anything else (JetStream's flow control and heartbeats,
    which are only headers) takes nats-py's usual path to the subscription's callback.
    """

    def __init__(self) -> None:
        super().__init__()
        self.sinks: dict[int, Sink] = {}
        """Sink of each subscription id that has one."""
        self.refusals: dict[str, set[asyncio.Future[str]]] = {}
        """Publishes in flight per subject (lower case), each resolved with the subject when the server refuses it."""
        self._ps = SinkParser(self)

    async def _process_err(self, err_msg: str) -> None:
        """A refused publish that a publisher is waiting for goes to it (it raises ``PermissionDenied``), not to
        the error callback: the server answers a refused publish with this ``-ERR`` only, never with an ack."""
        match = _REFUSED.search(err_msg)
        waiting = self.refusals.get(match.group(1)) if match else None
        if not waiting:
            await super()._process_err(err_msg)
            return
        self._err = nats.errors.Error(f"nats: {err_msg.strip(chr(39))}")
        for fut in waiting:
            if not fut.done():
                fut.set_result(match.group(1))  # type: ignore[union-attr]

    @contextlib.asynccontextmanager
    async def watch_refusals(self, subjects: Collection[str]) -> AsyncIterator[asyncio.Future[str]]:
        """A future resolved with the first of ``subjects`` (lower case) the server refuses this user to publish
        to while the block runs. After a refusal, the block ends with a round trip to the server, so that the
        refusals of the block's other publishes (answered before it) are taken here too."""
        fut: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        keys = {s.lower() for s in subjects}
        for key in keys:
            self.refusals.setdefault(key, set()).add(fut)
        cancelled = False
        try:
            yield fut
        except asyncio.CancelledError:
            cancelled = True
            raise
        finally:
            try:
                if fut.done() and not cancelled:
                    with contextlib.suppress(Exception):
                        await self.flush(timeout=self.options.get("drain_timeout") or 5)
            finally:
                for key in keys:
                    waiting = self.refusals.get(key)
                    if waiting is not None:
                        waiting.discard(fut)
                        if not waiting:
                            del self.refusals[key]

    async def _process_msg(self, sid: int, subject: bytes, reply: bytes, data: bytes, headers: bytes | None) -> None:
        sink = self.sinks.get(sid)
        if sink is None or not reply.startswith(STORED):
            await super()._process_msg(sid, subject, reply, data, headers)
            return
        self.stats["in_msgs"] += 1
        self.stats["in_bytes"] += len(data)
        sink(subject, reply, data)


@contextlib.asynccontextmanager
async def watch_refusals(nc: Client, subjects: Collection[str]) -> AsyncIterator[asyncio.Future[str]]:
    """``Connection.watch_refusals``; on another client, a future that never resolves (refusals time out)."""
    if isinstance(nc, Connection):
        async with nc.watch_refusals(subjects) as fut:
            yield fut
        return
    yield asyncio.get_running_loop().create_future()


def refused(nc: Client, lowered: str, subjects: Sequence[str], event_ids: Sequence[str]) -> PermissionDenied:
    """The error for a refusal of ``lowered``: the user, the subject as the publisher spelled it, the events."""
    subject = next((s for s in subjects if s.lower() == lowered), lowered)
    return PermissionDenied(nc.options.get("user"), subject, list(event_ids))


async def refusable(nc: Client, subjects: Sequence[str], event_ids: Sequence[str], work: Awaitable[T]) -> T:
    """Await ``work`` (publishes to ``subjects``); raise :class:`PermissionDenied` as soon as the server refuses
    one of them, instead of waiting for an ack that will never come."""
    async with watch_refusals(nc, subjects) as denial:
        task = asyncio.ensure_future(work)
        try:
            await asyncio.wait([task, denial], return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            task.cancel()
            raise
        if denial.done() and not (task.done() and not task.cancelled() and task.exception() is None):
            task.cancel()
            raise refused(nc, denial.result(), subjects, event_ids)
        return await task


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
