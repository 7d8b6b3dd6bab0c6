"""A learner resuming a run pushes the version it continues from to vLLM again: a vLLM restarted
meanwhile serves its base model (labelled ``default``), which calls would otherwise record as unknown
until the next step, with the gateway's label of the last push."""

from __future__ import annotations

from pathlib import Path

import httpx
import torch

from voltbus.services.learner import checkpoints
from voltbus.services.learner.grpo.loop import GRPO
from voltbus.services.learner.grpo.policy import Policy, initial_weights
from voltbus.services.learner.session import Session
from voltbus.services.settings import NatsSettings, ProjectorSettings
from voltbus.store import connect

from ..gateway.stub_vllm import VllmControl
from ..gateway.vllm_fleet import ADMIN, FleetFactory, make_fleet

__all__ = ["make_fleet"]  # the fixture

TASKS = [{"id": "1+2", "a": 1, "b": 2}]


async def test_a_resumed_learner_pushes_the_version_it_continues_from(
    make_fleet: FleetFactory, nats_settings: NatsSettings, policy_dir: Path, tmp_path: Path
) -> None:
    stub = VllmControl()
    fleet = await make_fleet(stub)
    update = {"model_dir": policy_dir, "weights_dir": tmp_path / "w", "steps": 1, "tasks_per_step": 1}
    s = fleet.learner.model_copy(update={**update, "group_size": 2})
    store = await connect(settings=nats_settings)
    session = Session(store, "run-resumed", ProjectorSettings(url="http://127.0.0.1:1"))
    try:  # a first learner without vllm_urls: step 0 trained, saved, published, recorded
        first = GRPO(s.model_copy(update={"vllm_urls": []}))
        await session.open(first.name, {})
        await session.begin_step(0, await first.publish(session, *initial_weights(s)), [])
        policy = Policy.load(s)
        with torch.no_grad():
            next(policy.model.parameters()).add_(0.01)
        weights, sha = policy.save(session.run_id, 0)
        await checkpoints.save(session, s, weights.parent, 0, sha)
        updated = await first.publish(session, weights, sha)
        await session.complete_step(0, {}, updated)
        assert stub.ops == []
        await GRPO(s).run(session, TASKS)  # resumed at step 1 = steps: nothing left to train
    finally:
        await session.close()
        await store.close()
    assert stub.ops[0] == "pause:wait" and stub.ops[-1] == "resume" and stub.label == updated
    assert stub.weights == ["models/start", str(weights.parent)]  # the checkpoint of step 0
    async with httpx.AsyncClient(base_url=fleet.url, headers=ADMIN) as http:
        state = (await http.get("/admin/inflight")).json()
    assert state["paused"] is False and state["versions"] == {fleet.engines[0]: updated}
