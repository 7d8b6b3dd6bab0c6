"""A multi-turn, tool-calling chat agent for SmolLM2-135M-Instruct (``import voltbus as agl``, the OpenAI client).

SmolLM2's chat template is plain ChatML: it has no tool schema, so the tool is a text convention the system
prompt teaches (the inference server ignores OpenAI ``tools``). The model is asked a product or sum it cannot work
out itself; a reply that contains ``calc(EXPRESSION)`` is a tool call: the agent runs the calculator and sends the
result back as a ``tool`` message (``<|im_start|>tool\\n391<|im_end|>`` in the template), and the model answers.
A reply without a call gets the calculator's result from the agent as a ``user`` message instead, so every
conversation has at least two turns. At most ``MAX_TURNS`` model calls; the reward is 1 when the last reply's last
number is the answer, else 0::

    system:    You have a calculator. ...    (then two worked exchanges like this one)
    user:      What is 17*23?
    assistant: calc(17*23)                      <- sampled (turn 1)
    tool:      391                              <- the tool's output: an observation, mask 0
    assistant: The answer is 391.               <- sampled (turn 2)

Each next prompt carries the earlier replies as text (as every chat client does); the gateway records the ids the
engine sampled, and the projection stitches the turns into one training row when the re-rendered prompt starts
with the previous prompt and reply ids, else counts a prefix mismatch (docs/inference.md, "Token fidelity").
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

SYSTEM = (
    "You have a calculator. To use it, reply with only calc(EXPRESSION). "
    "After its result, answer in one short sentence."
)
EXAMPLES = [
    {"role": "user", "content": "What is 12*34?"},
    {"role": "assistant", "content": "calc(12*34)"},
    {"role": "tool", "content": "408"},
    {"role": "assistant", "content": "The answer is 408."},
    {"role": "user", "content": "What is 25+17+40?"},
    {"role": "assistant", "content": "calc(25+17+40)"},
    {"role": "tool", "content": "82"},
    {"role": "assistant", "content": "The answer is 82."},
]
"""Two worked exchanges before the question. Probed in process at temperature 0.7, the base model's first reply
called the tool in 0 of 6 chats with an example in the system prompt only, 1 of 24 with the first exchange, and 23 of
24 with both."""
MAX_TURNS = 3
"""Model calls per conversation: a call, the tool's result, an answer (or a second call and its result)."""
MAX_TOKENS = 24
TEMPERATURE = 0.7
TOOL_CALL = re.compile(r"calc\(\s*([0-9+*\- ]{1,40}?)\s*\)")

_HTTP: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, httpx.AsyncClient] = weakref.WeakKeyDictionary()


def calc(expression: str) -> str:
    """The tool: sums, differences and products of whole numbers (no ``eval``).

    >>> calc("17*23"), calc("12 + 45+78"), calc("2+3*4"), calc("10-2*3"), calc("2**8"), calc("1/0")
    ('391', '135', '14', '4', 'error', 'error')
    """
    expression = expression.replace(" ", "")
    if not re.fullmatch(r"\d+([+*-]\d+)*", expression):
        return "error"
    total = 0
    for sign, term in re.findall(r"([+-]?)([\d*]+)", expression):
        product = 1
        for factor in term.split("*"):
            product *= int(factor)
        total += -product if sign == "-" else product
    return str(total)


def tool_call(reply: str) -> str | None:
    """The expression of the reply's first ``calc(...)``, else None.

    >>> tool_call("calc(17*23)"), tool_call("Let me check: calc( 17 * 23 )."), tool_call("The answer is 391.")
    ('17*23', '17 * 23', None)
    """
    found = TOOL_CALL.search(reply)
    return found.group(1) if found else None


def reward(reply: str, answer: int) -> float:
    """1 when the reply's last number is ``answer``.

    >>> reward("The answer is 391.", 391), reward("391", 391), reward("It is 390 or so.", 391), reward("", 391)
    (1.0, 1.0, 0.0, 0.0)
    """
    numbers = re.findall(r"-?\d+", reply.replace(",", ""))
    return float(bool(numbers) and int(numbers[-1]) == answer)


def http_client() -> httpx.AsyncClient:
    """One HTTP client per event loop, shared by every rollout (building one costs ~50 ms of CPU)."""
    loop = asyncio.get_running_loop()
    if loop not in _HTTP:
        _HTTP[loop] = httpx.AsyncClient(timeout=600, limits=httpx.Limits(max_connections=256))
    return _HTTP[loop]


def observation(reply: str, task: dict[str, Any]) -> dict[str, str]:
    """The message after a reply that is not the answer yet: the tool's result for the model's call, else the
    calculator's result for the task, brought by the user."""
    expression = tool_call(reply)
    if expression is not None:
        return {"role": "tool", "content": calc(expression)}
    return {"role": "user", "content": f"The calculator says {task['question']} = {calc(task['question'])}. Answer."}


@agl.rollout
async def tool_agent(task: dict[str, Any], llm: agl.LLM, rollout: agl.Rollout) -> float:
    """Converse until a reply without a tool call follows the first turn (at most ``MAX_TURNS`` calls)."""
    client = AsyncOpenAI(base_url=llm.endpoint, api_key=llm.api_key or "none", max_retries=5, http_client=http_client())
    seed = zlib.crc32(task["id"].encode()) if rollout.mode != "train" else None
    question = {"role": "user", "content": f"What is {task['question']}?"}
    messages: list[Any] = [{"role": "system", "content": SYSTEM}, *EXAMPLES, question]
    reply = ""
    for turn in range(MAX_TURNS):
        extra = {"seed": seed + turn} if seed is not None else {}
        answer = await client.chat.completions.create(
            model=llm.model, messages=messages, max_tokens=MAX_TOKENS, temperature=TEMPERATURE, extra_body=extra
        )
        reply = answer.choices[0].message.content or ""
        if turn > 0 and tool_call(reply) is None:
            break
        messages += [{"role": "assistant", "content": reply}, observation(reply, task)]
    return reward(reply, task["answer"])


def tasks(count: int, seed: int = 0) -> list[dict[str, Any]]:
    """``count`` questions drawn with ``seed``: products of two 2-digit numbers and sums of three."""
    rng = random.Random(seed)
    rows = []
    for i in range(count):
        a, b, c = rng.randint(11, 99), rng.randint(11, 99), rng.randint(10, 99)
        question = f"{a}*{b}" if i % 2 == 0 else f"{a}+{b}+{c}"
        rows.append({"id": f"{seed}-{i}", "question": question, "answer": int(calc(question))})
    return rows
