"""The main job on embedded defaults: use the bus at the configured URL, or start one, and run the job.

For now the job is the self-check; later it trains the example agent.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from voltbus.schemas.errors import BusStartFailed, BusUnavailable

from .eventlog import connect
from .natsserver import NatsServer
from .selfcheck import run_selfcheck
from .settings import Settings


async def _answers(settings: Settings) -> bool:
    probe = settings.nats.model_copy(update={"connect_timeout_s": 0.5})
    try:
        nc = await connect(probe, name="voltbus-probe")
    except BusUnavailable:
        return False
    await nc.close()
    return True


def start_embedded(settings: Settings, say: Callable[[str], None]) -> NatsServer:
    """Start the embedded bus on the configured port, or on a free one if that port is taken."""
    try:
        server = NatsServer(settings.bus, settings.nats.max_payload).start()
    except BusStartFailed as exc:
        if "in use" not in str(exc):
            raise
        say(f"{exc.reason.split(';')[0]}; using a free port instead")
        free = settings.bus.model_copy(update={"port": 0, "monitor_port": 0})
        server = NatsServer(free, settings.nats.max_payload).start()
    say(f"started an embedded NATS JetStream at {server.url} (store {settings.bus.data_dir})")
    return server


def run_demo(settings: Settings, rollouts: int, spans: int, say: Callable[[str], None]) -> None:
    """Run the self-check on the bus at the configured URL, starting an embedded one if none answers."""
    server = None
    if asyncio.run(_answers(settings)):
        say(f"using the bus at {settings.nats.url}")
    else:
        server = start_embedded(settings, say)
        settings.nats.url = server.url
    try:
        settings.nats.namespace = "vbcheck"
        asyncio.run(run_selfcheck(settings.nats, rollouts, spans, say))
        say("demo finished: the bus appends, refuses conflicts, deduplicates and replays exactly")
    finally:
        if server:
            server.stop()
