"""HTTP handlers: completions and chat (streamed or not), models, health, stats, weights and pause control."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from .batching import FAILED, Job
from .engine import Row
from .errors import RequestError, error_response
from .protocol import Kind, Parsed, parse
from .responses import Answer
from .state import Served
from .swap import WeightsError, swap

VERSION_HEADER = "X-Voltbus-Weight-Version"


async def read_json(request: Request, limit: int) -> Any:
    """The parsed body; 413 past ``limit`` bytes, 400 when it is not JSON."""
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise RequestError(f"request body over {limit} bytes", 413)
    raw = await request.body()
    if len(raw) > limit:
        raise RequestError(f"request body over {limit} bytes", 413)
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise RequestError(f"malformed JSON body: {exc}") from exc


def rows_for(parsed: Parsed) -> list[Row]:
    """``n`` rows per prompt; sample i of a seeded request uses seed + i."""
    rows = []
    for prompt in parsed.prompts:
        for i in range(parsed.n):
            seed = None if parsed.sampling.seed is None else parsed.sampling.seed + i
            sampling = dataclasses.replace(parsed.sampling, seed=seed)
            rows.append(Row(prompt_ids=prompt, sampling=sampling, streamed=parsed.stream))
    return rows


def generation(kind: Kind):
    async def handle(request: Request) -> Response:
        served: Served = request.app.state.served
        try:
            body = await read_json(request, served.cfg.max_body_bytes)
            parsed = await asyncio.to_thread(parse, body, kind, served.tok, served.name, served.cfg)
        except RequestError as exc:
            return exc.response()
        job = served.batcher.submit(rows_for(parsed))
        try:
            version = await job.started
            answer = Answer(parsed, version, served.text)
            if parsed.stream:
                headers = {VERSION_HEADER: version}
                return StreamingResponse(sse(answer, job), media_type="text/event-stream", headers=headers)
            await job.done
        except asyncio.CancelledError:
            job.cancel()
            raise
        except Exception as exc:
            return error_response(f"generation failed: {exc}", 500, "InternalServerError")
        return JSONResponse(answer.body(job.rows), headers={VERSION_HEADER: version})

    return handle


async def sse(answer: Answer, job: Job) -> AsyncIterator[str]:
    """The chunks of a streamed request as the engine produces its tokens, then usage and ``[DONE]``."""
    open_rows = set(range(len(job.rows)))
    offsets = [0] * len(job.rows)
    seen = [False] * len(job.rows)
    try:
        if (first := answer.first_chunk(len(job.rows))) is not None:
            yield event(first)
        while open_rows:
            index, piece = await job.pieces.get()
            if index == FAILED:
                yield event({"error": {"message": f"generation failed: {piece.text}", "type": "InternalServerError"}})
                return
            yield event(answer.piece_chunk(index, piece, not seen[index], offsets[index]))
            if piece.token_id is not None:
                seen[index] = True
                offsets[index] += len(answer.text(piece.token_id))
            if piece.finish_reason is not None:
                open_rows.discard(index)
        if answer.parsed.include_usage:
            yield event(answer.chunk([], usage=answer.usage(job.rows)))
        yield "data: [DONE]\n\n"
    finally:
        if open_rows:
            job.cancel()


def event(data: dict[str, Any]) -> str:
    return f"data: {json.dumps(data)}\n\n"


async def models(request: Request) -> Response:
    served: Served = request.app.state.served
    card = {
        "id": served.name,
        "object": "model",
        "created": served.started,
        "owned_by": "voltbus",
        "root": str(served.model_dir),
        "max_model_len": served.cfg.max_model_len,
        "weight_version": served.weights.version,
    }
    return JSONResponse({"object": "list", "data": [card]})


async def healthz(request: Request) -> Response:
    served: Served = request.app.state.served
    return JSONResponse({"status": "ok", "model": served.name, "weight_version": served.weights.version})


async def stats(request: Request) -> Response:
    """Batching counters and the weights being served."""
    served: Served = request.app.state.served
    weights = served.weights
    body = dataclasses.asdict(served.batcher.stats) | {
        "waiting_requests": len(served.batcher.waiting),
        "paused": not served.batcher.running.is_set(),
        "weight_version": weights.version,
        "weights_sha256": weights.sha256,
        "base_sha256": weights.base_sha256,
        "swaps": weights.swaps,
        "last_swap_error": weights.last_error,
    }
    return JSONResponse(body)


async def update_weights(request: Request) -> Response:
    """``{"path", "version"?, "sha256"?}``: serve the safetensors file (or model directory) at ``path``."""
    served: Served = request.app.state.served
    try:
        body = await read_json(request, served.cfg.max_body_bytes)
        if not isinstance(body, dict) or not isinstance(body.get("path"), str):
            raise RequestError("body must be an object with a string path", param="path")
        version, sha256 = body.get("version"), body.get("sha256")
        if not isinstance(version, str | None) or not isinstance(sha256, str | None):
            raise RequestError("version and sha256 must be strings")
        await swap(served.model, served.weights, body["path"], version or None, sha256)
    except RequestError as exc:
        return exc.response()
    except WeightsError as exc:
        return error_response(str(exc), 400, "invalid_request_error", "path")
    weights = served.weights
    return JSONResponse({"weight_version": weights.version, "sha256": weights.sha256, "swaps": weights.swaps})


async def pause(request: Request) -> Response:
    """Start no new batch (requests wait); answers once the batch in progress has finished."""
    served: Served = request.app.state.served
    await served.batcher.pause()
    return JSONResponse({"is_paused": True})


async def resume(request: Request) -> Response:
    served: Served = request.app.state.served
    served.batcher.resume()
    return JSONResponse({"is_paused": False})


async def is_paused(request: Request) -> Response:
    served: Served = request.app.state.served
    return JSONResponse({"is_paused": not served.batcher.running.is_set()})
