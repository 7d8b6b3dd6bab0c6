"""A loopback TCP proxy in front of nats-server that the test can cut: every client connection through
it is closed at once (a network drop as the clients see it), and new connections are accepted again."""

from __future__ import annotations

import asyncio
import contextlib

from voltbus.services.serving import free_port


class Proxy:
    """Forwards ``127.0.0.1:port`` to ``127.0.0.1:target``; ``cut()`` drops every open connection."""

    def __init__(self, target: int) -> None:
        self.target = target
        self.port = free_port()
        self.writers: set[asyncio.StreamWriter] = set()
        self.server: asyncio.Server | None = None
        self.cuts = 0

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    async def start(self) -> Proxy:
        self.server = await asyncio.start_server(self._client, "127.0.0.1", self.port)
        return self

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target)
        except OSError:  # the server is down: the client retries
            writer.close()
            return
        self.writers |= {writer, up_writer}
        try:
            await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))
        finally:
            for w in (writer, up_writer):
                self.writers.discard(w)
                w.close()

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, OSError):
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        writer.close()

    def cut(self) -> int:
        """Close every connection now (abortively); how many were open."""
        open_ = list(self.writers)
        for w in open_:
            w.transport.abort()
        self.cuts += 1
        return len(open_)

    async def close(self) -> None:
        self.cut()
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()
