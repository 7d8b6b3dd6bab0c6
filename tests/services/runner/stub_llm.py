"""A stub OpenAI-compatible server (the outer edge): it answers the arithmetic a question starts with (in
calc_x's ``### ANSWER: x ###`` form when the question asks for it), with token ids and logprobs as vLLM gives them."""

from __future__ import annotations

import asyncio
import json
import re
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from ...conftest import wait_for


async def chat(request: Request) -> JSONResponse:
    body = await request.json()
    question = body["messages"][-1]["content"]
    expression = re.match(r"[\d\s+\-*/().]*", question).group()  # type: ignore[union-attr]
    answer = str(eval(expression, {"__builtins__": {}}))  # the tests only ask arithmetic
    if "### ANSWER" in question:  # asked for calc_x's answer format
        answer = f"The result is {answer}. ### ANSWER: {answer} ###"
    if body.get("response_format", {}).get("type") == "json_schema":  # structured outputs: {"value": ...}
        answer = json.dumps({"value": int(float(answer))})
    return JSONResponse(
        {
            "id": "chatcmpl-stub",
            "object": "chat.completion",
            "created": 0,
            "model": body["model"],
            "prompt_token_ids": [101, 102, 103],
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "stop",
                    "token_ids": [7, 8],
                    "message": {"role": "assistant", "content": answer},
                    "logprobs": {"content": [{"token": answer, "logprob": -0.125, "bytes": None, "top_logprobs": []}]},
                }
            ],
            "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
        }
    )


@asynccontextmanager
async def stub_llm() -> AsyncIterator[str]:
    """Serve the stub on a free loopback port; yields its /v1 base URL."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    app = Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off"))
    task = asyncio.create_task(server.serve())
    await wait_for(lambda: server.started, 10, "the stub LLM to start")  # uvicorn offers no start-up event
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        server.should_exit = True
        await task
