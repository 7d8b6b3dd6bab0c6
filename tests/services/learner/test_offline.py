"""Retraining from the log with no agent running: the selection is what a run sampled, hashed; the same
selection and seed give the same dataset hash and the same first update; another seed, another order."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from voltbus.services.learner.grpo.offline import Selection, train_offline
from voltbus.services.projector.client import rebuild
from voltbus.services.settings import LearnerSettings, NatsSettings, Settings
from voltbus.trainer import GRPO, Trainer

from .agents import text_agent


@pytest.mark.timeout(300)
def test_offline_retraining_is_reproducible(nats_settings: NatsSettings, policy_dir: Path, tmp_path: Path) -> None:
    tasks = [{"id": f"t{i}", "a": i, "b": 2} for i in range(4)]
    algo = GRPO(model_dir=policy_dir, steps=2, tasks_per_step=2, group_size=3, weights_dir=tmp_path / "online")
    online = Trainer(algorithm=algo, n_runners=6, settings=Settings(nats=nats_settings), say=print).fit(
        text_agent, tasks, val_dataset=tasks[:2]
    )
    db = tmp_path / "projection.duckdb"
    asyncio.run(rebuild(Settings(nats=nats_settings), db, print))

    def offline(run_id: str, seed: int) -> dict:
        learner = LearnerSettings(
            run_id=run_id, model_dir=policy_dir, seed=seed, tasks_per_step=1, group_size=3, weights_dir=tmp_path / "w"
        )
        settings = Settings(nats=nats_settings, learner=learner)
        return asyncio.run(train_offline(settings, Selection(run=online["run_id"]), 1, print, db=db))

    first, again, other = offline("off-a", 0), offline("off-b", 0), offline("off-c", 1)
    assert first["rows"] == 12  # the run's 2 steps x 2 tasks x 3 rollouts; validation rollouts are not in it
    assert first["dataset_sha256"] == again["dataset_sha256"] == other["dataset_sha256"]
    assert len(first["steps"]) == 4 and first["published"] == "off-a:1"
    assert [s["weights_sha256"] for s in first["steps"]] == [s["weights_sha256"] for s in again["steps"]]
    assert first["steps"][0]["weights_sha256"] != other["steps"][0]["weights_sha256"]
    narrower = Selection(run=online["run_id"], where="t.task_id LIKE '%:0:%'")
    learner = LearnerSettings(run_id="off-d", model_dir=policy_dir, weights_dir=tmp_path / "w")
    step0 = asyncio.run(train_offline(Settings(nats=nats_settings, learner=learner), narrower, 1, print, db=db))
    assert step0["rows"] == 6 and step0["dataset_sha256"] != first["dataset_sha256"]
