"""Agents for the fault tests' runner processes (loaded as ``tests/reliability/agents.py:<name>``)."""

from __future__ import annotations

import asyncio
from typing import Any

import voltbus as agl


class AgentCrashed(RuntimeError):
    """The poison a task can carry: the agent's own code throws."""


@agl.rollout
async def echo_agent(task: dict[str, Any], resources: dict[str, Any]) -> float:
    """Reward 1.0, after ``task["sleep"]`` seconds (a slow runner); raises for a task marked ``throw``."""
    if task.get("throw"):
        raise AgentCrashed(f"task {task.get('id')} asked the agent to throw")
    await asyncio.sleep(float(task.get("sleep", 0.0)))
    return 1.0


@agl.rollout
async def slow_arith_agent(task: dict[str, Any], llm: agl.LLM) -> float:
    """The arith_rl example's agent, one second slower: a rollout long enough for a kill to land in it."""
    from openai import AsyncOpenAI

    await asyncio.sleep(1.0)
    client = AsyncOpenAI(base_url=llm.endpoint, api_key=llm.api_key or "none", max_retries=5)
    reply = await client.completions.create(model=llm.model, prompt=f"{task['a']}+{task['b']}=", max_tokens=4)
    return 1.0 if reply.choices[0].text.strip() == str(task["a"] + task["b"]) else 0.0
