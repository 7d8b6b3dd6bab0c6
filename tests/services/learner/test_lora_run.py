"""A LoRA run through the whole system (bus, runners, gateway, inference following the bus, projector,
learner): each step publishes an adapter version (small, in the bus), the inference server swaps to it, and
the checkpoints in the bus hold the adapter, not the model."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from voltbus.model import weights_sha256
from voltbus.schemas.resources import ProxyLLM
from voltbus.schemas.training import CheckpointSaved, RunFinished, StepCompleted
from voltbus.services.learner.app import run as learn
from voltbus.services.learner.grpo.lora import FORMAT
from voltbus.services.settings import LearnerSettings, NatsSettings, Settings
from voltbus.store import connect
from voltbus.trainer.system import local_system

from .agents import text_agent
from .runs import run_events


async def test_a_lora_run_publishes_adapters_that_inference_serves(
    nats_settings: NatsSettings, policy_dir: Path, example: Any, tmp_path: Path
) -> None:
    learner = LearnerSettings(run_id="run-lora", model_dir=policy_dir, weights_dir=tmp_path / "w", lora_rank=4, lr=1e-2)
    learner.steps, learner.tasks_per_step, learner.group_size = 2, 2, 3
    tasks = example.tasks()
    async with local_system(Settings(nats=nats_settings, learner=learner), text_agent, n_runners=6) as s:
        await learn(s, tasks, lambda line: None)
        async with httpx.AsyncClient(timeout=10) as http:  # the server runs on this event loop
            stats = (await http.get(f"{s.learner.inference_urls[0]}/stats")).json()
        store = await connect(settings=s.nats)
        try:
            latest = await store.get_resources_by_id("run-lora")
        finally:
            await store.close()
    events = await run_events(s.nats, "run-lora")
    completed = [e for e in events if isinstance(e, StepCompleted)]
    assert [e.step for e in completed] == [0, 1] and isinstance(events[-1], RunFinished)
    assert latest is not None and completed[-1].resources_id == f"run-lora:{latest.version}"
    llm = latest.resources["main_llm"]
    assert isinstance(llm, ProxyLLM) and llm.weights is not None
    assert llm.weights.format == FORMAT and llm.weights.base_sha256 == weights_sha256(policy_dir)
    assert llm.weights.uri.startswith("nats-obj://")
    assert stats["weight_version"] == completed[-1].resources_id and stats["last_swap_error"] is None
    assert stats["weights_sha256"] == llm.weights.sha256  # the server swapped to the adapter
    saved = [e for e in events if isinstance(e, CheckpointSaved)]
    adapter = tmp_path / "w" / "run-lora" / "step-1" / "adapter_model.safetensors"
    assert len(saved) == 2 and adapter.stat().st_size < (policy_dir / "model.safetensors").stat().st_size / 10
