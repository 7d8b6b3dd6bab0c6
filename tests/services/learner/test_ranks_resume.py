"""A learner on two torchrun ranks whose rank 0 is killed (SIGKILL) after a step, started again on the same run id on
"another machine" (an empty weights directory, two ranks again): torchrun ends rank 1 when rank 0 dies, and the new
ranks continue from the checkpoint in the bus, every step completed exactly once, in order; full weights and LoRA."""

from __future__ import annotations

import asyncio
import signal
import sys
from pathlib import Path

import psutil
import pytest

from voltbus.schemas.training import RunFinished, StepCompleted, StepStarted
from voltbus.services.learner.grpo.batch import version_number
from voltbus.services.settings import LearnerSettings, NatsSettings, Settings
from voltbus.trainer.system import local_system

from ...conftest import wait_for
from .agents import text_agent
from .runs import run_events
from .test_resume import STEPS, environment, first_step_completed

pytestmark = pytest.mark.long  # two ranks under torchrun: 10-45 s each (pytest -m long; .ci/run runs them)

TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]


async def ranks_of(torchrun: int, deadline: float) -> dict[int, psutil.Process]:
    """The worker processes the torchrun of pid ``torchrun`` started, by their ``RANK``, once both run."""
    found: dict[int, psutil.Process] = {}

    def both() -> bool:
        for child in psutil.Process(torchrun).children():
            try:
                found[int(child.environ()["RANK"])] = child
            except (psutil.Error, KeyError):  # not yet exec'd into the worker
                continue
        return len(found) >= 2

    await wait_for(both, deadline, "torchrun's two workers", every=0.2)  # torchrun says nothing when they are up
    return found


@pytest.mark.timeout(900)
@pytest.mark.parametrize("lora", [0, 4], ids=["full", "lora"])
async def test_a_learner_on_two_ranks_killed_after_a_step_resumes_from_its_checkpoint(
    nats_settings: NatsSettings, policy_dir: Path, task_file: Path, tmp_path: Path, lora: int
) -> None:
    learner = LearnerSettings(model_dir=policy_dir, weights_dir=tmp_path / "w", lora_rank=lora)
    command = [*TORCHRUN, "-m", "voltbus.services.learner", str(task_file)]
    workers: list[psutil.Process] = []
    async with local_system(Settings(nats=nats_settings, learner=learner), text_agent, n_runners=6) as s:
        extra = {"VOLTBUS_LEARNER__LORA_RANK": str(lora), **({"VOLTBUS_LEARNER__LR": "1e-2"} if lora else {})}
        env1, env2 = ({**environment(s, tmp_path / m), **extra} for m in ("machine-1", "machine-2"))
        log1, log2 = (tmp_path / "first.log").open("wb"), (tmp_path / "second.log").open("wb")
        first = await asyncio.create_subprocess_exec(*command, env=env1, stdout=log1, stderr=log1)
        try:
            ranks = await ranks_of(first.pid, 120)
            workers = list(ranks.values())
            await first_step_completed(s, 240)
            ranks[0].send_signal(signal.SIGKILL)
            assert await asyncio.wait_for(first.wait(), 120) != 0  # torchrun saw rank 0 fail
            _, alive = await asyncio.to_thread(psutil.wait_procs, workers, 60)
            assert not alive  # and ended rank 1
            second = await asyncio.create_subprocess_exec(*command, env=env2, stdout=log2, stderr=log2)
            workers = list((await ranks_of(second.pid, 120)).values())
            assert await asyncio.wait_for(second.wait(), 480) == 0, (tmp_path / "second.log").read_text()[-4000:]
        finally:
            for process in workers:  # nothing left behind when an assertion failed
                if process.is_running():
                    process.kill()
            log1.close()
            log2.close()
    output = (tmp_path / "second.log").read_text()
    assert "rank 1 of 2: following rank 0's updates" in output
    events = await run_events(s.nats, "run-killed")
    completed = [e for e in events if isinstance(e, StepCompleted)]
    assert [e.step for e in completed] == list(range(STEPS))
    versions = [version_number(e.resources_id) for e in completed]
    assert None not in versions and versions == sorted(set(versions))  # each step a newer version
    assert sorted(e.step for e in events if isinstance(e, StepStarted)) == list(range(STEPS))  # none enqueued twice
    assert isinstance(events[-1], RunFinished) and events[-1].status == "succeeded"
    assert list((tmp_path / "machine-2" / "cache").glob("*.tar"))  # the second rank 0 fetched one from the bus
    last = tmp_path / "machine-2" / "run-killed" / f"step-{STEPS - 1}"
    assert (last / ("adapter_model.safetensors" if lora else "model.safetensors")).is_file()
    assert not lora or not (last / "model.safetensors").exists()  # LoRA versions stay adapter-only
