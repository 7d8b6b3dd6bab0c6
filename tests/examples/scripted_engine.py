"""A scripted OpenAI-compatible engine (the outer edge): the test chooses each chat answer from the request
(a tool call, a SQL query, a verdict), and the engine answers as vLLM does, with prompt and response token
ids and logprobs, and a response id of its own for every call. Streaming is refused (400)."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

Reply = Callable[[dict[str, Any]], dict[str, Any]]
"""A request body -> the assistant message to answer with (``content`` and/or ``tool_calls``)."""


def tool_call(name: str, arguments: dict[str, Any], call_id: str = "call_1") -> dict[str, Any]:
    """An assistant message that calls one tool."""
    function = {"name": name, "arguments": json.dumps(arguments)}
    calls = [{"id": call_id, "type": "function", "function": function}]
    return {"role": "assistant", "content": None, "tool_calls": calls}


def token_ids(text: str) -> list[int]:
    """The ids the engine 'samples' for a text: one per character (enough to tell answers apart)."""
    return [10 + ord(c) % 500 for c in text] or [2]


def scripted_app(reply: Reply, received: list[dict[str, Any]]) -> Starlette:
    """The engine: every chat request is kept in ``received`` and answered with ``reply(body)``."""
    numbers = itertools.count(1)

    async def chat(request: Request) -> Response:
        body = await request.json()
        if body.get("stream"):
            return JSONResponse({"error": {"message": "the scripted engine does not stream"}}, status_code=400)
        received.append(body)
        message = reply(body)
        text = message.get("content") or json.dumps(message.get("tool_calls"))
        ids = token_ids(text)
        logprobs = [{"token": f"t{i}", "logprob": -0.5, "bytes": None, "top_logprobs": []} for i in ids]
        prompt = token_ids(json.dumps(body.get("messages"), sort_keys=True))[:64]
        finish = "tool_calls" if message.get("tool_calls") else "stop"
        choice = {"index": 0, "message": message, "finish_reason": finish, "token_ids": ids,
                  "logprobs": {"content": logprobs}}  # fmt: skip
        usage = {"prompt_tokens": len(prompt), "completion_tokens": len(ids), "total_tokens": len(prompt) + len(ids)}
        return JSONResponse(
            {
                "id": f"chatcmpl-scripted-{next(numbers)}",
                "object": "chat.completion",
                "created": 0,
                "model": body.get("model", "scripted"),
                "choices": [choice],
                "usage": usage,
                "prompt_token_ids": prompt,
            }  # fmt: skip
        )

    async def models(_: Request) -> Response:
        return JSONResponse({"object": "list", "data": [{"id": "scripted", "object": "model", "owned_by": "test"}]})

    return Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"]), Route("/v1/models", models)])
