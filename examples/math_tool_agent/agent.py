"""A math agent with a calculator tool, written the Agent Lightning 0.3 way (``import voltbus as agl``).

The policy (a 1 M-parameter character model) is asked ``Q:17*23`` or ``Q:12+45+78``: sums and products
it cannot work out itself. It may answer at once (``A:391``) or call the tool with a line
``calc(17*23)``; the agent then runs the tool, appends its result ``=391`` to the transcript, and asks
the policy again for the final ``A:...`` line. The reward is 1 for the exact answer, else 0.

A transcript with the tool::

    Q:17*23                 <- prompt of call 1
    calc(17*23)             <- sampled (call 1 stops at the newline)
    =391                    <- tool output: context, never trained on
    A:391                   <- sampled (call 2), then </s>

The second prompt is the first prompt plus everything after it, character for character, so the
projection stitches both calls into one training row with the tool's tokens masked out.
"""

from __future__ import annotations

import asyncio
import random
import re
import weakref
import zlib
from typing import Any

import httpx
from openai import AsyncOpenAI

import voltbus as agl

TOOL_CALL = re.compile(r"calc\(([0-9+*]{1,24})\)")
_HTTP: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, httpx.AsyncClient] = weakref.WeakKeyDictionary()


def calc(expression: str) -> str:
    """The tool: sums of products of whole numbers, nothing else (no ``eval``).

    >>> calc("17*23"), calc("12+45+78"), calc("2+3*4"), calc("2**8"), calc("1/0")
    ('391', '135', '14', 'error', 'error')
    """
    if not re.fullmatch(r"\d+([+*]\d+)*", expression):
        return "error"
    total = 0
    for term in expression.split("+"):
        product = 1
        for factor in term.split("*"):
            product *= int(factor)
        total += product
    return str(total)


def problem(rng: random.Random) -> tuple[str, int]:
    """A question and its answer: a product of two 2-digit numbers, or a sum of three."""
    if rng.random() < 0.5:
        a, b = rng.randint(11, 99), rng.randint(11, 99)
        return f"{a}*{b}", a * b
    a, b, c = rng.randint(10, 99), rng.randint(10, 99), rng.randint(10, 99)
    return f"{a}+{b}+{c}", a + b + c


def tasks(count: int, seed: int) -> list[dict[str, Any]]:
    """``count`` problems drawn with ``seed`` (the same seed, the same list)."""
    rng = random.Random(seed)
    rows = []
    for i in range(count):
        question, answer = problem(rng)
        rows.append({"id": f"{seed}-{i}", "question": question, "answer": answer})
    return rows


def answer_of(line: str) -> str | None:
    """The answer of an ``A:...`` line, else None."""
    return line[2:].strip() if line.startswith("A:") else None


def http_client() -> httpx.AsyncClient:
    """One HTTP client per event loop, shared by every rollout (building one costs ~50 ms of CPU)."""
    loop = asyncio.get_running_loop()
    if loop not in _HTTP:
        _HTTP[loop] = httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=256))
    return _HTTP[loop]


@agl.rollout
async def math_agent(task: dict[str, Any], llm: agl.LLM, rollout: agl.Rollout) -> float:
    """Ask, run the tool if the policy calls it, ask again; reward 1 for the exact answer.

    Training samples at temperature 1; validation samples too, with a seed per task, so two
    policies are compared on the same random draws."""
    client = AsyncOpenAI(base_url=llm.endpoint, api_key=llm.api_key or "none", max_retries=5, http_client=http_client())
    extra = {"seed": zlib.crc32(str(task["id"]).encode())} if rollout.mode != "train" else {}

    async def complete(prompt: str, max_tokens: int) -> Any:
        reply = await client.completions.create(
            model=llm.model, prompt=prompt, max_tokens=max_tokens, temperature=1.0, stop=["\n"], extra_body=extra
        )
        return reply.choices[0].text

    transcript = f"Q:{task['question']}\n"
    first = await complete(transcript, 20)
    call = TOOL_CALL.fullmatch(first)
    if call is None:
        answer = answer_of(first)
    else:
        transcript += f"{first}\n={calc(call.group(1))}\n"
        answer = answer_of(await complete(transcript, 8))
    return 1.0 if answer == str(task["answer"]) else 0.0
