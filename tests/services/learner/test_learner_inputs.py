"""What a newcomer gives the learner (issue 28): a task file that is a JSON array, an empty dataset (refused
before the run is registered), and a batch no runner claims (said, not waited out silently)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from tests.test_cli import one_line_error, run
from voltbus.schemas.errors import VoltbusError
from voltbus.services.learner.app import load_tasks
from voltbus.services.learner.session import LearnerError, Session
from voltbus.services.settings import NatsSettings, ProjectorSettings
from voltbus.store import EnqueueRolloutRequest, connect


def test_a_json_array_file_is_a_list_of_tasks(tmp_path: Path) -> None:
    tasks = [{"a": 1, "b": 2}, {"a": 3, "b": 4}, [5, 6]]
    (tmp_path / "arr.json").write_text(json.dumps(tasks, indent=2))
    assert load_tasks(tmp_path / "arr.json") == tasks
    (tmp_path / "lines.jsonl").write_text("".join(json.dumps(t) + "\n" for t in tasks))
    assert load_tasks(tmp_path / "lines.jsonl") == tasks  # JSON Lines: an array per line is one task
    (tmp_path / "obj.json").write_text('{"a": 1}')
    with pytest.raises(VoltbusError, match=r"obj.json: a .json task file holds a JSON array of tasks, not a dict"):
        load_tasks(tmp_path / "obj.json")


def test_an_empty_dataset_is_refused_before_the_run_is_registered(nats_settings: NatsSettings, tmp_path: Path) -> None:
    (tmp_path / "empty.jsonl").write_text("\n")
    (tmp_path / "val.jsonl").write_text('{"a": 1}\n')
    env = {"VOLTBUS_NATS__URL": nats_settings.url, "VOLTBUS_NATS__NAMESPACE": nats_settings.namespace}
    args = ["learner", "--tasks", str(tmp_path / "empty.jsonl"), "--val-tasks", str(tmp_path / "val.jsonl")]
    line = one_line_error(run(*args, "--run-id", "r-empty", "--projector-url", "http://127.0.0.1:9", env=env))
    assert "the training dataset is empty" in line

    async def events() -> int:
        log = await connect(settings=nats_settings)
        try:
            return len([e async for e in log.log.replay("control")])
        finally:
            await log.close()

    assert asyncio.run(events()) == 0  # no run, no validation rollout


async def test_a_batch_no_runner_claims_is_said(nats_settings: NatsSettings) -> None:
    store = await connect(settings=nats_settings)
    session = Session(store, "r-alone", ProjectorSettings())
    notes: list[str] = []
    try:
        batch = await session.begin_step(0, None, [EnqueueRolloutRequest(input={"q": i}) for i in range(3)])
        with pytest.raises(LearnerError, match="3 of 3 rollouts not finished after 2s"):
            await session.wait(batch, 2.0, notes.append, quiet_s=0.5)
    finally:
        await session.close()
        await store.close()
    [note] = notes
    assert note.startswith("warning: no runner has claimed any of step 0's 3 rollouts in 0.5s")
    assert f"namespace {nats_settings.namespace}" in note
