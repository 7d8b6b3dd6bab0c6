"""The gateway in front of the CPU inference server, with the official openai client: the recorded token
ids are what the engine sampled (they decode to the text, their logprobs are the model's), and a weight
swap mid-run never labels a recorded call with a version that did not sample it."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from voltbus.model import build_tokenizer, sequence_logprobs
from voltbus.services.eventlog import EventLog
from voltbus.services.settings import InferenceSettings, Settings

from ...conftest import wait_for
from ..inference.conftest import MODEL, model_dirs, reference, serving  # noqa: F401  (fixtures)
from .conftest import GatewayFactory, Setup, model_calls

MESSAGES = [{"role": "user", "content": "3+4="}]


@pytest.fixture
def engine(model_dirs: dict[int, Path]) -> Iterator[str]:  # noqa: F811
    """A fresh inference server (seed-0 weights), base URL without ``/v1``."""
    cfg = InferenceSettings(model_dir=model_dirs[0], served_model_name=MODEL, seed=0)
    with serving(Settings(inference=cfg)) as url:
        yield url


def agrees(model: Any, prompt_ids: list[int], response_ids: list[int], logprobs: list[float]) -> bool:
    expected = sequence_logprobs(model, prompt_ids, response_ids)
    if len(expected) != len(logprobs):
        return False
    return max(abs(a - b) for a, b in zip(logprobs, expected, strict=True)) <= 1e-5


async def served_version(engine: str) -> str:
    async with httpx.AsyncClient() as http:
        return (await http.get(f"{engine}/healthz")).json()["weight_version"]


def base(g: Setup) -> str:
    return f"{g.url}/proxy/rollout/{g.rid}/attempt/{g.aid}/mode/train/openai/v1"


async def test_recorded_tokens_are_what_the_engine_sampled(
    make_gateway: GatewayFactory,
    engine: str,
    eventlog: EventLog,
    reference: dict[int, Any],  # noqa: F811
) -> None:
    g = await make_gateway(upstream=f"{engine}/v1", model_name=MODEL)
    aclient = openai.AsyncOpenAI(base_url=base(g), api_key="x")
    sclient = openai.OpenAI(base_url=base(g), api_key="x")
    texts: list[str] = []
    reply = await aclient.chat.completions.create(model="auto", messages=MESSAGES, max_tokens=8)
    texts.append(reply.choices[0].message.content or "")
    stream = await aclient.chat.completions.create(model="auto", messages=MESSAGES, max_tokens=8, stream=True)
    texts.append("".join([c.choices[0].delta.content or "" async for c in stream if c.choices]))
    done = await aclient.completions.create(model="auto", prompt="3+4=", max_tokens=8)
    texts.append(done.choices[0].text)
    chunks = await asyncio.to_thread(
        lambda: list(sclient.completions.create(model="auto", prompt="3+4=", max_tokens=8, stream=True))
    )
    texts.append("".join(c.choices[0].text for c in chunks if c.choices))
    sync_reply = await asyncio.to_thread(sclient.chat.completions.create, model="auto", messages=MESSAGES, max_tokens=8)
    texts.append(sync_reply.choices[0].message.content or "")
    calls = await model_calls(eventlog, 5)
    tokenizer = build_tokenizer()
    version = await served_version(engine)
    for call, text in zip(calls, texts, strict=True):
        assert call.status == "ok" and call.response_ids and call.prompt_ids, call
        assert tokenizer.decode(call.response_ids, skip_special_tokens=True) == text
        assert agrees(reference[0], call.prompt_ids, call.response_ids, call.logprobs)
        assert call.resources_id == version and call.model == MODEL and call.mode == "train"
    assert [c.streamed for c in calls] == [False, True, False, True, False]


async def test_a_weight_swap_mid_run_never_mislabels_a_recorded_call(
    make_gateway: GatewayFactory,
    engine: str,
    eventlog: EventLog,
    model_dirs: dict[int, Path],  # noqa: F811
    reference: dict[int, Any],  # noqa: F811
) -> None:
    g = await make_gateway(upstream=f"{engine}/v1", model_name=MODEL)
    client = openai.AsyncOpenAI(base_url=base(g), api_key="x")
    old = await served_version(engine)

    async def call() -> None:
        await client.completions.create(model="auto", prompt="5+2=", max_tokens=24, temperature=1.0, n=2)

    first = [asyncio.create_task(call()) for _ in range(6)]
    async with httpx.AsyncClient(base_url=engine, timeout=60) as http:

        async def running() -> bool:
            return (await http.get("/stats")).json()["running"] > 0

        await wait_for(running, 30, "a generation in progress", every=0.005)
        swapped = await http.post("/update_weights", json={"path": str(model_dirs[1]), "version": "default:2"})
        assert swapped.status_code == 200, swapped.text
    second = [asyncio.create_task(call()) for _ in range(6)]
    await asyncio.gather(*first, *second)
    calls = await model_calls(eventlog, 12)
    assert {c.resources_id for c in calls} == {old, "default:2"}
    for c in calls:
        model = reference[0] if c.resources_id == old else reference[1]
        assert len(c.choices) == 2
        assert all(agrees(model, c.prompt_ids, ch.response_ids, ch.logprobs) for ch in c.choices)
