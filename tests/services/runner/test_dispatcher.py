"""The runner's dispatcher: waiting slots are served by shared fetch rounds; stop and failure reach them."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.conftest import start_server, wait_for
from voltbus.services.runner.dispatch import Dispatcher
from voltbus.services.settings import NatsSettings
from voltbus.store import Store, connect


async def test_waiting_slots_get_queued_rollouts_in_order_then_none_on_stop(store: Store) -> None:
    queued = [await store.enqueue_rollout({"i": i}) for i in range(3)]
    dispatcher, stop = Dispatcher(store), asyncio.Event()
    running = asyncio.create_task(dispatcher.run(stop))
    claims = {f"w{i}": asyncio.create_task(dispatcher.claim(f"w{i}")) for i in range(4)}
    await wait_for(lambda: sum(c.done() for c in claims.values()) == 3, what="three claims")
    done = {w: c.result() for w, c in claims.items() if c.done()}
    order = [r.rollout_id for r in queued]
    assert sorted((r.rollout_id for r in done.values()), key=order.index) == order  # type: ignore[union-attr]
    for worker_id, rollout in done.items():
        assert rollout is not None and rollout.attempt.worker_id == worker_id
        assert (rollout.status, rollout.attempt.status) == ("running", "running")  # the runner starts it at once
    (left,) = set(claims) - set(done)
    stop.set()
    assert await asyncio.wait_for(claims[left], 10) is None  # the slot with nothing is released at stop
    await asyncio.wait_for(running, 10)
    idle = await store.get_worker_by_id(left)
    assert idle is not None and idle.status == "idle"  # its first empty wait reported it


async def test_a_dead_connection_ends_every_waiting_slot(nats_settings: NatsSettings) -> None:
    broken = await connect(settings=nats_settings)
    await broken.close()
    dispatcher = Dispatcher(broken)
    claim = asyncio.create_task(dispatcher.claim("w1"))
    with pytest.raises(Exception):  # noqa: B017, PT011 - whatever nats-py raises for a closed connection
        await asyncio.wait_for(dispatcher.run(asyncio.Event()), 10)
    with pytest.raises(type(dispatcher.failed)):
        await claim
    with pytest.raises(type(dispatcher.failed)):
        await dispatcher.claim("w2")  # later claims fail at once


@pytest.mark.timeout(90)
async def test_slots_waiting_through_a_server_restart_are_served_after_it(tmp_path: Path) -> None:
    server = start_server(tmp_path / "nats")
    store = await connect(settings=NatsSettings(url=server.url, namespace="disp", request_timeout_s=2.0))
    dispatcher, stop = Dispatcher(store), asyncio.Event()
    running = asyncio.create_task(dispatcher.run(stop))
    try:
        claim = asyncio.create_task(dispatcher.claim("w1"))
        await wait_for(lambda: "w1" in dispatcher.reported, what="a first empty round")
        server.kill()
        server.start()  # rounds fail meanwhile (no responders, JetStream 503, timeouts): retried, not fatal
        queued: list[object] = []
        await wait_for(lambda: enqueue_when_back(store, queued), timeout=30, what="the bus back", every=0.2)
        rollout = await asyncio.wait_for(claim, 30)
        assert rollout is not None and rollout.rollout_id == queued[0].rollout_id and not running.done()  # type: ignore[attr-defined]
    finally:
        stop.set()
        await asyncio.wait_for(running, 10)
        await store.close()
        server.stop()


async def enqueue_when_back(store: Store, queued: list[object]) -> bool:
    try:
        queued.append(await store.enqueue_rollout({"after": "restart"}))
    except Exception:  # noqa: BLE001 - the bus is still coming back: try again
        return False
    return True
