"""The agent, written as for Agent Lightning 0.3 (only the import differs): it fills its prompt template
with the task, asks its model once through the OpenAI client, and returns the grader's reward.

Its model is the ``LLM`` resource (the rule-based stand-in, or a real model); the key is read from
``OPENAI_API_KEY`` here so that it is never published in the resources on the bus. The runner records
the call as a span of the attempt (``openai.chat.completions.create``, with request and response).
"""

from __future__ import annotations

import os
from typing import Any

from openai import AsyncOpenAI

import voltbus as agl

from .tasks import reward


@agl.rollout
async def calc_agent(task: dict[str, Any], llm: agl.LLM, prompt_template: agl.PromptTemplate) -> float:
    """Ask for the value of ``task["expression"]``; reward 1.0 for the bare right number."""
    prompt = prompt_template.format(**task)
    key = llm.api_key or os.environ.get("OPENAI_API_KEY") or "none"
    async with AsyncOpenAI(base_url=llm.endpoint, api_key=key, max_retries=2) as client:
        messages = [{"role": "user", "content": prompt}]
        reply = await client.chat.completions.create(model=llm.model, messages=messages, temperature=0.0)
    return reward(reply.choices[0].message.content or "", task["answer"])
