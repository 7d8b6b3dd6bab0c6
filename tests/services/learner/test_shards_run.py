"""Sharded Hugging Face model directories (``model-0000k-of-0000n.safetensors`` + ``model.safetensors.index.json``)
through the whole system: a sharded starting model is served and trained; each version above ``shard_mb`` is
written as shards, published under one digest over the set (in the bus as one tar, or by the index's path), and
the inference server following the bus swaps to all of it."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import pytest

from voltbus.model import build_tiny_model, build_tokenizer, load_model_dir, save_model_dir, sequence_logprobs
from voltbus.schemas.resources import ProxyLLM
from voltbus.schemas.training import RunFinished, StepCompleted
from voltbus.services.clients.model import shards
from voltbus.services.learner.app import run as learn
from voltbus.services.settings import LearnerSettings, NatsSettings, Settings
from voltbus.store import connect
from voltbus.trainer.system import local_system

from .agents import text_agent
from .runs import run_events

SHARD_MB = 1.0
"""The tiny model's 4 MB of weights in 1 MB shards."""


@pytest.fixture(scope="module")
def sharded_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("sharded") / "tiny"
    return save_model_dir(build_tiny_model(0), build_tokenizer(), folder, int(SHARD_MB * 1024 * 1024))


def served_logprobs(url: str) -> tuple[list[int], list[int], list[float]]:
    body = {"model": "policy", "prompt": "2+2=", "max_tokens": 6, "logprobs": 0, "return_token_ids": True}
    choice = httpx.post(f"{url}/v1/completions", json=body, timeout=30).json()["choices"][0]
    return choice["prompt_token_ids"], choice["token_ids"], choice["logprobs"]["token_logprobs"]


@pytest.mark.parametrize("in_bus", [True, False], ids=["in-bus", "by-path"])
async def test_a_sharded_model_trains_and_its_sharded_versions_are_served(
    nats_settings: NatsSettings, sharded_dir: Path, example: Any, tmp_path: Path, in_bus: bool
) -> None:
    assert shards.is_sharded(sharded_dir) and len(shards.shard_files(sharded_dir)) >= 4  # index + 3 shards or more
    run_id = f"run-shards-{int(in_bus)}"
    learner = LearnerSettings(run_id=run_id, model_dir=sharded_dir, weights_dir=tmp_path / "w", lr=1e-2)
    learner.steps, learner.tasks_per_step, learner.group_size, learner.shard_mb = 2, 2, 3, SHARD_MB
    learner.weights_in_bus_mb = 256.0 if in_bus else 0.0
    async with local_system(Settings(nats=nats_settings, learner=learner), text_agent, n_runners=6) as s:
        await learn(s, example.tasks(), lambda line: None)
        url = s.learner.inference_urls[0]
        async with httpx.AsyncClient(timeout=10) as http:
            stats = (await http.get(f"{url}/stats")).json()
        prompt, response, served = await asyncio.to_thread(served_logprobs, url)
        store = await connect(settings=s.nats)
        try:
            first, latest = await store.get_resources_by_id(f"{run_id}:1"), await store.get_resources_by_id(run_id)
        finally:
            await store.close()
    events = await run_events(s.nats, run_id)
    assert [e.step for e in events if isinstance(e, StepCompleted)] == [0, 1] and isinstance(events[-1], RunFinished)
    assert first is not None and first.resources["main_llm"].weights.sha256 == shards.weights_sha256(sharded_dir)
    version = tmp_path / "w" / run_id / "step-1"
    assert not (version / "model.safetensors").exists() and len(shards.shard_files(version)) >= 4
    assert latest is not None
    llm = latest.resources["main_llm"]
    assert isinstance(llm, ProxyLLM) and llm.weights is not None
    assert llm.weights.sha256 == shards.weights_sha256(version)  # one digest over the set of shards
    if in_bus:
        assert llm.weights.uri.startswith("nats-obj://") and llm.weights.uri.endswith(".tar")
    else:
        assert llm.weights.uri == str(version / shards.INDEX)
    assert stats["weight_version"] == f"{run_id}:{latest.version}" and stats["last_swap_error"] is None
    assert stats["weights_sha256"] == llm.weights.sha256
    trained = load_model_dir(version)[0]  # the server serves every shard of the last version
    assert max(abs(a - b) for a, b in zip(served, sequence_logprobs(trained, prompt, response), strict=True)) < 1e-4
