"""Agent Lightning 0.3's calc_x agent in its exact shape, with only the import swapped.

AL's ``examples/calc_x/calc_agent.py`` asks its model (an AutoGen assistant over the OpenAI API, with
an MCP calculator tool) for the answer to ``task["question"]`` in the form ``### ANSWER: <answer> ###``
and emits reward 1.0 when it equals ``task["result"]`` (relative tolerance 1e-2), else 0.0. Here the
model is called with the OpenAI client directly (no AutoGen, no MCP server): the same
``@agl.rollout async def calc_agent(task, llm)``, ``llm.endpoint``, ``llm.model`` and ``agl.emit_reward``.
"""

from __future__ import annotations

import math
import re
from typing import TypedDict

import openai

import voltbus as agl  # was: import agentlightning as agl

OUTPUT_FORMAT = (
    "Output the answer when you are ready. The answer should be surrounded by three sharps (`###`), "
    "in the form of ### ANSWER: <answer> ###."
)


class MathProblem(TypedDict):
    """One Calc-X task (the fields the agent reads)."""

    id: str
    question: str
    result: str


def answer_of(text: str) -> str | None:
    """The answer in ``### ANSWER: <answer> ###``, if the reply has one.

    >>> answer_of("so ### ANSWER: 42 ###"), answer_of("no idea")
    ('42', None)
    """
    found = re.search(r"###\s*ANSWER:\s*(.+?)(\s*###|$)", text)
    return found.group(1) if found else None


def is_same(answer: str, result: str) -> bool:
    """Numerically equal within calc_x's relative tolerance of 1e-2 (sympy there, floats here)."""
    try:
        return math.isclose(float(answer), float(result), rel_tol=1e-2)
    except ValueError:
        return answer.strip() == result.strip()


@agl.rollout
async def calc_agent(task: MathProblem, llm: agl.LLM) -> None:
    """Ask the model for the answer to the task's question and emit a reward of 1.0 when it is right."""
    client = openai.AsyncOpenAI(base_url=llm.endpoint, api_key=llm.api_key or "dummy")
    try:
        prompt = task["question"] + " " + OUTPUT_FORMAT
        reply = await client.chat.completions.create(model=llm.model, messages=[{"role": "user", "content": prompt}])
        answer = answer_of(reply.choices[0].message.content or "")
        reward = 1.0 if answer is not None and is_same(answer, task["result"]) else 0.0
    except Exception as exc:  # as in calc_x: a failed model call or parse is a zero reward, not a failure
        print("Failure:", exc)
        reward = 0.0
    finally:
        await client.close()
    agl.emit_reward(reward)
