"""A TCP link in front of a server that loses chosen requests or answers once, as a broken network
would: ``cut`` drops the connection before the request reaches the server (never applied), ``mute``
forwards the request but never the answer (applied, yet the client times out)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from urllib.parse import urlsplit


@dataclass
class Faults:
    """Request-line prefixes (``b"POST /admin/resume"``) whose next request is lost, each once."""

    cut: list[bytes] = field(default_factory=list)
    mute: list[bytes] = field(default_factory=list)
    seen: list[str] = field(default_factory=list)
    """Every request line that reached the server, in order."""

    def take(self, faults: list[bytes], chunk: bytes) -> bool:
        hit = next((f for f in faults if chunk.startswith(f)), None)
        if hit is not None:
            faults.remove(hit)
        return hit is not None


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, muted: asyncio.Event) -> None:
    with contextlib.suppress(ConnectionError):
        while chunk := await reader.read(65536):
            if not muted.is_set():
                writer.write(chunk)
                await writer.drain()
    writer.close()


@contextlib.asynccontextmanager
async def flaky_link(target: str, faults: Faults) -> AsyncIterator[str]:
    """Listen on a loopback port and forward to ``target`` (``http://host:port``); yields the link's URL."""
    host, port = urlsplit(target).hostname or "127.0.0.1", urlsplit(target).port or 80
    tasks: set[asyncio.Task[None]] = set()

    async def client_side(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(host, port)
        muted = asyncio.Event()
        answers = asyncio.create_task(_pipe(up_reader, writer, muted))
        tasks.add(answers)
        with contextlib.suppress(ConnectionError):
            while chunk := await reader.read(65536):
                if chunk[:1].isalpha() and faults.take(faults.cut, chunk):
                    break
                if chunk[:1].isalpha():
                    faults.seen.append(chunk.split(b"\r\n", 1)[0].decode())
                    if faults.take(faults.mute, chunk):
                        muted.set()
                up_writer.write(chunk)
                await up_writer.drain()
        up_writer.close()
        writer.close()
        await asyncio.gather(answers, return_exceptions=True)

    server = await asyncio.start_server(client_side, "127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    finally:
        server.close()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
