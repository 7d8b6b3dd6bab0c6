"""One selection of a run's rows (issue 28): ``export-training --run R`` and ``train --offline --from-run R`` take
the rollouts R's steps sampled, step 0's batch (sampled with the starting version) included, and not the rollouts
validated with a version R published."""

from __future__ import annotations

from pathlib import Path

from tests.projections.workload import telemetry
from voltbus.schemas.base import derive_id
from voltbus.schemas.training import StepCompleted, StepStarted
from voltbus.services.learner.grpo.offline import Selection
from voltbus.services.ops.training_export import selection
from voltbus.store import Store

from .test_training import rebuild


async def ended_with_rows(store: Store, mode: str, resources_id: str) -> str:
    rollout = await store.enqueue_rollout({"q": mode}, mode=mode, resources_id=resources_id)
    claimed = await store.dequeue_rollout(worker_id="w")
    assert claimed is not None and claimed.rollout_id == rollout.rollout_id
    await store.log.publish_spans(telemetry(rollout.rollout_id, claimed.attempt.attempt_id, 1))
    await store.update_attempt(rollout.rollout_id, claimed.attempt.attempt_id, status="succeeded")
    return rollout.rollout_id


async def test_export_and_offline_retraining_select_the_same_rollouts(store: Store, tmp_path: Path) -> None:
    run = "run-sel"
    batch = [await ended_with_rows(store, "train", f"{run}:1") for _ in range(2)]  # step 0, the starting version
    started = StepStarted(event_id=derive_id(run, "s0"), run_id=run, step=0, resources_id=f"{run}:1",
                          rollout_ids=batch, at=1.0)  # fmt: skip
    done = StepCompleted(event_id=derive_id(run, 0), run_id=run, step=0, metrics={}, resources_id=f"{run}:2", at=2.0)
    await store.log.append([started])
    await store.log.append([done])
    validated = await ended_with_rows(store, "val", f"{run}:2")  # after training, with the version step 0 published
    con = await rebuild(store, tmp_path / "p.duckdb")
    try:
        clause, params = selection("trajectories", None, run, None, None)
        exported = {r for (r,) in con.execute(f"SELECT rollout_id FROM trajectories WHERE {clause}", params).fetchall()}
        sql, offline_params = Selection(run=run).query()
        retrained = {row[0] for row in con.execute(sql, offline_params).fetchall()}
    finally:
        con.close()
    assert exported == retrained == set(batch) and validated not in exported
