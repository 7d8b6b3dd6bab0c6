"""A stub of vLLM's OpenAI server (the outer edge): the subset the weight push uses, with vLLM's paths and fields.

Dev-mode routes (``VLLM_SERVER_DEV_MODE=1`` in vLLM): ``POST /pause?mode=abort|wait|keep`` →
``{"status": "paused"}``, ``POST /resume`` → ``{"status": "resumed"}``, ``GET /is_paused`` →
``{"is_paused": bool}``, ``POST /collective_rpc {"method", "args", "kwargs", "timeout"}`` (here only
``reload_weights`` with ``kwargs.weights_path``; answered ``{"results": [null]}``),
``POST /reset_prefix_cache``, ``POST /update_weight_version {"new_version"}`` →
``{"success": true, "new_version"}``, ``GET /weight_info`` → ``{"weight_version"}``. Plus ``GET /health``,
``GET /v1/models`` and non-streamed and streamed chat/completions with ``return_token_ids`` fields and,
when asked (``return_weight_versions``), per-choice ``weight_versions`` spans.

Runtime LoRA routes (``--enable-lora`` with ``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True``):
``POST /v1/load_lora_adapter {"lora_name", "lora_path"}`` (400 when that name is loaded already),
``POST /v1/unload_lora_adapter {"lora_name"}`` (404 when it is not), adapters listed by ``GET /v1/models``
with ``parent`` the base; a call naming a model that is neither the base nor a loaded adapter gets 404.

The sampled token ids tell which weights sampled them (``token_of``), so a test can check every
recorded label against what really sampled the call. ``VllmControl`` counts requests in flight and
any that arrived while weights were being reloaded, and can hold calls or fail the reload.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

PROMPT_IDS = [11, 12, 13]


def token_of(generation: int) -> int:
    """The first token id sampled by the ``generation``-th weights loaded (0: those it started with)."""
    return 100 + generation


@dataclass
class VllmControl:
    """How the stub behaves, and what it saw."""

    weights: list[str] = field(default_factory=lambda: ["models/start"])
    """Every weights path loaded, the one it started with first; the last is served."""
    label: str = "default"
    """vLLM's weight-version label (``default`` until someone sets one)."""
    paused: bool = False
    resumed: asyncio.Event = field(default_factory=asyncio.Event)
    inflight: int = 0
    reloading: bool = False
    arrived_while_reloading: int = 0
    """Completions requests that arrived while a reload ran (must stay 0)."""
    inflight_at_reload: list[int] = field(default_factory=list)
    """Requests in flight when each reload started (must all be 0)."""
    reload_s: float = 0.05
    """How long a reload takes (the engine's work)."""
    pause_s: float = 0.0
    """How long ``/pause?mode=wait`` takes to answer (vLLM waits for requests in flight); paused from its start."""
    reload_error: str | None = None
    """When set, ``reload_weights`` fails with this text (HTTP 500, as vLLM answers a worker error)."""
    hold: asyncio.Event | None = None
    """When set, completions wait for it (a call kept in flight)."""
    entered: asyncio.Event = field(default_factory=asyncio.Event)
    ops: list[str] = field(default_factory=list)
    """The control operations received, in order."""
    garbled_weight_info: bool = False
    """True: ``/weight_info`` answers 200 with a body that is not JSON."""
    version_routes: bool = True
    """False: no ``/update_weight_version`` and ``/weight_info`` (404) and no ``weight_versions`` spans,
    as in vLLMs before them."""

    adapters: dict[str, str] = field(default_factory=dict)
    """Loaded LoRA adapters: name -> path."""
    runtime_lora: bool = True
    """False: no runtime LoRA routes (404), as a vLLM started without VLLM_ALLOW_RUNTIME_LORA_UPDATING."""
    lora_refusal: tuple[int, str] | None = None
    """When set, ``/v1/load_lora_adapter`` answers this status and message (e.g. a path vLLM cannot read)."""
    models_called: list[str] = field(default_factory=list)
    """The ``model`` of every completions request, in order."""

    def __post_init__(self) -> None:
        self.resumed.set()

    @property
    def generation(self) -> int:
        return len(self.weights) - 1


def _sampled(control: VllmControl, body: dict[str, Any], kind: str) -> dict[str, Any]:
    ids = [token_of(control.generation), 7]
    choice: dict[str, Any] = {"index": 0, "finish_reason": "stop", "token_ids": ids}
    if kind == "chat":
        choice["message"] = {"role": "assistant", "content": "ok"}
        choice["logprobs"] = {"content": [{"token": str(t), "logprob": -0.5, "top_logprobs": []} for t in ids]}
    else:
        choice["text"] = "ok"
        choice["prompt_token_ids"] = PROMPT_IDS
        choice["logprobs"] = {"tokens": ["o", "k"], "token_logprobs": [-0.5, -0.5], "top_logprobs": None}
    if body.get("return_weight_versions") and control.version_routes:  # spans came after the label routes
        choice["weight_versions"] = [{"version": control.label, "start": 0, "end": len(ids)}]
    return choice


def stub_vllm_app(control: VllmControl) -> Starlette:
    """The stub vLLM app."""

    async def complete(request: Request, kind: str) -> Response:
        body = await request.json()
        model = body.get("model", "policy")
        control.models_called.append(model)
        if model != "policy" and model not in control.adapters:
            error = {"message": f"The model `{model}` does not exist.", "type": "NotFoundError", "code": 404}
            return JSONResponse({"error": error}, status_code=404)
        if control.reloading:
            control.arrived_while_reloading += 1
        control.inflight += 1
        streaming = False
        try:
            control.entered.set()
            await control.resumed.wait()  # vLLM holds new requests while paused
            if control.hold is not None:
                await control.hold.wait()
            choice = _sampled(control, body, kind)
            head = {"id": "cmpl-1", "created": 0, "model": body.get("model", "policy")}
            top = {"prompt_token_ids": PROMPT_IDS} if kind == "chat" else {}
            if body.get("stream"):
                streaming = True  # in flight until its last chunk is sent
                chunks = _counted(control, _stream(head, top, choice, kind))
                return StreamingResponse(chunks, media_type="text/event-stream")
        finally:
            if not streaming:
                control.inflight -= 1
        obj = "chat.completion" if kind == "chat" else "text_completion"
        usage = {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
        return JSONResponse({**head, "object": obj, **top, "choices": [choice], "usage": usage})

    async def pause(request: Request) -> Response:
        control.ops.append(f"pause:{request.query_params.get('mode', 'abort')}")
        control.paused = True
        control.resumed.clear()
        await asyncio.sleep(control.pause_s)  # the engine's own wait, not a test's synchronization
        return JSONResponse({"status": "paused"})

    async def resume(_: Request) -> Response:
        control.ops.append("resume")
        control.paused = False
        control.resumed.set()
        return JSONResponse({"status": "resumed"})

    async def collective_rpc(request: Request) -> Response:
        body = await request.json()
        method, kwargs = body.get("method"), body.get("kwargs") or {}
        control.ops.append(f"collective_rpc:{method}")
        if method != "reload_weights" or not isinstance(kwargs.get("weights_path"), str):
            return JSONResponse({"error": f"unsupported method {method!r}"}, status_code=500)
        control.inflight_at_reload.append(control.inflight)
        control.reloading = True
        try:
            await asyncio.sleep(control.reload_s)  # the engine's own work, not a test's synchronization
            if control.reload_error is not None:
                return JSONResponse({"error": control.reload_error}, status_code=500)
            control.weights.append(kwargs["weights_path"])
        finally:
            control.reloading = False
        return JSONResponse({"results": [None]})

    async def simple(name: str, request: Request) -> Response:
        if name in ("update_weight_version", "weight_info") and not control.version_routes:
            return JSONResponse({"detail": "Not Found"}, status_code=404)
        control.ops.append(name)
        if name == "weight_info" and control.garbled_weight_info:
            return Response(b"<html>proxy error</html>", status_code=200)
        if name == "weight_info":
            return JSONResponse({"weight_version": control.label})
        if name == "update_weight_version":
            control.label = str((await request.json())["new_version"])
            return JSONResponse({"success": True, "new_version": control.label})
        return Response(status_code=200)

    async def load_lora(request: Request) -> Response:
        if not control.runtime_lora:
            return JSONResponse({"detail": "Not Found"}, status_code=404)
        body = await request.json()
        name = body["lora_name"]
        control.ops.append(f"load_lora:{name}")
        if control.lora_refusal is not None:
            status, message = control.lora_refusal
            return JSONResponse({"error": {"message": message, "type": "BadRequestError", "code": status}}, status)
        if name in control.adapters:
            message = f"The lora adapter '{name}' has already been loaded."
            return JSONResponse({"error": {"message": message, "type": "InvalidUserInput", "code": 400}}, 400)
        control.adapters[name] = body["lora_path"]
        return Response(f"Success: LoRA adapter '{name}' added successfully.")

    async def unload_lora(request: Request) -> Response:
        if not control.runtime_lora:
            return JSONResponse({"detail": "Not Found"}, status_code=404)
        name = (await request.json())["lora_name"]
        control.ops.append(f"unload_lora:{name}")
        if control.adapters.pop(name, None) is None:
            message = f"The lora adapter '{name}' cannot be found."
            return JSONResponse({"error": {"message": message, "type": "NotFoundError", "code": 404}}, 404)
        return Response(f"Success: LoRA adapter '{name}' removed successfully.")

    def models(_: Request) -> Response:
        cards = [{"id": "policy", "object": "model", "parent": None}]
        cards += [
            {"id": name, "object": "model", "root": path, "parent": "policy"} for name, path in control.adapters.items()
        ]
        return JSONResponse({"object": "list", "data": cards})

    def op(name: str) -> Any:
        async def endpoint(request: Request) -> Response:
            return await simple(name, request)

        return endpoint

    async def chat(request: Request) -> Response:
        return await complete(request, "chat")

    async def completions(request: Request) -> Response:
        return await complete(request, "completions")

    routes = [
        Route("/v1/chat/completions", chat, methods=["POST"]),
        Route("/v1/completions", completions, methods=["POST"]),
        Route("/v1/models", models),
        Route("/v1/load_lora_adapter", load_lora, methods=["POST"]),
        Route("/v1/unload_lora_adapter", unload_lora, methods=["POST"]),
        Route("/health", lambda _: Response(status_code=200)),
        Route("/pause", pause, methods=["POST"]),
        Route("/resume", resume, methods=["POST"]),
        Route("/is_paused", lambda _: JSONResponse({"is_paused": control.paused})),
        Route("/collective_rpc", collective_rpc, methods=["POST"]),
        Route("/reset_prefix_cache", op("reset_prefix_cache"), methods=["POST"]),
        Route("/update_weight_version", op("update_weight_version"), methods=["POST"]),
        Route("/weight_info", op("weight_info")),
    ]
    return Starlette(routes=routes)


async def _counted(control: VllmControl, chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    try:
        async for chunk in chunks:
            yield chunk
    finally:
        control.inflight -= 1


async def _stream(head: dict[str, Any], top: dict[str, Any], choice: dict[str, Any], kind: str) -> AsyncIterator[bytes]:
    """The choice as two chunks, vLLM-style: prompt ids first, ``weight_versions`` on the last."""
    obj = "chat.completion.chunk" if kind == "chat" else "text_completion"
    for n, token in enumerate(choice["token_ids"]):
        last = n == len(choice["token_ids"]) - 1
        piece: dict[str, Any] = {"index": 0, "token_ids": [token], "finish_reason": "stop" if last else None}
        if kind == "chat":
            piece["delta"] = {"content": "ok"[n]}
            piece["logprobs"] = {"content": [{"token": str(token), "logprob": -0.5}]}
        else:
            piece["text"] = "ok"[n]
            piece["logprobs"] = {"token_logprobs": [-0.5]}
        if last and "weight_versions" in choice:
            piece["weight_versions"] = choice["weight_versions"]
        chunk = {**head, "object": obj, **(top if n == 0 else {}), "choices": [piece]}
        yield f"data: {json.dumps(chunk)}\n\n".encode()
    yield b"data: [DONE]\n\n"
