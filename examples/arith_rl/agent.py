"""An Agent Lightning-style agent: it asks the policy for ``a+b=`` and is rewarded for the exact sum.

It knows nothing about voltbus beyond the resources it is given: ``llm`` is the policy behind the
gateway (a ``ProxyLLM`` scoped to this attempt), and the returned float is the reward. Training
rollouts sample at temperature 1; validation ones decode greedily.
"""

from __future__ import annotations

from typing import Any

from openai import AsyncOpenAI

import voltbus as agl


@agl.rollout
async def arith_agent(task: dict[str, Any], llm: agl.LLM, rollout: agl.Rollout) -> float:
    client = AsyncOpenAI(base_url=llm.endpoint, api_key=llm.api_key or "none", max_retries=5)
    temperature = 1.0 if rollout.mode == "train" else 0.0
    reply = await client.completions.create(
        model=llm.model, prompt=f"{task['a']}+{task['b']}=", max_tokens=4, temperature=temperature
    )
    return 1.0 if reply.choices[0].text.strip() == str(task["a"] + task["b"]) else 0.0


def tasks() -> list[dict[str, int]]:
    """Every single-digit addition, each with an id (the GRPO group of its rollouts is set per step)."""
    return [{"id": f"{a}+{b}", "a": a, "b": b} for a in range(10) for b in range(10)]
