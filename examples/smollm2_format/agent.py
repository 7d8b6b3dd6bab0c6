"""An Agent Lightning-style chat agent for SmolLM2-135M-Instruct: it asks ``7+5=`` and wants exactly
``The answer is 12.``; the reward (0..1) gives partial credit for the format and for the number.

It knows nothing about voltbus beyond its resources: ``llm`` is the policy behind the gateway. Every
rollout samples at temperature 0.7; validation ones with a seed per task, so two policies meet the same draws.
"""

from __future__ import annotations

import asyncio
import json
import re
import weakref
import zlib
from pathlib import Path
from typing import Any

import httpx
from openai import AsyncOpenAI

import voltbus as agl

SYSTEM = "Reply with one sentence: The answer is N."
"""The instruction; the base model follows it greedily (with a wrong N) but only a fifth of the time sampled."""
TEMPERATURE = 0.7
"""At 1.0 the base model babbles (reward 0.0 on 16 probes); at 0.7 it answers in the format often enough to learn."""
MAX_TOKENS = 12
"""``The answer is 12.`` is 6 tokens, and its end of turn a seventh: a short budget keeps sampling cheap."""
SENTENCE = re.compile(r"The answer is (-?\d+)\.")
TASKS = Path(__file__).resolve().parent / "tasks.jsonl"

_HTTP: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, httpx.AsyncClient] = weakref.WeakKeyDictionary()


def http_client() -> httpx.AsyncClient:
    """One HTTP client per event loop, shared by every rollout (building one costs ~50 ms of CPU)."""
    loop = asyncio.get_running_loop()
    if loop not in _HTTP:
        _HTTP[loop] = httpx.AsyncClient(timeout=600, limits=httpx.Limits(max_connections=256))
    return _HTTP[loop]


def reward(reply: str, answer: int) -> float:
    """0.5 for exactly one sentence ``The answer is N.``, plus 0.5 when the reply's last number is ``answer``.

    >>> reward("The answer is 12.", 12), reward("The answer is 11.", 12), reward("7 + 5 = 12", 12), reward("Hi", 12)
    (1.0, 0.5, 0.5, 0.0)
    """
    numbers = re.findall(r"-?\d+", reply)
    exact = SENTENCE.fullmatch(reply.strip()) is not None
    return 0.5 * exact + 0.5 * (bool(numbers) and int(numbers[-1]) == answer)


@agl.rollout
async def format_agent(task: dict[str, Any], llm: agl.LLM, rollout: agl.Rollout) -> float:
    client = AsyncOpenAI(base_url=llm.endpoint, api_key=llm.api_key or "none", max_retries=5, http_client=http_client())
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": task["question"]}]
    extra = {"seed": zlib.crc32(task["id"].encode())} if rollout.mode != "train" else {}
    reply = await client.chat.completions.create(
        model=llm.model, messages=messages, max_tokens=MAX_TOKENS, temperature=TEMPERATURE, extra_body=extra
    )
    return reward(reply.choices[0].message.content or "", task["answer"])


def tasks(n: int, seed: int = 0) -> list[dict[str, Any]]:
    """The first ``n`` tasks of ``tasks.jsonl``'s training split (seed 0) or validation split (seed 1)."""
    rows = [json.loads(line) for line in TASKS.read_text().splitlines() if line.strip()]
    split = [r for r in rows if r["split"] == ("train" if seed == 0 else "val")]
    return split[:n]
