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
