"""A coordinator running in-process against the session's nats-server, and event waits."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import pytest

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
        done, _ = await asyncio.wait([task], timeout=10)
        if not done:
            for t in asyncio.all_tasks():
                t.print_stack(limit=6)
        await asyncio.wait_for(task, timeout=1)


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


async def until_worker(store: Store, worker_id: str, status: str, timeout: float = 10) -> None:
    """Wait until the worker's current status snapshot says ``status``, with a deadline."""
    start = (await store.log.js.stream_info(store.topology.control_stream)).state.last_seq
    current = await store.get_worker_by_id(worker_id)
    if current is not None and current.status == status:
        return
    replay = store.log.replay("control", from_seq=start + 1, follow=True, subject=store.topology.worker(worker_id))
    try:
        async with asyncio.timeout(timeout):
            async for item in replay:
                if isinstance(item, Envelope) and getattr(item.event, "status", None) == status:
                    return
    finally:
        await replay.aclose()  # type: ignore[attr-defined]


async def until_event(
    store: Store, rollout_id: str, matches: Callable[[AnyEvent], bool], timeout: float = 10
) -> AnyEvent:
    """Wait for a stored event of the rollout that ``matches`` (already there, or arriving), with a deadline."""
    replay = store.log.replay("control", follow=True, subject=store.topology.rollout_any(rollout_id))
    try:
        async with asyncio.timeout(timeout):
            async for item in replay:
                if isinstance(item, Envelope) and matches(item.event):
                    return item.event
    finally:
        await replay.aclose()  # type: ignore[attr-defined]
    raise AssertionError("unreachable")
