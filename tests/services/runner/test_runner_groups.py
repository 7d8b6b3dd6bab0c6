"""Runs sharing a bus: a rollout of a runner group is claimed only by that group's runners, and a plain runner's
rollouts (the default group) only by plain runners (issue 28: a Trainer's batch was served by runners already on
the bus, through another gateway with old weights)."""

from __future__ import annotations

import asyncio

from voltbus.services.runner.app import Runner
from voltbus.services.settings import NatsSettings
from voltbus.store import EnqueueRolloutRequest, Store, connect

from .conftest import runner_settings
from .test_runner import AGENTS


async def test_each_group_is_served_by_its_own_runners_only(store: Store, nats_settings: NatsSettings) -> None:
    learner = await connect(settings=nats_settings)
    learner.runner_group = "run-a"  # what Trainer.fit gives the run's learner and its runners
    try:
        run_a = await learner.enqueue_many_rollouts([EnqueueRolloutRequest(input={"q": i}) for i in range(12)])
        plain = await store.enqueue_many_rollouts([EnqueueRolloutRequest(input={"q": i}) for i in range(12)])
        assert {r.config.runner_group for r in run_a} == {"run-a"} and {r.config.runner_group for r in plain} == {""}
        stop = asyncio.Event()
        grouped = runner_settings(nats_settings, slots=4, group="run-a", worker_prefix="RunA")
        default = runner_settings(nats_settings, slots=4, worker_prefix="Plain")
        async with Runner(grouped, f"{AGENTS}:returns_float") as a, Runner(default, f"{AGENTS}:returns_float") as p:
            tasks = [asyncio.create_task(a.run(stop)), asyncio.create_task(p.run(stop))]
            ids = [r.rollout_id for r in run_a + plain]
            done = await store.wait_for_rollouts(rollout_ids=ids, timeout=60)
            stop.set()
            await asyncio.gather(*tasks)
        assert [r.status for r in done] == ["succeeded"] * 24
        served = {r.rollout_id: r.attempt.worker_id for r in done}
        assert {served[r.rollout_id].split("-")[0] for r in run_a} == {"RunA"}
        assert {served[r.rollout_id].split("-")[0] for r in plain} == {"Plain"}
        attempts = [await store.get_attempts(r.rollout_id) for r in run_a + plain]
        assert {len(a) for a in attempts} == {1}  # a refused claim opens no attempt
    finally:
        await learner.close()


async def test_a_plain_claim_of_a_groups_rollout_is_refused(store: Store, nats_settings: NatsSettings) -> None:
    """Through the store too (``dequeue_rollout``): the default group never claims a group's rollout."""
    grouped = await store.enqueue_rollout({"q": 1}, config={"runner_group": "run-b"})
    assert await store.dequeue_rollout(worker_id="plain") is None
    assert (await store.get_rollout_by_id(grouped.rollout_id)).status == "queuing"
    member = await connect(settings=nats_settings)
    member.runner_group = "run-b"
    try:
        claimed = await member.dequeue_rollout(worker_id="grouped")
    finally:
        await member.close()
    assert claimed is not None and claimed.rollout_id == grouped.rollout_id
