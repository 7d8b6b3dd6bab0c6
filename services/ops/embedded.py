"""A bus to talk to: whether the configured one answers, else an embedded one started on its port or a free one
(``Trainer`` and ``voltbus demo`` without a running bus)."""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import urlsplit

from voltbus.schemas.errors import BusStartFailed, BusUnavailable
from voltbus.services.eventlog import connect
from voltbus.services.settings import Settings

from .natsserver import NatsServer


async def answers(settings: Settings) -> bool:
    """Whether the configured bus accepts a connection within half a second."""
    probe = settings.nats.model_copy(update={"connect_timeout_s": 0.5})
    try:
        nc = await connect(probe, name="voltbus-probe")
    except BusUnavailable:
        return False
    await nc.close()
    return True


def embedded_port(settings: Settings) -> int:
    """The port an embedded bus takes: ``bus.port`` when set, else the port of ``nats.url`` (where the clients
    look for it), else ``bus.port``'s default."""
    port = urlsplit(settings.nats.url).port
    return settings.bus.port if "port" in settings.bus.model_fields_set or not port else port


def start_embedded(settings: Settings, say: Callable[[str], None]) -> NatsServer:
    """Start the embedded bus on the configured port (``embedded_port``), or on a free one if that port is taken."""
    try:
        bus = settings.bus.model_copy(update={"port": embedded_port(settings)})
        server = NatsServer(bus, settings.nats.max_payload).start()
    except BusStartFailed as exc:
        if "in use" not in str(exc):
            raise
        say(f"{exc.reason.split(';')[0]}; using a free port instead")
        free = settings.bus.model_copy(update={"port": 0, "monitor_port": 0})
        server = NatsServer(free, settings.nats.max_payload).start()
    say(f"started an embedded NATS JetStream at {server.url} (store {settings.bus.data_dir})")
    return server
