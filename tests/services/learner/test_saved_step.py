"""A learner killed after saving a step's update but before recording the step: started again, it records
that step with the saved weights instead of training it again from the starting weights (found by the
kill -9 fault suite: the restart republished the starting weights as a newer version, and every row of
the step's batch was then dropped as stale: "no trainable rows")."""

from __future__ import annotations

from pathlib import Path

import torch

from voltbus.schemas.training import RunFinished, StepCompleted
from voltbus.services.learner import checkpoints
from voltbus.services.learner.grpo.loop import GRPO
from voltbus.services.learner.grpo.policy import Policy, initial_weights
from voltbus.services.learner.session import Session
from voltbus.services.settings import LearnerSettings, NatsSettings, ProjectorSettings
from voltbus.store import connect

from .runs import run_events

TASKS = [{"id": "1+2", "a": 1, "b": 2}]


async def test_a_saved_but_unrecorded_step_is_recorded_not_retrained(
    nats_settings: NatsSettings, policy_dir: Path, tmp_path: Path
) -> None:
    s = LearnerSettings(
        model_dir=policy_dir, weights_dir=tmp_path / "w", steps=1, tasks_per_step=1, group_size=2, rollout_timeout_s=1
    )
    store = await connect(settings=nats_settings)
    session = Session(store, "run-saved", ProjectorSettings(url="http://127.0.0.1:1"))
    algo = GRPO(s)
    try:  # what the first learner did before it was killed: step 0 sampled, updated, saved, published
        await session.open(algo.name, {})
        first = await algo.publish(session, *initial_weights(s))
        await session.begin_step(0, first, algo.requests(session.run_id, 0, TASKS, first))
        policy = Policy.load(s)
        with torch.no_grad():
            next(policy.model.parameters()).add_(0.01)  # the update
        weights, sha = policy.save(session.run_id, 0)
        await checkpoints.save(session, s, weights.parent, 0, sha)
        updated = await algo.publish(session, weights, sha)
        await GRPO(s).run(session, TASKS)  # the restarted learner
        latest = await store.get_resources_by_id(session.run_id)
    finally:
        await session.close()
        await store.close()
    events = await run_events(nats_settings, "run-saved")
    assert [(e.step, e.resources_id) for e in events if isinstance(e, StepCompleted)] == [(0, updated)]
    assert latest is not None and f"{session.run_id}:{latest.version}" == updated  # no version published again
    assert isinstance(events[-1], RunFinished) and events[-1].status == "succeeded"
