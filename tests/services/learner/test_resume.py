"""A learner killed with SIGKILL in the middle of a run, started again on the same run id — on
"another machine" (an empty weights directory) — continues from the log and the checkpoint in the
bus: every step completed exactly once, in order, each publishing a newer version."""

from __future__ import annotations

import asyncio
import hashlib
import os
import signal
import sys
from pathlib import Path

import pytest

from voltbus.schemas.training import CheckpointSaved, RunFinished, StepCompleted, StepStarted
from voltbus.services.learner import checkpoints
from voltbus.services.learner.grpo.batch import version_number
from voltbus.services.settings import LearnerSettings, NatsSettings, Settings
from voltbus.store import connect
from voltbus.trainer.system import local_system

from .agents import text_agent
from .runs import run_events

STEPS = 4


def environment(s: Settings, weights_dir: Path) -> dict[str, str]:
    learner = s.learner
    return {
        **os.environ,
        "VOLTBUS_NATS__URL": s.nats.url,
        "VOLTBUS_NATS__NAMESPACE": s.nats.namespace,
        "VOLTBUS_PROJECTOR__URL": s.projector.url,
        "VOLTBUS_LEARNER__RUN_ID": "run-killed",
        "VOLTBUS_LEARNER__MODEL_DIR": str(learner.model_dir),
        "VOLTBUS_LEARNER__SERVED_MODEL_NAME": learner.served_model_name,
        "VOLTBUS_LEARNER__GATEWAY_URL": learner.gateway_url,
        "VOLTBUS_LEARNER__INFERENCE_URLS": ",".join(learner.inference_urls),
        "VOLTBUS_LEARNER__WEIGHTS_DIR": str(weights_dir),
        "VOLTBUS_LEARNER__STEPS": str(STEPS),
        "VOLTBUS_LEARNER__TASKS_PER_STEP": "2",
        "VOLTBUS_LEARNER__GROUP_SIZE": "3",
    }


async def first_step_completed(s: Settings, timeout: float) -> None:
    """Follow the run's subject until a StepCompleted is stored (TimeoutError at the deadline)."""
    store = await connect(settings=s.nats)
    replay = store.log.replay("control", follow=True, subject=store.topology.run("run-killed"))
    try:
        async with asyncio.timeout(timeout):
            async for item in replay:
                if isinstance(getattr(item, "event", None), StepCompleted):
                    return
    finally:
        await replay.aclose()  # type: ignore[attr-defined]
        await store.close()


@pytest.mark.long
async def test_a_killed_learner_resumes_without_repeating_or_skipping_a_step(
    nats_settings: NatsSettings, policy_dir: Path, task_file: Path, tmp_path: Path
) -> None:
    settings = Settings(nats=nats_settings, learner=LearnerSettings(model_dir=policy_dir, weights_dir=tmp_path / "w"))
    async with local_system(settings, text_agent, n_runners=6) as s:
        command = [sys.executable, "-m", "voltbus.services.learner", str(task_file)]
        first = await asyncio.create_subprocess_exec(*command, env=environment(s, tmp_path / "machine-1"))
        await first_step_completed(s, 120)
        first.send_signal(signal.SIGKILL)
        assert await first.wait() == -signal.SIGKILL
        second = await asyncio.create_subprocess_exec(*command, env=environment(s, tmp_path / "machine-2"))
        assert await asyncio.wait_for(second.wait(), 240) == 0
    events = await run_events(s.nats, "run-killed")
    completed = [e for e in events if isinstance(e, StepCompleted)]
    assert [e.step for e in completed] == list(range(STEPS))
    versions = [version_number(e.resources_id) for e in completed]
    assert None not in versions and versions == sorted(set(versions))  # each step moved the weights: a new version
    started = [e for e in events if isinstance(e, StepStarted)]
    assert sorted(e.step for e in started) == list(range(STEPS))  # no step's batch enqueued twice
    assert all(len(e.rollout_ids) == 6 for e in started)
    assert isinstance(events[-1], RunFinished) and events[-1].status == "succeeded"
    saved = [e for e in events if isinstance(e, CheckpointSaved)]
    assert saved and all(e.uri.startswith("nats-obj://") for e in saved)
    assert list((tmp_path / "machine-2" / "cache").glob("*.tar"))  # the second learner fetched one from the bus


def test_a_packed_checkpoint_is_the_same_bytes_for_the_same_files(tmp_path: Path) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    for folder in (one, two):
        folder.mkdir()
        (folder / "model.safetensors").write_bytes(b"weights")
        (folder / "optimizer.pt").write_bytes(b"state")
    assert checkpoints.pack(one) == checkpoints.pack(two)
    digest = hashlib.sha256(checkpoints.pack(one)).hexdigest()
    assert checkpoints._holds(two, digest)
    (two / "optimizer.pt").write_bytes(b"other state")
    assert not checkpoints._holds(two, digest)
    (tmp_path / "packed.tar").write_bytes(checkpoints.pack(one))
    checkpoints.unpack(tmp_path / "packed.tar", tmp_path / "three")
    assert (tmp_path / "three" / "optimizer.pt").read_bytes() == b"state"
