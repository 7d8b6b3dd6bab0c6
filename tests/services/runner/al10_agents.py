"""Agents written for Agent Lightning 1.0's local controller, as its examples write them (``examples/gsm8k/
gsm8k_agent.py`` at v1.0.0: ``ChatAgent`` and the helpers it uses, unchanged). They import nothing from
Agent Lightning, so nothing is changed to run them on voltbus: they read their task from the ``env_map``
variables, the endpoint from ``AGL_*``, and post their reward to ``AGL_EVENT_URL``."""

from __future__ import annotations

import asyncio
import os
import re
from typing import Any

import httpx


def extract_final_answer(text: str) -> str:
    """Extract the final GSM8K answer from model or dataset text."""
    text = str(text).strip()
    boxed_match = re.search(r"###\s*ANSWER:\s*(.+?)(\s*###|$)", text, re.DOTALL | re.IGNORECASE)
    if boxed_match:
        return boxed_match.group(1).strip()
    gsm8k_match = re.search(r"####\s*(.+)$", text, re.DOTALL)
    if gsm8k_match:
        return gsm8k_match.group(1).strip()
    number_matches = re.findall(r"[-+]?\d[\d,]*(?:\.\d+)?", text)
    return number_matches[-1].replace(",", "") if number_matches else text


def normalize_answer(text: str) -> str:
    return extract_final_answer(text).replace(",", "").strip()


def build_prompt(question: str) -> str:
    output_format = (
        "Solve the problem step by step. When you are ready, output the final answer surrounded by "
        "three sharps (`###`), in the form of ### ANSWER: <answer> ###."
    )
    return f"{question}\n\n{output_format}"


def post_reward(*, event_url: str, agl_key: str, prediction: str, answer: str) -> None:
    reward = 1.0 if normalize_answer(prediction) == normalize_answer(answer) else 0.0

    httpx.post(
        event_url,
        json={
            "event_type": "reward",
            "data": {"value": reward},
        },
        headers={"Authorization": f"Bearer {agl_key}"},
        timeout=10.0,
    ).raise_for_status()


class ChatAgent:
    async def run(self) -> None:
        from openai import AsyncOpenAI

        question = os.environ["QUESTION"]
        answer = os.environ["ANSWER"]
        agl_key = os.environ["AGL_KEY"]
        event_url = os.environ["AGL_EVENT_URL"]
        openai_base_url = os.environ["AGL_OPENAI_BASE_URL"]

        client = AsyncOpenAI(
            base_url=openai_base_url,
            api_key=agl_key,
            max_retries=6,
        )
        response = await asyncio.wait_for(
            client.chat.completions.create(
                model="auto",
                messages=[
                    {
                        "role": "user",
                        "content": build_prompt(question),
                    }
                ],
                temperature=1.0,
                max_tokens=1024,
            ),
            timeout=300.0,
        )
        post_reward(
            event_url=event_url,
            agl_key=agl_key,
            prediction=response.choices[0].message.content or "",
            answer=answer,
        )


# Not from Agent Lightning's examples: the other shapes voltbus runs the same way.


class SyncAgent:
    """A class whose ``run`` is synchronous; its task comes whole, as JSON, through ``env_map`` ``input``."""

    def run(self) -> None:
        import json

        import openai

        task = json.loads(os.environ["TASK"])
        key = os.environ["AGL_KEY"]
        client = openai.OpenAI(base_url=os.environ["AGL_OPENAI_BASE_URL"], api_key=key)
        reply = client.chat.completions.create(model="auto", messages=[{"role": "user", "content": task["question"]}])
        value = 1.0 if reply.choices[0].message.content == str(task["answer"]) else 0.0
        event = {"event_type": "reward", "data": {"value": value}}
        headers = {"Authorization": f"Bearer {key}"}
        httpx.post(os.environ["AGL_EVENT_URL"], json=event, headers=headers, timeout=10.0).raise_for_status()


class FailingAgent:
    """``run`` raises: the attempt fails with the error (AL 1.0's process exits 1)."""

    async def run(self) -> None:
        raise RuntimeError(f"no answer for {os.environ.get('QUESTION')}")


def agent(task: dict[str, Any]) -> None:
    """A plain function of the task alone, using the same AGL_* variables."""
    import openai

    key = os.environ["AGL_KEY"]
    client = openai.OpenAI(base_url=os.environ["AGL_OPENAI_BASE_URL"], api_key=key)
    reply = client.chat.completions.create(model="auto", messages=[{"role": "user", "content": task["question"]}])
    prediction = reply.choices[0].message.content or ""
    post_reward(event_url=os.environ["AGL_EVENT_URL"], agl_key=key, prediction=prediction, answer=str(task["answer"]))
