"""``Trainer.dev`` on a bus where a plain runner is already attached: the run's rollouts are served by the
Trainer's own runners only (issue 28: other runners claimed part of the batch)."""

from __future__ import annotations

import asyncio
import signal

import pytest

from voltbus.schemas.rollouts import AttemptClaimed
from voltbus.services.eventlog import Envelope
from voltbus.services.settings import NatsSettings, Settings
from voltbus.store import connect
from voltbus.trainer import Trainer

from ..runner.conftest import RESOURCES
from ..runner.test_runner import AGENTS
from ..runner.test_runner_faults import runner_process


async def claims(nats: NatsSettings) -> list[AttemptClaimed]:
    store = await connect(settings=nats)
    try:
        return [
            e.event
            async for e in store.log.replay("control")
            if isinstance(e, Envelope) and isinstance(e.event, AttemptClaimed)
        ]
    finally:
        await store.close()


async def served_by_plain_runner(nats: NatsSettings) -> None:
    """A rollout of the default group, enqueued and served: the plain runner is up and claiming."""
    store = await connect(settings=nats)
    try:
        await store.add_resources(RESOURCES)
        rollout = await store.enqueue_rollout({"q": 0})
        [done] = await store.wait_for_rollouts(rollout_ids=[rollout.rollout_id], timeout=60)
        assert done.status == "succeeded" and done.attempt.worker_id.startswith("Doomed-")
    finally:
        await store.close()


@pytest.mark.timeout(300)
def test_dev_is_served_by_its_own_runners_beside_a_plain_one(nats_settings: NatsSettings) -> None:
    plain = runner_process(nats_settings, f"{AGENTS}:returns_float", slots="8")  # its workers: Doomed-<n>
    try:
        asyncio.run(served_by_plain_runner(nats_settings))
        tasks = [{"q": i} for i in range(16)]
        trainer = Trainer(n_runners=2, initial_resources=RESOURCES, settings=Settings(nats=nats_settings))
        out = trainer.dev("tests.services.runner.calc_agent:returns_float", tasks)
        assert out["train"]["rollouts"] == 16, out
    finally:
        plain.send_signal(signal.SIGTERM)
        plain.wait(30)
    workers = [c.worker_id or "" for c in asyncio.run(claims(nats_settings))]
    assert len(workers) == 1 + 16
    assert sum(w.startswith("Doomed-") for w in workers) == 1  # only the plain rollout; none of the run's 16
