"""A test agent for an untrained policy: its reward is a function of the whole sampled text, in [0, 1], so
two samples of a group differ in reward unless their texts are equal, and every update moves the weights."""

from __future__ import annotations

from typing import Any

from openai import AsyncOpenAI

import voltbus as agl


@agl.rollout
async def text_agent(task: dict[str, Any], llm: agl.LLM) -> float:
    client = AsyncOpenAI(base_url=llm.endpoint, api_key=llm.api_key or "none", max_retries=5)
    reply = await client.completions.create(model=llm.model, prompt=f"{task['a']}+{task['b']}=", max_tokens=4)
    text = reply.choices[0].text
    return sum(map(ord, text)) % 97 / 96
