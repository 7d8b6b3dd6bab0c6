"""A test agent for an untrained policy: its reward is a function of the whole sampled text, in [0, 1], so
two samples of a group differ in reward unless their texts are equal, and every update moves the weights."""

from __future__ import annotations

import asyncio
import weakref
from typing import Any

import httpx
from openai import AsyncOpenAI

import voltbus as agl

_HTTP: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, httpx.AsyncClient] = weakref.WeakKeyDictionary()


def http_client() -> httpx.AsyncClient:
    """One client per event loop (tests run several loops), built once."""
    loop = asyncio.get_running_loop()
    if loop not in _HTTP:
        _HTTP[loop] = httpx.AsyncClient(timeout=60)
    return _HTTP[loop]


@agl.rollout
async def text_agent(task: dict[str, Any], llm: agl.LLM) -> float:
    client = AsyncOpenAI(
        base_url=llm.endpoint,
        api_key=llm.api_key or "none",
        max_retries=5,
        http_client=http_client(),
    )
    reply = await client.completions.create(model=llm.model, prompt=f"{task['a']}+{task['b']}=", max_tokens=4)
    text = reply.choices[0].text
    return sum(map(ord, text)) % 97 / 96
