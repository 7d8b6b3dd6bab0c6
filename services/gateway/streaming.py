"""Streamed calls: SSE bytes pass through as they arrive; the call is recorded once, when it ends.

The response is a ``StreamingResponse`` whose ``__call__`` always ends in ``close()``: the engine's
response is released when it was read to the end (its connection is reused), else closed with its
connection (the engine sees the request cancelled when the agent went away); the assembled call is
recorded (``status="error"``, type ``Cancelled``, when the agent disconnected before the end), and
the call leaves the in-flight count. Recording is shielded from the cancellation of a disconnect.
``assembler.py`` folds the chunks into the recorded call. A call made in another client API
(``Call.client``) gets that API's events instead of the engine's bytes (``client_api.StreamFolder``).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import aiohttp
import anyio
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from .assembler import StreamAssembler
from .errors import error_response
from .record import Call, model_called
from .state import Gateway
from .upstream import CLIENT_ERRORS, failure_answer, routing_key


class RecordedStream(StreamingResponse):
    """A pass-through SSE stream that records its call when it ends, however it ends."""

    def __init__(self, gw: Gateway, call: Call, upstream: aiohttp.ClientResponse, retries: int = 0) -> None:
        self.gw, self.call, self.upstream, self.retries = gw, call, upstream, retries
        self.assembler = StreamAssembler(call.kind)
        self.folder = call.client.stream(call.client_request, call.call_id) if call.client is not None else None
        self.ended = False
        self.failure: tuple[str, str] | None = None
        media = upstream.headers.get("content-type", "text/event-stream")
        if self.folder is not None:  # the client's own events
            media = "text/event-stream"
        super().__init__(self.chunks(), status_code=upstream.status, media_type=media)

    async def chunks(self) -> AsyncIterator[bytes]:
        """The engine's bytes, unchanged (as they arrive; for a client API, its own events for
        them), copied into the assembler."""
        try:
            async for data in self.upstream.content.iter_any():
                chunks = self.assembler.feed(data)
                if self.folder is None:
                    yield data
                elif out := b"".join(self.folder.chunk(c) for c in chunks):
                    yield out
        except CLIENT_ERRORS as exc:
            kind = "UpstreamTimeout" if isinstance(exc, TimeoutError) else "UpstreamError"
            self.failure = (kind, f"engine stream broke: {type(exc).__name__}: {exc}")
            if self.folder is not None:
                yield self.folder.fail(self.failure[1])
                return
            error = {"error": {"message": self.failure[1], "type": "upstream_error", "code": 502}}
            yield f"data: {json.dumps(error)}\n\n".encode()
            return
        self.ended = True
        if self.folder is not None and (out := self.folder.end()):
            yield out

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            with anyio.CancelScope(shield=True):
                await self.close()

    async def close(self) -> None:
        """Release (read to the end) or close (cut short) the engine response, record the call, leave
        the in-flight count."""
        try:
            if self.ended:
                self.upstream.release()
            else:
                self.upstream.close()
            failure = self.failure
            if failure is None and not self.ended:
                failure = ("Cancelled", "client disconnected before the stream ended")
            if failure is None and self.assembler.error is not None:
                failure = ("UpstreamError", f"engine sent an error chunk: {self.assembler.error}")
            event = model_called(
                self.call,
                self.assembler.response(),
                http_status=self.upstream.status,
                retries=self.retries,
                error=failure,
                served=self.gw.served_version(self.call),
            )
            if self.call.rollout_id != "unattributed" or self.gw.settings.record_unattributed:
                await self.gw.record([event])
        finally:
            await self.gw.pause.leave()


async def stream_call(gw: Gateway, call: Call) -> Response:
    """Open the engine stream (retried on the next engine until it opens; never once bytes flow);
    a failure to open is recorded and answered like a non-streamed one."""
    try:
        opened = await gw.upstream.open_stream(call.path, call.body, routing_key(call.rollout_id))
    except BaseException:
        await gw.pause.leave()
        raise
    call.upstream = opened.upstream
    if opened.stream is not None:
        return RecordedStream(gw, call, opened.stream, opened.retries)
    try:
        answer, error = failure_answer(opened)
        status, retries = opened.status, opened.retries
        served = gw.served_version(call)
        event = model_called(
            call, opened.body, http_status=status, retries=retries, error=error, raw=opened.raw, served=served
        )
        await gw.record([event])
        if answer is not None:
            return answer
        if opened.body is None:
            return error_response(opened.status or 502, "upstream_error", opened.detail)
        return JSONResponse(opened.body, status_code=opened.status or 502)
    finally:
        await gw.pause.leave()
