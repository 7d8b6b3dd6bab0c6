"""The learner service started the way torch users start it, ``torchrun --nproc-per-node 2 -m
voltbus.services.learner TASKS``, through the whole system: rank 0 runs the loop on the bus, rank 1 follows its
updates, and the run ends with every step recorded and both processes exited cleanly; ``voltbus train --offline``
under torchrun trains as one rank does."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest
from safetensors.torch import load_file

from voltbus.schemas.training import RunFinished, RunStarted, StepCompleted
from voltbus.services.learner.grpo.offline import Selection, train_offline
from voltbus.services.projector.client import rebuild
from voltbus.services.settings import LearnerSettings, NatsSettings, Settings
from voltbus.trainer import GRPO, Trainer
from voltbus.trainer.system import local_system

from .agents import text_agent
from .ranks_step import differences
from .runs import run_events
from .test_resume import environment

pytestmark = pytest.mark.long  # two ranks under torchrun: 10-45 s each (pytest -m long; .ci/run runs them)

VOLTBUS = str(Path(sys.executable).with_name("voltbus"))
STARTS = {
    "module": ["-m", "voltbus.services.learner", "{tasks}"],
    "cli": ["--no-python", VOLTBUS, "learner", "--tasks", "{tasks}"],
}


@pytest.mark.timeout(600)
@pytest.mark.parametrize("start", STARTS)
async def test_the_learner_runs_on_two_ranks_under_torchrun(
    nats_settings: NatsSettings, policy_dir: Path, task_file: Path, tmp_path: Path, start: str
) -> None:
    settings = Settings(nats=nats_settings, learner=LearnerSettings(model_dir=policy_dir, weights_dir=tmp_path / "w"))
    async with local_system(settings, text_agent, n_runners=6) as s:
        env = {**environment(s, tmp_path / "w"), "VOLTBUS_LEARNER__RUN_ID": "run-ranks", "VOLTBUS_LEARNER__STEPS": "2"}
        command = ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]
        command += [a.format(tasks=task_file) for a in STARTS[start]]
        learner = await asyncio.create_subprocess_exec(
            sys.executable,
            *command,
            env=env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        output, _ = await asyncio.wait_for(learner.communicate(), 480)
    text = output.decode(errors="replace")
    assert learner.returncode == 0, text[-4000:]
    assert "rank 0 of 2" in text and "rank 1 of 2: following rank 0's updates" in text
    events = await run_events(s.nats, "run-ranks")
    completed = [e for e in events if isinstance(e, StepCompleted)]
    assert [e.step for e in completed] == [0, 1] and all(e.metrics["tokens"] > 0 for e in completed)
    assert isinstance(events[-1], RunFinished) and events[-1].status == "succeeded"
    assert (tmp_path / "w" / "run-ranks" / "step-1" / "model.safetensors").is_file()


@pytest.mark.timeout(900)
def test_offline_training_under_torchrun_is_the_training_of_one_rank(
    nats_settings: NatsSettings, policy_dir: Path, tmp_path: Path
) -> None:
    tasks = [{"id": f"t{i}", "a": i, "b": 2} for i in range(2)]
    algo = GRPO(model_dir=policy_dir, steps=1, tasks_per_step=2, group_size=3, weights_dir=tmp_path / "online")
    online = Trainer(algorithm=algo, n_runners=6, settings=Settings(nats=nats_settings), say=print).fit(
        text_agent, tasks
    )
    db = tmp_path / "projection.duckdb"
    asyncio.run(rebuild(Settings(nats=nats_settings), db, print))
    learner = LearnerSettings(
        run_id="off-1", model_dir=policy_dir, tasks_per_step=1, group_size=3, lr=1e-3, weights_dir=tmp_path / "w"
    )
    one = asyncio.run(
        train_offline(Settings(nats=nats_settings, learner=learner), Selection(run=online["run_id"]), 1, print, db)
    )
    assert one is not None and one["rows"] == 6 and len(one["steps"]) == 2
    env = {
        **os.environ,
        "VOLTBUS_NATS__NAMESPACE": nats_settings.namespace,
        "VOLTBUS_LEARNER__WEIGHTS_DIR": str(tmp_path / "w"),
        "VOLTBUS_LEARNER__TASKS_PER_STEP": "1",
        "VOLTBUS_LEARNER__GROUP_SIZE": "3",
        "VOLTBUS_LEARNER__LR": "1e-3",
    }
    command = ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", "--no-python", VOLTBUS, "train"]
    command += ["--offline", "--from-run", online["run_id"], "--run-id", "off-2", "--db", str(db)]
    command += ["--model", str(policy_dir), "--nats-url", nats_settings.url]
    done = subprocess.run([sys.executable, *command], env=env, capture_output=True, text=True, timeout=480)
    text = done.stdout + done.stderr
    assert done.returncode == 0, text[-4000:]
    assert "rank 1 of 2: following rank 0's offline updates" in text
    assert f"offline run off-2: 6 rows, dataset {one['dataset_sha256']}, published off-2:1" in text  # rank 0's only
    events = asyncio.run(run_events(nats_settings, "off-2"))
    assert sum(isinstance(e, RunStarted) for e in events) == 1  # one run, recorded by rank 0
    assert [e.step for e in events if isinstance(e, StepCompleted)] == [0, 1]
    assert isinstance(events[-1], RunFinished) and events[-1].status == "succeeded"
    start = load_file(policy_dir / "model.safetensors")
    single, two = (load_file(tmp_path / "w" / run / "step-1" / "model.safetensors") for run in ("off-1", "off-2"))
    assert float(differences(single, start).mean()) > 5e-4  # two steps moved every weight by about lr
    apart = differences(two, single)  # float sums in another order: see test_ranks.py
    assert float(apart.max()) < 5e-4 and float(apart.mean()) < 1e-7


@pytest.mark.timeout(600)
def test_offline_training_under_torchrun_with_nothing_selected_fails_on_every_rank(
    nats_settings: NatsSettings, policy_dir: Path, tmp_path: Path
) -> None:
    db = tmp_path / "projection.duckdb"
    asyncio.run(rebuild(Settings(nats=nats_settings), db, print))  # an empty log: no rows
    env = {
        **os.environ,
        "VOLTBUS_NATS__NAMESPACE": nats_settings.namespace,
        "VOLTBUS_LEARNER__WEIGHTS_DIR": str(tmp_path),
    }
    command = ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", "--no-python", VOLTBUS, "train"]
    command += ["--offline", "--from-run", "none", "--db", str(db), "--model", str(policy_dir)]
    command += ["--nats-url", nats_settings.url]
    done = subprocess.run([sys.executable, *command], env=env, capture_output=True, text=True, timeout=300)
    # rank 0 says why and exits; torchrun ends rank 1, which was waiting for its first batch: no hang
    assert done.returncode != 0 and "no training rows match the selection" in done.stdout + done.stderr
