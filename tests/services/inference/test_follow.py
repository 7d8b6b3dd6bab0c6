"""Hot swap from the bus: a real ResourcesPublished on a real nats-server makes the server serve its weights,
labelled with its resources id; a wrong digest or another model's version is not served."""

from __future__ import annotations

import asyncio
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from tests.conftest import wait_for
from voltbus.model import sequence_logprobs, weights_sha256
from voltbus.schemas.resources import LLM, PromptTemplate, WeightsRef
from voltbus.services.eventlog import EventLog
from voltbus.services.settings import NatsSettings
from voltbus.store import connect

from .conftest import MODEL

BODY = {"model": MODEL, "prompt": "2+2=", "max_tokens": 8, "logprobs": 0, "return_token_ids": True}


def llm(url: str, path: Path, sha256: str | None = None, model: str = MODEL) -> LLM:
    ref = WeightsRef(uri=f"file://{path / 'model.safetensors'}", sha256=sha256 or weights_sha256(path))
    return LLM(endpoint=f"{url}/v1", model=model, weights=ref)


async def until_stats(url: str, key: str, check: Callable[[Any], bool], timeout: float = 20.0) -> dict:
    """``/stats`` once ``check(stats[key])`` holds; fails after ``timeout`` seconds."""
    async with httpx.AsyncClient(base_url=url) as http:

        async def holds() -> dict | None:
            stats = (await http.get("/stats")).json()
            return stats if check(stats[key]) else None

        return await wait_for(holds, timeout, f"{key} in /stats")


def served_by(url: str, reference_model) -> bool:
    answer = httpx.post(f"{url}/v1/completions", json=BODY, timeout=30).json()
    choice = answer["choices"][0]
    expected = sequence_logprobs(reference_model, choice["prompt_token_ids"], choice["token_ids"])
    return max(abs(a - b) for a, b in zip(choice["logprobs"]["token_logprobs"], expected, strict=True)) <= 1e-5


async def test_follows_resources_versions_on_the_bus(
    make_server, nats_settings: NatsSettings, model_dirs: dict, reference: dict
) -> None:
    store = await connect(settings=nats_settings)
    try:
        # published before the server starts: served at start-up (catch-up)
        await store.update_resources("default", {"main_llm": llm("http://x", model_dirs[1])})
        url = await asyncio.to_thread(make_server, nats=nats_settings, follow_resources=True)
        await until_stats(url, "weight_version", "default:1".__eq__)
        assert served_by(url, reference[1])

        bad = llm(url, model_dirs[0], sha256="f" * 64)
        await store.update_resources("default", {"main_llm": bad})
        failed = await until_stats(url, "last_swap_error", lambda error: error is not None)
        assert "default:2" in failed["last_swap_error"] and "sha256" in failed["last_swap_error"]
        assert failed["weight_version"] == "default:1" and failed["swaps"] == 1

        other_model = {"main_llm": llm(url, model_dirs[0], model="another-model"), "p": PromptTemplate(template="{q}")}
        await store.update_resources("default", other_model)
        await store.update_resources(
            "default", {"main_llm": llm(url, model_dirs[0]), "p": PromptTemplate(template="x")}
        )
        after = await until_stats(url, "weight_version", "default:4".__eq__)
        assert after["swaps"] == 2 and after["last_swap_error"] is None
        assert served_by(url, reference[0])
    finally:
        await store.close()


async def test_weights_from_the_bus_are_served_and_no_copy_stays_on_disk(
    make_server, nats_settings: NatsSettings, model_dirs: dict, reference: dict, tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where the follower's scratch copies go
    eventlog = await EventLog.connect(nats_settings)
    store = await connect(settings=nats_settings)
    try:
        url = await asyncio.to_thread(make_server, nats=nats_settings, follow_resources=True)
        for version, model in ((1, 1), (2, 0)):
            uri = await eventlog.put_weights(f"v{version}.safetensors", model_dirs[model] / "model.safetensors")
            ref = WeightsRef(uri=uri, sha256=weights_sha256(model_dirs[model]))
            await store.update_resources("default", {"main_llm": LLM(endpoint="http://x/v1", model=MODEL, weights=ref)})
            await until_stats(url, "weight_version", f"default:{version}".__eq__)
            assert served_by(url, reference[model])
            assert os.listdir(tmp_path) == []  # fetched, loaded, deleted: versions do not pile up
    finally:
        await store.close()
        await eventlog.close()
