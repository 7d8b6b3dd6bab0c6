"""An Agent Lightning-style agent: it asks the policy for ``a+b=`` and is rewarded for the exact sum.

It knows nothing about voltbus beyond the resources it is given: ``llm`` is the policy behind the
gateway (a ``ProxyLLM`` scoped to this attempt), and the returned float is the reward. Training
rollouts sample at temperature 1; validation ones decode greedily.
"""

from __future__ import annotations

import asyncio
import weakref
from typing import Any

import httpx
from openai import AsyncOpenAI

import voltbus as agl

_HTTP: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, httpx.AsyncClient] = weakref.WeakKeyDictionary()


def http_client() -> httpx.AsyncClient:
    """One HTTP client per event loop, shared by every rollout: building one per call costs ~50 ms of
    CPU (its TLS context), which on 2 cores was a quarter of a training run's time."""
    loop = asyncio.get_running_loop()
    if loop not in _HTTP:
        _HTTP[loop] = httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=256))
    return _HTTP[loop]


@agl.rollout
async def arith_agent(task: dict[str, Any], llm: agl.LLM, rollout: agl.Rollout) -> float:
    client = AsyncOpenAI(base_url=llm.endpoint, api_key=llm.api_key or "none", max_retries=5, http_client=http_client())
    temperature = 1.0 if rollout.mode == "train" else 0.0
    reply = await client.completions.create(
        model=llm.model, prompt=f"{task['a']}+{task['b']}=", max_tokens=4, temperature=temperature
    )
    return 1.0 if reply.choices[0].text.strip() == str(task["a"] + task["b"]) else 0.0


def tasks() -> list[dict[str, int]]:
    """Every single-digit addition, each with an id (the GRPO group of its rollouts is set per step)."""
    return [{"id": f"{a}+{b}", "a": a, "b": b} for a in range(10) for b in range(10)]
