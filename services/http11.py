"""The HTTP/1.1 connection every voltbus server runs: uvicorn's httptools protocol plus the limits uvicorn
lacks (header bytes and count, header and body read deadlines, a cap on open connections; ``HttpSettings``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from .settings import HttpSettings

log = logging.getLogger(__name__)

LINGER_S = 2.0
"""Longest time a refused connection's further bytes are read and dropped before it is closed."""


class LimitedProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol that answers 431, 408 or 503 and closes where ``limits`` are passed.

    uvicorn's own parser has no cap on header bytes or count (httptools buffers a header line of any
    size) and no deadline for a request's head or body: these are added around its callbacks.
    """

    def __init__(self, *args: Any, limits: HttpSettings, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.limits = limits
        self.max_header_bytes, self.max_headers = limits.max_header_bytes, limits.max_headers
        self.in_head, self.in_body = True, False
        """Between requests or inside a request's line and headers; inside its body."""
        self.head_bytes = 0
        """Bytes received since the head began (at most one read more than the head itself)."""
        self.head_started = 0.0
        """Loop time of the head's first bytes."""
        self.head_size = self.header_count = 0
        """Bytes of the head parsed so far (line, headers), and its header lines."""
        self.refusal: tuple[int, str] | None = None
        """Why the parser was stopped from a callback: the status and message to answer with."""
        self.deadline: asyncio.TimerHandle | None = None
        self.lingering = False
        """Refused: the answer is sent, what the client still sends is dropped until it closes."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        cap = self.limits.max_connections
        if len(self.connections) > cap:
            self.refuse(503, f"server busy: {cap} connections are open (http.max_connections)")
        else:  # a connection that sends nothing is closed too
            self.arm(self.limits.header_timeout_s, self.head_timed_out)

    def connection_lost(self, exc: Exception | None) -> None:
        self.disarm()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self.lingering:  # refused: dropped unread
            return
        if self.in_head:
            if not self.head_bytes:
                self.head_started = self.loop.time()
            self.head_bytes += len(data)
        super().data_received(data)
        if self.lingering or self.transport.is_closing():
            return
        # deadlines are armed only for what one read did not complete: most requests arrive whole
        if self.in_head:
            if self.head_bytes > self.max_header_bytes:  # httptools buffers a partial line in full
                self.refuse(431, self.too_big())
            elif self.head_bytes and self.deadline is None:
                when = self.head_started + self.limits.header_timeout_s
                self.deadline = self.loop.call_at(when, self.head_timed_out)
        elif self.in_body and self.deadline is None:
            self.arm(self.limits.body_timeout_s, self.body_timed_out)

    # parser callbacks

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self.head_size = self.header_count = 0

    def on_url(self, url: bytes) -> None:
        self.head_size += len(url)
        if self.head_size > self.max_header_bytes:
            self.stop(self.too_big())
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self.header_count += 1
        self.head_size += len(name) + len(value) + 4  # with ": " and CRLF
        if self.header_count > self.max_headers:
            self.stop(f"more than {self.max_headers} request headers (http.max_headers)")
        if self.head_size > self.max_header_bytes:  # a whole head in one read never reaches data_received's check
            self.stop(self.too_big())
        super().on_header(name, value)

    def stop(self, message: str) -> None:
        """Stop the parser from a callback: httptools raises, uvicorn calls ``send_400_response``, answered 431."""
        self.refusal = (431, message)
        raise ValueError(message)

    def too_big(self) -> str:
        return f"request line and headers over {self.max_header_bytes} bytes (http.max_header_bytes)"

    def on_headers_complete(self) -> None:
        self.in_head, self.in_body, self.head_bytes = False, True, 0
        self.disarm()
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        self.in_head, self.in_body = True, False
        self.disarm()
        super().on_message_complete()

    # refusals

    def send_400_response(self, msg: str) -> None:
        status, message = self.refusal or (400, msg)
        self.refuse(status, message)

    def head_timed_out(self) -> None:
        self.deadline = None
        if self.head_bytes == 0:  # connected and sent nothing: nothing to answer
            self.close()
        else:
            self.refuse(
                408, f"request headers not received within {self.limits.header_timeout_s} s (http.header_timeout_s)"
            )

    def body_timed_out(self) -> None:
        self.deadline = None
        self.refuse(408, f"request body not received within {self.limits.body_timeout_s} s (http.body_timeout_s)")

    def refuse(self, status: int, message: str) -> None:
        """Answer ``status`` with ``message`` as plain text, then end the connection: the rest of what the
        client sends is read and dropped for up to ``LINGER_S`` (closing at once on unread bytes would make
        the kernel reset the connection, and the client would lose the answer)."""
        if self.transport.is_closing() or self.lingering:
            return
        if self.cycle is not None and self.cycle.response_started and not self.cycle.response_complete:
            self.close()  # mid-answer: no room for another status line
            return
        self.end_cycle()
        body = message.encode()
        head = b"content-type: text/plain; charset=utf-8\r\nconnection: close\r\ncontent-length: %d\r\n\r\n"
        self.transport.write(STATUS_LINE[status] + head % len(body) + body)
        log.debug("http: %d to %s: %s", status, self.client, message)
        if not self.transport.can_write_eof():  # TLS: no half-close
            self.close()
            return
        self.transport.write_eof()
        self.lingering = True
        self.flow.resume_reading()
        self.arm(LINGER_S, self.close)

    def close(self) -> None:
        """Close the connection; a request being served sees a disconnect and its answer goes nowhere."""
        self.disarm()
        self.end_cycle()
        self.transport.close()

    def end_cycle(self) -> None:
        """Tell the request being served, if any, that its client is gone."""
        if self.cycle is not None and not self.cycle.response_complete:
            self.cycle.disconnected = True
            self.cycle.message_event.set()

    def arm(self, seconds: float, then: Callable[[], None]) -> None:
        """Call ``then`` in ``seconds`` unless disarmed first (one deadline at a time)."""
        self.disarm()
        self.deadline = self.loop.call_later(seconds, then)

    def disarm(self) -> None:
        """Cancel the pending deadline, if any."""
        if self.deadline is not None:
            self.deadline.cancel()
            self.deadline = None
