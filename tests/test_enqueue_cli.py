"""``voltbus enqueue --tasks``: a dataset queued for runners started separately, run as a user runs it (a real
process) against a real bus, with runners and a projector serving it; one-line errors for what a user can fix."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

import voltbus as agl
from tests.conftest import free_port
from tests.test_cli import one_line_error, run
from voltbus.services.learner.session import Session
from voltbus.services.settings import NatsSettings, Settings
from voltbus.store import connect
from voltbus.trainer.system import local_system


@agl.rollout
async def graded(task: dict[str, Any], prompt_template: agl.PromptTemplate) -> float:
    return 1.0 if prompt_template.format(**task) == "2+2=4" else 0.0


def bus_env(nats: NatsSettings, group: str = "") -> dict[str, str]:
    return {"VOLTBUS_NATS__URL": nats.url, "VOLTBUS_NATS__NAMESPACE": nats.namespace, "VOLTBUS_RUNNER__GROUP": group}


async def voltbus_cli(*args: str, env: dict[str, str]) -> tuple[int, str, str]:
    """The command in its own process, without blocking this loop (the runners serving it run on it)."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", "from voltbus.cli import main; main()", *args,
        env={**os.environ, **env}, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 180)
    return proc.returncode or 0, out.decode(), err.decode()


@pytest.mark.timeout(300)
@pytest.mark.parametrize("kind", ["jsonl", "json"])
async def test_enqueue_queues_a_dataset_that_separate_runners_serve(
    nats_settings: NatsSettings, tmp_path: Path, kind: str
) -> None:
    tasks = [{"a": 2, "b": 2, "c": c} for c in (4, 5, 4)]
    path = tmp_path / f"tasks.{kind}"
    path.write_text("\n".join(map(json.dumps, tasks)) + "\n\n" if kind == "jsonl" else json.dumps(tasks))
    async with local_system(Settings(nats=nats_settings), graded, n_runners=3) as s:
        store = await connect(settings=s.nats, projector_url=s.projector.url)
        try:
            added = await store.add_resources({"prompt_template": agl.PromptTemplate(template="{a}+{b}={c}")})
            resources = f"{added.resources_id}:{added.version}"
            args = ["enqueue", "--tasks", str(path), "--mode", "val", "--resources", resources, "--wait", "120"]
            code, out, err = await voltbus_cli(*args, env=bus_env(nats_settings, s.runner.group))
            assert code == 0, err
            ids = out.split()
            assert len(ids) == 3 and all(i.startswith("ro-") for i in ids)
            assert "voltbus: enqueued 3/3" in err and "3/3 ended {'succeeded': 3}" in err
            rows = (
                await Session(store, "check", s.projector).query(
                    "SELECT r.rollout_id, r.mode, r.resources_id, r.status, x.value FROM rollouts r "
                    "JOIN rewards x USING (rollout_id) WHERE r.rollout_id IN (SELECT unnest($ids)) ORDER BY x.value",
                    {"ids": ids},
                )
            ).to_pylist()
        finally:
            await store.close()
    assert [(r["mode"], r["resources_id"], r["status"]) for r in rows] == [("val", resources, "succeeded")] * 3
    assert [r["value"] for r in rows] == [0.0, 1.0, 1.0]  # each task ran with the pinned template


def test_enqueue_refuses_what_a_user_can_fix(tmp_path: Path) -> None:
    missing = one_line_error(run("enqueue", "--tasks", str(tmp_path / "none.jsonl")))
    assert "none.jsonl not found" in missing
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"a": 1}\n{"a": \n')
    assert f"{bad}:2: not JSON" in one_line_error(run("enqueue", "--tasks", str(bad)))
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n\n")
    assert "holds no task" in one_line_error(run("enqueue", "--tasks", str(empty)))
    not_array = tmp_path / "tasks.json"
    not_array.write_text('{"a": 1}')
    assert "holds a JSON array of tasks, not a dict" in one_line_error(run("enqueue", "--tasks", str(not_array)))
    good = tmp_path / "good.jsonl"
    good.write_text('{"a": 1}\n')
    no_bus = {"VOLTBUS_NATS__URL": f"nats://127.0.0.1:{free_port()}"}
    assert "127.0.0.1" in one_line_error(run("enqueue", "--tasks", str(good), env=no_bus))
    wrong_mode = run("enqueue", "--tasks", str(good), "--mode", "eval")
    assert wrong_mode.returncode == 2 and "'eval' is not one of" in wrong_mode.stderr


def test_enqueue_refuses_unknown_resources(nats_settings: NatsSettings, tmp_path: Path) -> None:
    good = tmp_path / "good.jsonl"
    good.write_text('{"a": 1}\n')
    line = one_line_error(run("enqueue", "--tasks", str(good), "--resources", "rs-none:3", env=bus_env(nats_settings)))
    assert "--resources rs-none:3: no such resources" in line and nats_settings.namespace in line
