"""A coordinator running in-process against the session's nats-server, and event waits."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import pytest

from voltbus.schemas import codec
from voltbus.schemas.events import AnyEvent
from voltbus.services.coordinator.app import run
from voltbus.services.eventlog import Envelope
from voltbus.services.settings import CoordinatorSettings, NatsSettings, Settings
from voltbus.store import Store, connect


@asynccontextmanager
async def running_coordinator(nats: NatsSettings) -> AsyncIterator[None]:
    """Run one coordinator until the block ends; fail loudly if it crashed."""
    stop = asyncio.Event()
    settings = Settings(nats=nats, coordinator=CoordinatorSettings(tick_s=0.05, restart_delay_s=0.05))
    task = asyncio.create_task(run(settings, stop))
    try:
        yield
    finally:
        stop.set()
        await asyncio.wait_for(task, timeout=10)


@pytest.fixture
async def coordinator(nats_settings: NatsSettings) -> AsyncIterator[None]:
    """A coordinator for the test's namespace."""
    async with running_coordinator(nats_settings):
        yield


@pytest.fixture
async def store(nats_settings: NatsSettings) -> AsyncIterator[Store]:
    """A connected store client."""
    client = await connect(settings=nats_settings)
    yield client
    await client.close()


async def until_event(
    store: Store, rollout_id: str, matches: Callable[[AnyEvent], bool], timeout: float = 10
) -> AnyEvent:
    """Wait for an event of the rollout that ``matches`` (already stored, or arriving), with a deadline."""
    arrived: asyncio.Queue[AnyEvent] = asyncio.Queue()

    async def on_msg(msg: object) -> None:
        arrived.put_nowait(codec.decode_control(msg.data))  # type: ignore[attr-defined]

    sub = await store.log.nc.subscribe(store.topology.rollout_any(rollout_id), cb=on_msg)
    try:
        envelopes, _ = await store.log.read(rollout_id)
        for env in envelopes:
            if isinstance(env, Envelope) and matches(env.event):
                return env.event
        async with asyncio.timeout(timeout):
            while not matches(event := await arrived.get()):
                pass
            return event
    finally:
        await sub.unsubscribe()
