"""The runner's dispatcher: waiting slots are served by shared fetch rounds; stop and failure reach them."""

from __future__ import annotations

import asyncio

import pytest

from tests.conftest import wait_for
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
        assert rollout is not None and rollout.status == "preparing" and rollout.attempt.worker_id == worker_id
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
