"""An agent written with the OpenAI Agents SDK (``openai-agents``); voltbus only supplies the base_url.

The one voltbus-specific line is the ``AsyncOpenAI(base_url=llm.endpoint, ...)``: ``llm`` is the
policy resource (a ``ProxyLLM`` scoped to this attempt), so every call the SDK makes goes through
the gateway, which records it as a ``ModelCalled`` event with its token ids for training.

The agent uses the SDK's default model class, ``OpenAIResponsesModel`` (the Responses API): the
gateway translates ``/v1/responses`` to a chat completion for the engine (the tiny CPU server
speaks only chat and plain completions) and records it as a chat call with its token ids. No
tools and no structured output: the tiny model can do neither (the gateway can: see
docs/gateway.md). Its text is mostly gibberish; the point is the plumbing.
"""

from __future__ import annotations

from typing import Any

from agents import Agent, ModelSettings, OpenAIResponsesModel, Runner, set_tracing_disabled
from openai import AsyncOpenAI

import voltbus as agl

set_tracing_disabled(True)  # the SDK's own tracing would export to api.openai.com; voltbus records the calls


@agl.llm_rollout
async def sdk_agent(task: dict[str, Any], llm: agl.LLM) -> float:
    """Ask the SDK agent for ``a+b=``; reward 1 for the exact sum."""
    client = AsyncOpenAI(base_url=llm.endpoint, api_key=llm.api_key or "none")  # <- the voltbus part
    agent = Agent(
        name="adder",
        instructions="Reply with the sum only.",
        model=OpenAIResponsesModel(model=llm.model, openai_client=client),  # the SDK's default: the Responses API
        model_settings=ModelSettings(temperature=1.0, max_tokens=4),
    )
    result = await Runner.run(agent, f"{task['a']}+{task['b']}=", max_turns=1)
    return 1.0 if str(result.final_output).strip() == str(task["a"] + task["b"]) else 0.0
