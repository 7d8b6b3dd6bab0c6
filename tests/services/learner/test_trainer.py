"""``Trainer(algorithm=GRPO(...)).fit`` runs the whole system in one process on a real bus: the loop ran,
versions were published and served, steps were recorded with their metrics, validation before and after."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from voltbus.schemas.training import RunFinished, StepCompleted, StepStarted
from voltbus.services.settings import NatsSettings, Settings
from voltbus.store import connect
from voltbus.trainer import GRPO, Trainer

from .agents import text_agent
from .runs import run_events


@pytest.mark.timeout(300)
def test_fit_runs_the_loop_and_publishes_versions(nats_settings: NatsSettings, policy_dir: Path, tmp_path: Path):
    tasks = [{"id": f"t{i}", "a": i, "b": 1} for i in range(6)]
    algo = GRPO(model_dir=policy_dir, steps=2, tasks_per_step=2, group_size=3, weights_dir=tmp_path / "w")
    lines: list[str] = []
    result = Trainer(algorithm=algo, n_runners=6, settings=Settings(nats=nats_settings), say=lines.append).fit(
        text_agent, tasks, val_dataset=tasks[:3]
    )
    assert result["before"]["rollouts"] == 3 and result["after"]["rollouts"] == 3
    events = asyncio.run(run_events(nats_settings, result["run_id"]))
    completed = [e for e in events if isinstance(e, StepCompleted)]
    assert [e.step for e in completed] == [0, 1] and [e.resources_id for e in completed] == [
        f"{result['run_id']}:2",
        f"{result['run_id']}:3",
    ]
    for e in completed:
        assert e.metrics["rollouts_trained"] == 6 and e.metrics["tokens"] > 0 and "time_update_s" in e.metrics
    assert [len(e.rollout_ids) for e in events if isinstance(e, StepStarted)] == [6, 6]
    assert isinstance(events[-1], RunFinished) and events[-1].status == "succeeded"
    # one numbering: the console's steps are steps.step's (StepCompleted.step), 0 and 1
    assert [line.split(":")[0] for line in lines if line.startswith("step ")] == ["step 0 of 2", "step 1 of 2"]
    assert (tmp_path / "w" / result["run_id"] / "step-1" / "model.safetensors").is_file()
    llm = asyncio.run(latest_llm(nats_settings, result["run_id"]))
    assert llm.weights is not None and llm.weights.uri.startswith("nats-obj://")  # in the bus: servable anywhere


async def latest_llm(nats: NatsSettings, run_id: str) -> Any:
    store = await connect(settings=nats)
    try:
        latest = await store.get_resources_by_id(run_id)
    finally:
        await store.close()
    assert latest is not None
    return latest.resources["main_llm"]


@pytest.mark.timeout(300)
def test_a_time_budget_stops_the_run_after_the_step_that_spends_it(
    nats_settings: NatsSettings, policy_dir: Path, tmp_path: Path
) -> None:
    tasks = [{"id": f"t{i}", "a": i, "b": 1} for i in range(4)]
    budget = {"steps": 5, "time_budget_s": 0.001}
    algo = GRPO(model_dir=policy_dir, **budget, tasks_per_step=2, group_size=2, weights_dir=tmp_path)
    lines: list[str] = []
    result = Trainer(algorithm=algo, n_runners=4, settings=Settings(nats=nats_settings), say=lines.append).fit(
        text_agent, tasks
    )
    assert len(result["steps"]) == 1 and any("time budget" in line for line in lines)
    events = asyncio.run(run_events(nats_settings, result["run_id"]))
    assert isinstance(events[-1], RunFinished) and events[-1].status == "succeeded"


@pytest.mark.timeout(300)
def test_overlap_trains_on_one_version_old_rows_and_reports_it(
    nats_settings: NatsSettings, policy_dir: Path, tmp_path: Path
) -> None:
    """With overlap, step n+1's batch is sampled while step n trains: rows one version old are kept and reported."""
    tasks = [{"id": f"t{i}", "a": i, "b": 3} for i in range(4)]
    algo = GRPO(model_dir=policy_dir, steps=3, overlap=True, tasks_per_step=2, group_size=2, weights_dir=tmp_path)
    result = Trainer(algorithm=algo, n_runners=4, settings=Settings(nats=nats_settings), say=print).fit(
        text_agent, tasks
    )
    staleness = [m["staleness_max"] for m in result["steps"]]
    # step 1 samples on the first version; later batches are sampled while a step trains, so their rows are one version
    # old, or current when the runners claimed them only after the new version was out (a loaded machine): kept
    # either way, never older, and reported per step
    assert staleness[0] == 0.0 and set(staleness[1:]) <= {0.0, 1.0}, staleness
    assert all(m["rows_dropped_stale"] == 0 for m in result["steps"])
    with pytest.raises(ValueError, match="max_staleness >= 1"):
        GRPO(model_dir=policy_dir, overlap=True, max_staleness=0)
