"""Dispatch: eight consumers race on 2,000 queued rollouts; each is claimed exactly once, FIFO per consumer."""

from __future__ import annotations

import asyncio
import collections

import pytest

from voltbus.schemas.rollouts import AttemptClaimed
from voltbus.services.eventlog import Envelope
from voltbus.services.settings import NatsSettings
from voltbus.store import EnqueueRolloutRequest, connect


@pytest.mark.timeout(300)
async def test_eight_consumers_claim_two_thousand_rollouts_exactly_once(nats_settings: NatsSettings) -> None:
    stores = [await connect(settings=nats_settings) for _ in range(8)]
    try:
        queued = await stores[0].enqueue_many_rollouts([EnqueueRolloutRequest(input=i) for i in range(2000)])
        position = {r.rollout_id: i for i, r in enumerate(queued)}
        claims: dict[int, list[str]] = collections.defaultdict(list)

        async def consume(n: int) -> None:
            # an empty dequeue only means nothing arrived within the short wait; go on until all are claimed
            while sum(map(len, claims.values())) < 2000:
                batch = await stores[n].dequeue_many_rollouts(limit=5, worker_id=f"w{n}")
                claims[n] += [r.rollout_id for r in batch]

        await asyncio.wait_for(asyncio.gather(*(consume(n) for n in range(8))), timeout=240)
        every = [rid for got in claims.values() for rid in got]
        assert len(every) == 2000 and set(every) == set(position), "a rollout was lost or claimed twice"
        for got in claims.values():  # each consumer sees the queue in enqueue order
            assert [position[rid] for rid in got] == sorted(position[rid] for rid in got)
        assert sum(1 for got in claims.values() if got) >= 2, "the race had only one participant"
        claimed_events = [
            e.event.rollout_id
            async for e in stores[0].log.replay()
            if isinstance(e, Envelope) and isinstance(e.event, AttemptClaimed)
        ]
        assert collections.Counter(claimed_events) == collections.Counter(set(every))
    finally:
        for store in stores:
            await store.close()
