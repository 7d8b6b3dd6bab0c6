"""Your own consumer on the log, with FastStream: a broker that connects as voltbus's settings say, and
subscribers that read one stream of the namespace in order, each message decoded by voltbus's codec.

docs/consumers.md has the recipe; examples/metrics_consumer/ is a whole consumer.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from faststream import AckPolicy
from faststream.nats import ConsumerConfig, DeliverPolicy, JStream, NatsBroker, NatsMessage, NatsRouter
from faststream.nats.security import NatsSecurity, NatsUserPassword

from voltbus.schemas import codec
from voltbus.schemas.codec import AnyEvent
from voltbus.schemas.errors import DecodeError
from voltbus.schemas.subjects import WHOLE_STREAM, Topology
from voltbus.services.eventlog.connection import credentials
from voltbus.services.eventlog.log import StreamName
from voltbus.services.eventlog.records import BadEvent, Envelope
from voltbus.services.settings import NatsSettings, Settings

Item = Envelope | BadEvent
"""What a handler gets: a decoded event with its sequence, subject and stored time, or an undecodable message."""


def log_broker(settings: NatsSettings | None = None, **options: Any) -> NatsBroker:
    """A FastStream ``NatsBroker`` for the bus of ``settings`` (default: ``VOLTBUS_NATS__*``): its servers, user
    and password, inbox prefix and TLS, reconnecting forever; ``options`` go to ``NatsBroker`` as they are."""
    settings = settings or Settings().nats
    auth = credentials(settings)
    security: NatsSecurity | None = None
    if "user" in auth:
        security = NatsUserPassword(auth["user"], auth["password"], ssl_context=auth.get("tls"))
    elif "tls" in auth:
        security = NatsSecurity(ssl_context=auth["tls"])
    defaults: dict[str, Any] = {
        "name": "voltbus-consumer",
        "connect_timeout": settings.connect_timeout_s,
        "max_reconnect_attempts": -1,
        "security": security,
    }
    if "inbox_prefix" in auth:
        defaults["inbox_prefix"] = auth["inbox_prefix"]
    servers = [url.strip() for url in settings.url.split(",") if url.strip()]
    return NatsBroker(servers, **(defaults | options))


def decoder(stream: StreamName) -> Callable[[NatsMessage], Awaitable[Item]]:
    """A FastStream decoder of ``stream``'s messages into :data:`Item` (voltbus's codec for that stream)."""
    decode: Callable[[bytes], AnyEvent] = codec.decode_control if stream == "control" else codec.decode_spans

    async def decode_message(msg: NatsMessage) -> Item:
        raw = msg.raw_message
        meta = raw.metadata
        seq, stored = meta.sequence.stream, meta.timestamp.timestamp()
        try:
            return Envelope(seq=seq, subject=raw.subject, time=stored, event=decode(raw.data))
        except DecodeError as exc:
            return BadEvent(seq=seq, subject=raw.subject, data=raw.data, reason=exc.reason, time=stored)

    return decode_message


def log_subscriber(
    broker: NatsBroker | NatsRouter,
    stream: StreamName,
    settings: NatsSettings | None = None,
    *,
    from_seq: int = 1,
    subject: str | None = None,
    **options: Any,
) -> Any:
    """``broker.subscriber(...)`` reading ``stream`` of the settings' namespace in order from ``from_seq``, on
    ``subject`` (a filter; default: the whole stream), its handler given an :data:`Item` per message.

    An ordered consumer (ephemeral, in server memory, flow-controlled, re-created after a gap): it never
    declares or changes the stream and acknowledges nothing, so a read-only user (``dashboard``) may run it.
    A consumer that keeps its own position passes the sequence after the last it handled as ``from_seq``.
    """
    settings = settings or Settings().nats
    topology = Topology(namespace=settings.namespace)
    name = topology.control_stream if stream == "control" else topology.spans_stream
    return broker.subscriber(
        subject or WHOLE_STREAM,
        stream=JStream(name, declare=False),
        ordered_consumer=True,
        deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
        config=ConsumerConfig(opt_start_seq=max(from_seq, 1)),
        decoder=decoder(stream),
        ack_policy=AckPolicy.MANUAL,
        **options,
    )
