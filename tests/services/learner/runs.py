"""Reading a training run's events back from the log, for the learner tests."""

from __future__ import annotations

from typing import Any

from voltbus.services.eventlog import Envelope
from voltbus.services.settings import NatsSettings
from voltbus.store import connect


async def run_events(nats: NatsSettings, run_id: str) -> list[Any]:
    store = await connect(settings=nats)
    try:
        stored, _ = await store.log.read_subject(store.topology.run(run_id))
    finally:
        await store.close()
    return [e.event for e in stored if isinstance(e, Envelope)]
