"""What the HTTP limits cost per request: uvicorn's httptools protocol against ``LimitedProtocol``, each fed
the same keep-alive request (a gateway call's headers) with no socket and a one-line app, on uvloop.

Run: ``python -m tests.benchmarks.bench_http11`` (microseconds per request: minimum and median of nine
alternating rounds; the minimum is the figure least disturbed by other work on the machine).
"""

from __future__ import annotations

import asyncio
import functools
import statistics
import time
from collections.abc import Callable
from typing import Any

import uvicorn
import uvloop
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import ServerState

from voltbus.services.http11 import LimitedProtocol
from voltbus.services.settings import HttpSettings

REQUEST = (
    b"POST /rollout/ro-1/attempt/at-1/v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1:8766\r\naccept: */*\r\n"
    b"accept-encoding: gzip, deflate\r\nconnection: keep-alive\r\nuser-agent: python-httpx/0.28.1\r\n"
    b"authorization: Bearer vbk-0123456789abcdef0123456789abcdef\r\ncontent-type: application/json\r\n"
    b"content-length: 60\r\n\r\n" + b"x" * 60
)


class Sink(asyncio.Transport):
    """A transport that drops what is written."""

    def __init__(self) -> None:
        super().__init__()
        self.closing = False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"sockname": ("127.0.0.1", 8766), "peername": ("127.0.0.1", 40000)}.get(name, default)

    def write(self, data: Any) -> None:
        pass

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        self.closing = True

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


async def per_request(factory: Callable[..., asyncio.Protocol], n: int) -> float:
    """Microseconds per request through a protocol made by ``factory``."""
    answered = asyncio.Event()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await receive()
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"ok"})
        answered.set()

    config = uvicorn.Config(app, lifespan="off", log_level="warning")
    config.load()
    protocol: Any = factory(config=config, server_state=ServerState(), app_state={})
    protocol.connection_made(Sink())
    start = time.perf_counter()
    for _ in range(n):
        answered.clear()
        protocol.data_received(REQUEST)
        await answered.wait()
    elapsed = time.perf_counter() - start
    protocol.connection_lost(None)
    return elapsed / n * 1e6


async def main(n: int = 10_000, rounds: int = 9) -> None:
    limited = functools.partial(LimitedProtocol, limits=HttpSettings())
    plain, guarded = [], []
    for _ in range(rounds):  # alternating, so that a busy moment of the machine hits both
        plain.append(await per_request(HttpToolsProtocol, n))
        guarded.append(await per_request(limited, n))
    for name, runs in (("httptools", plain), ("LimitedProtocol", guarded)):
        print(f"{name:<16} us/request: min {min(runs):.1f}, median {statistics.median(runs):.1f}")
    print(f"difference of the minima {min(guarded) - min(plain):+.1f} us/request")


if __name__ == "__main__":
    uvloop.run(main())
