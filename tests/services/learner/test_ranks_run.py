"""The learner service started the way torch users start it, ``torchrun --nproc-per-node 2 -m
voltbus.services.learner TASKS``, through the whole system: rank 0 runs the loop on the bus, rank 1 follows its
updates, and the run ends with every step recorded and both processes exited cleanly."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

from voltbus.schemas.training import RunFinished, StepCompleted
from voltbus.services.settings import LearnerSettings, NatsSettings, Settings
from voltbus.trainer.system import local_system

from .agents import text_agent
from .runs import run_events
from .test_resume import environment

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


async def test_offline_training_under_torchrun_is_refused(
    policy_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from voltbus.services.learner.grpo.offline import Selection, train_offline
    from voltbus.services.learner.session import LearnerError

    monkeypatch.setenv("WORLD_SIZE", "2")  # what torchrun sets in each process it starts
    settings = Settings(learner=LearnerSettings(model_dir=policy_dir, weights_dir=tmp_path / "w"))
    with pytest.raises(LearnerError, match="one rank"):  # before any connection: no bus in this test
        await train_offline(settings, Selection(run="r"), 1, print)
