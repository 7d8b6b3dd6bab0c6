"""Serving an HTTP app with uvicorn, the one way every voltbus HTTP service does it: the limits of
``HttpSettings`` (``http11``), a port check with a one-line error, start-up awaited (uvicorn offers no
start-up event), a clean stop."""

from __future__ import annotations

import asyncio
import functools
import logging
import resource
import socket
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from types import FrameType
from typing import Any

import uvicorn

from .http11 import LimitedProtocol
from .settings import HttpSettings
from .sockets import check_port

log = logging.getLogger(__name__)


def free_port() -> int:
    """A loopback port nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


FILES_BESIDE = 256
"""Open files a service needs besides its HTTP connections (the bus, DuckDB, pipes, upstream pools)."""


def room_for(files: int) -> None:
    """Raise the process's soft open-file limit towards ``files`` (up to the hard limit): with a soft limit of 1024,
    ``accept`` failed (EMFILE) before ``http.max_connections`` applied; a lower hard limit is logged."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = files if hard == resource.RLIM_INFINITY else min(files, hard)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    if hard != resource.RLIM_INFINITY and hard < files:
        log.warning(
            "the open-file limit is %d, below http.max_connections + %d: lower one or raise it", hard, FILES_BESIDE
        )


class _Server(uvicorn.Server):
    """uvicorn's server that also tells its owner when a signal (SIGTERM, SIGINT) asks it to exit: uvicorn then
    waits for every request in flight, and only the owner can end what those requests wait on."""

    def __init__(self, config: uvicorn.Config, on_exit: Callable[[], None] | None) -> None:
        super().__init__(config)
        self.on_exit = on_exit

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        super().handle_exit(sig, frame)
        if self.on_exit is not None:
            self.on_exit()


def build_server(
    app: Any,
    host: str,
    port: int,
    http: HttpSettings,
    lifespan: str = "on",
    on_exit: Callable[[], None] | None = None,
    **config: Any,
) -> uvicorn.Server:
    """The uvicorn server of every voltbus HTTP service: ``http``'s limits on every connection, no
    WebSocket upgrades (no service has one), warnings only. ``on_exit``: called (in the signal handler) when a
    signal stops the server. ``config``: more ``uvicorn.Config`` arguments (``ssl_certfile`` and ``ssl_keyfile``
    serve HTTPS)."""
    protocol = functools.partial(LimitedProtocol, limits=http)
    room_for(http.max_connections + FILES_BESIDE)
    cfg = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level="warning",
        lifespan=lifespan,
        http=protocol,  # type: ignore[arg-type]  # uvicorn calls it as it calls a protocol class
        ws="none",
        timeout_keep_alive=http.keep_alive_s,
        **config,
    )
    return _Server(cfg, on_exit)


@asynccontextmanager
async def serving(
    app: Any, port: int, host: str = "127.0.0.1", lifespan: str = "on", http: HttpSettings | None = None, **config: Any
) -> AsyncIterator[str]:
    """Serve ``app`` on ``host:port`` while the block runs; yields its base URL. A server that cannot
    start (its lifespan failed, the port is taken) raises here. ``http``: the limits (default ones when
    None); ``config``: more ``uvicorn.Config`` arguments (``ssl_certfile`` and ``ssl_keyfile`` serve HTTPS)."""
    server = build_server(app, host, port, http or HttpSettings(), lifespan, **config)
    task = asyncio.create_task(server.serve())
    while not server.started and not task.done():  # noqa: ASYNC110
        await asyncio.sleep(0.01)  # uvicorn offers no start-up event
    if task.done():
        await task
        raise RuntimeError(f"the server on {host}:{port} did not start")
    try:
        yield f"{'https' if config.get('ssl_certfile') else 'http'}://{host}:{port}"
    finally:
        server.should_exit = True
        await task


async def serve_until(
    app: Any,
    host: str,
    port: int,
    what: str,
    stop: asyncio.Event | None = None,
    ready: asyncio.Event | None = None,
    *,
    http: HttpSettings,
    **config: Any,
) -> None:
    """Serve ``app`` until ``stop`` is set or the server stops by itself (Ctrl-C: uvicorn handles the
    signal), which sets ``stop``; ``ready`` is set once it accepts connections. A taken port is refused
    first with one line naming ``what``. ``http``: the limits; ``config``: more ``uvicorn.Config``
    arguments (TLS)."""
    check_port(host, port, what)
    server = build_server(app, host, port, http, **config)
    stop = stop or asyncio.Event()
    async with asyncio.TaskGroup() as tasks:
        running = tasks.create_task(server.serve())
        while not server.started and not running.done():  # noqa: ASYNC110
            await asyncio.sleep(0.01)  # uvicorn offers no start-up event
        if ready is not None and server.started:
            ready.set()
        await asyncio.wait([running, tasks.create_task(stop.wait())], return_when=asyncio.FIRST_COMPLETED)
        server.should_exit = True
        stop.set()
