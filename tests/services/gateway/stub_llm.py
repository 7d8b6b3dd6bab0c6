"""A stub OpenAI-compatible engine (the outer edge), with vLLM's token ids and logprobs.

Answers chat and completions, streamed or not (with a call of the ``add`` tool when the request
offers tools and has no tool result yet); ``StubControl`` makes it fail with 503, or hold
calls until released (to keep a call in flight), and keeps every body it received.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from voltbus.services.serving import free_port, serving

PROMPT_IDS = [101, 102, 103]
TOKENS = [("4", 52, -0.125), ("2", 50, -0.25)]
"""The answer: (text piece, token id, logprob) per sampled token."""


@dataclass
class StubControl:
    """How the stub behaves, and what it saw."""

    fail_status: int | None = None
    hold: asyncio.Event | None = None
    stream_gate: asyncio.Event | None = None
    """When set, a stream stops after its first chunk until this is set."""
    entered: asyncio.Event = field(default_factory=asyncio.Event)
    received: list[dict[str, Any]] = field(default_factory=list)


TOOL_PIECES = ['{"a": ', '40, "b": 2}']
"""A streamed tool call's arguments arrive in these pieces (when the request offers ``tools``)."""
TOOL_IDS = [60, 61, 62]
"""The token ids of a tool call (one per piece of a streamed one, its opening included)."""


def wants_tool(body: dict[str, Any]) -> bool:
    """The stub calls the ``add`` tool when the request offers tools and no tool result came back yet."""
    messages = body.get("messages") or [{}]
    return bool(body.get("tools")) and messages[-1].get("role") != "tool"


def _tool_choice() -> dict[str, Any]:
    call = {"id": "call_1", "type": "function", "function": {"name": "add", "arguments": "".join(TOOL_PIECES)}}
    lp = {"content": [{"token": "", "logprob": -0.5, "bytes": None, "top_logprobs": []} for _ in TOOL_IDS]}
    message = {"role": "assistant", "content": None, "tool_calls": [call]}
    return {"index": 0, "finish_reason": "tool_calls", "token_ids": TOOL_IDS, "message": message, "logprobs": lp}


def _choice(kind: str, index: int = 0) -> dict[str, Any]:
    text = "".join(t for t, _, _ in TOKENS)
    ids = [i + index for _, i, _ in TOKENS]  # choice i samples different ids, so choices are told apart
    if kind == "chat":
        lp = {"content": [{"token": t, "logprob": p, "bytes": None, "top_logprobs": []} for t, _, p in TOKENS]}
        return {
            "index": index,
            "finish_reason": "stop",
            "token_ids": ids,
            "message": {"role": "assistant", "content": text},
            "logprobs": lp,
        }
    lp = {
        "tokens": [t for t, _, _ in TOKENS],
        "token_logprobs": [p for _, _, p in TOKENS],
        "top_logprobs": None,
        "text_offset": [0, 1],
    }
    return {
        "index": index,
        "finish_reason": "stop",
        "token_ids": ids,
        "prompt_token_ids": PROMPT_IDS,
        "text": text,
        "logprobs": lp,
    }


def _chunks(kind: str, model: str) -> list[dict[str, Any]]:
    head = {
        "id": "cmpl-stub",
        "created": 0,
        "model": model,
        "object": "chat.completion.chunk" if kind == "chat" else "text_completion",
    }
    out = []
    for n, (text, tid, p) in enumerate(TOKENS):
        last = n == len(TOKENS) - 1
        if kind == "chat":
            choice = {
                "index": 0,
                "delta": {"content": text, **({"role": "assistant"} if n == 0 else {})},
                "token_ids": [tid],
                "logprobs": {"content": [{"token": text, "logprob": p, "bytes": None, "top_logprobs": []}]},
            }
        else:
            choice = {
                "index": 0,
                "text": text,
                "token_ids": [tid],
                "logprobs": {"tokens": [text], "token_logprobs": [p], "top_logprobs": None, "text_offset": [n]},
            }
            if n == 0:
                choice["prompt_token_ids"] = PROMPT_IDS
        choice["finish_reason"] = "stop" if last else None
        out.append(
            {**head, "choices": [choice], **({"prompt_token_ids": PROMPT_IDS} if n == 0 and kind == "chat" else {})}
        )
    return out


def _tool_chunks(model: str) -> list[dict[str, Any]]:
    """A chat stream that answers with one tool call whose arguments come in pieces."""
    head = {"id": "cmpl-stub", "created": 0, "model": model, "object": "chat.completion.chunk"}
    first = {"index": 0, "id": "call_1", "type": "function", "function": {"name": "add", "arguments": ""}}
    deltas = [first] + [{"index": 0, "function": {"arguments": piece}} for piece in TOOL_PIECES]
    out = []
    for n, delta in enumerate(deltas):
        last = n == len(deltas) - 1
        choice = {"index": 0, "delta": {"tool_calls": [delta]}, "token_ids": [TOOL_IDS[n]]}
        choice["finish_reason"] = "tool_calls" if last else None
        out.append({**head, "choices": [choice]})
    return out


def stub_app(control: StubControl) -> Starlette:
    """The stub engine app."""

    async def complete(request: Request, kind: str) -> Response:
        body = await request.json()
        control.received.append(body)
        control.entered.set()
        if control.hold is not None:
            await control.hold.wait()
        if control.fail_status is not None:
            return JSONResponse({"error": {"message": "engine overloaded"}}, status_code=control.fail_status)
        model = body.get("model", "stub")
        if body.get("stream"):

            async def sse() -> AsyncIterator[bytes]:
                chunks = _tool_chunks(model) if wants_tool(body) else _chunks(kind, model)
                for n, chunk in enumerate(chunks):
                    if n == 1 and control.stream_gate is not None:
                        await control.stream_gate.wait()
                    yield f"data: {json.dumps(chunk)}\n\n".encode()
                yield b"data: [DONE]\n\n"

            return StreamingResponse(sse(), media_type="text/event-stream")
        usage = {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
        obj = "chat.completion" if kind == "chat" else "text_completion"
        extra = {"prompt_token_ids": PROMPT_IDS} if kind == "chat" else {}
        return JSONResponse(
            {
                "id": "cmpl-stub",
                "object": obj,
                "created": 0,
                "model": model,
                "choices": [_tool_choice()]
                if wants_tool(body)
                else [_choice(kind, i) for i in range(int(body.get("n") or 1))],
                "usage": usage,
                **extra,
            }
        )

    async def chat(request: Request) -> Response:
        return await complete(request, "chat")

    async def completions(request: Request) -> Response:
        return await complete(request, "completions")

    async def models(_: Request) -> Response:
        return JSONResponse(
            {"object": "list", "data": [{"id": "stub", "object": "model", "created": 0, "owned_by": "me"}]}
        )

    return Starlette(
        routes=[
            Route("/v1/chat/completions", chat, methods=["POST"]),
            Route("/v1/completions", completions, methods=["POST"]),
            Route("/v1/models", models),
        ]
    )


@asynccontextmanager
async def serve(app: Any, lifespan: str = "off") -> AsyncIterator[str]:
    """Serve an ASGI app with uvicorn on a free loopback port; yields ``http://127.0.0.1:<port>``."""
    async with serving(app, free_port(), lifespan=lifespan) as url:
        yield url
