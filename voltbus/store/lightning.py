"""Agent Lightning's store classes over voltbus's bus: ``LightningStore`` (the base every store is an instance of),
``InMemoryLightningStore`` (an embedded bus and projector of its own) and ``LightningStoreClient`` (a bus URL). Both are
built without an event loop, as AL's are, and connect a store client on first use in the running loop."""

from __future__ import annotations

import abc
import asyncio
import contextlib
import inspect
import os
import shutil
import tempfile
import threading
import weakref
from pathlib import Path
from typing import TYPE_CHECKING, Any

from voltbus.services.clients.store import Store, connect
from voltbus.services.settings import BusSettings, Settings

if TYPE_CHECKING:
    from voltbus.services.ops.natsserver import NatsServer

__all__ = ["InMemoryLightningStore", "LightningStore", "LightningStoreClient"]

PROJECTOR_START_S = 60.0
"""Longest wait for an in-memory store's projector to answer."""


class LightningStore(abc.ABC):  # noqa: B024 - a base to be an instance of; the method set is Store's
    """Agent Lightning's store base class: ``isinstance(store, LightningStore)`` holds for voltbus's ``Store``
    (from ``voltbus.connect``) and for the two classes below, which offer the same async methods."""


LightningStore.register(Store)


class BusStore(LightningStore):
    """The store client's async methods, on a client connected on first use in the running event loop (a new
    loop, e.g. a second ``asyncio.run``, gets a new connection)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._client: tuple[asyncio.AbstractEventLoop, Store] | None = None
        self._lock: tuple[asyncio.AbstractEventLoop, asyncio.Lock] | None = None

    async def client(self) -> Store:
        """The store client of the running loop, connected now if it is not yet."""
        loop = asyncio.get_running_loop()
        if self._lock is None or self._lock[0] is not loop:
            self._lock = (loop, asyncio.Lock())
        async with self._lock[1]:
            if self._client is None or self._client[0] is not loop:
                nats, projector = self.settings.nats, self.settings.projector
                store = await connect(settings=nats, projector_url=projector.url, projector_token=projector.token)
                self._client = (loop, store)
        return self._client[1]

    def __getattr__(self, name: str) -> Any:
        method = getattr(Store, name, None)
        if name.startswith("_") or not inspect.iscoroutinefunction(method):
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

        async def call(*args: Any, **kwargs: Any) -> Any:
            return await getattr(await self.client(), name)(*args, **kwargs)

        call.__name__, call.__doc__ = name, method.__doc__
        return call

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled (e.g. a spawned worker process's argument), it is a client of the same bus and projector."""
        return (BusStore, (self.settings,))

    async def close(self) -> None:
        """Close this loop's connection (the next call opens another)."""
        if self._client is not None and self._client[0] is asyncio.get_running_loop():
            client, self._client = self._client[1], None
            await client.close()


class LightningStoreClient(BusStore):
    """``LightningStoreClient(url)``: the store client of the bus at ``url`` (``nats://host:port``); the rest of
    the settings come from the environment, as in every voltbus process.

    Agent Lightning's URL of an HTTP store server (``http://host:4747``) is refused: voltbus's processes talk to
    the bus. Run ``voltbus store-server`` to serve AL's HTTP store API and point AL's own client at it instead.
    """

    def __init__(self, server_address: str, **_: Any) -> None:
        if not server_address.startswith(("nats://", "tls://")):
            raise ValueError(
                f"LightningStoreClient({server_address!r}): voltbus's store client takes the bus URL "
                "(nats://host:4222), not an HTTP store server's; use voltbus.connect(bus_url), or run "
                "`voltbus store-server` and use agentlightning's own LightningStoreClient against it"
            )
        settings = Settings()
        super().__init__(settings.model_copy(update={"nats": settings.nats.model_copy(update={"url": server_address})}))
        self.server_address = server_address


class InMemoryLightningStore(BusStore):
    """Agent Lightning's in-process store: an embedded bus (its files in a temporary directory) and a projector
    (for ``query_*``) of its own, started now and stopped by ``shutdown()`` or when the store is collected.

    AL's keyword arguments (``thread_safe``, ``eviction_memory_threshold``, ...) are accepted and ignored.
    """

    def __init__(self, **_: Any) -> None:
        from voltbus.services.ops.natsserver import NatsServer  # the server and the projector: only when built
        from voltbus.services.serving import free_port

        work = self.work = Path(tempfile.mkdtemp(prefix="voltbus-memory-store-"))
        """Its bus's and projection's files (a directory of its own: removed by this process only, never by a fork)."""
        base, port = Settings(), free_port()
        try:
            server = NatsServer(BusSettings(data_dir=work / "nats", port=0, monitor_port=0), base.nats.max_payload)
            server.start()
        except BaseException:
            shutil.rmtree(work, ignore_errors=True)
            raise
        update = {
            "db": work / "projection.duckdb",
            "host": "127.0.0.1",
            "port": port,
            "url": f"http://127.0.0.1:{port}",
        }
        readers = {"span_readers": 0, "control_readers": 0, "reader_backlog": 0}  # all in its thread: no fork server
        projector = base.projector.model_copy(update=update | readers)
        nats = base.nats.model_copy(update={"url": server.url})
        super().__init__(base.model_copy(update={"nats": nats, "projector": projector}))
        self._projector = _ProjectorThread(self.settings)
        self._finalizer = weakref.finalize(self, _stop, self._projector, server, work, os.getpid())
        try:
            self._projector.start()
        except BaseException:
            self._finalizer()
            raise

    @property
    def url(self) -> str:
        """The embedded bus's URL (for runners in other processes: ``voltbus runner`` with ``VOLTBUS_NATS__URL``)."""
        return self.settings.nats.url

    def shutdown(self) -> None:
        """Stop the projector and the bus and delete their files (a no-op the second time, and in a forked child)."""
        self._finalizer()


class _ProjectorThread:
    """The projector on an event loop of its own, in a daemon thread (the store is used from any loop)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.thread = threading.Thread(target=asyncio.run, args=(self._main(),), name="voltbus-projector", daemon=True)
        self.ready = threading.Event()
        self.failed: BaseException | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.stop_event: asyncio.Event | None = None

    def start(self) -> None:
        """Start it and wait until it answers (or raise what stopped it)."""
        self.thread.start()
        if not self.ready.wait(PROJECTOR_START_S) or self.failed is not None:
            raise RuntimeError(f"the in-memory store's projector did not start: {self.failed!r}")

    async def _main(self) -> None:
        from voltbus.services.projector.app import run as run_projector

        self.loop, self.stop_event, answering = asyncio.get_running_loop(), asyncio.Event(), asyncio.Event()
        task = asyncio.create_task(run_projector(self.settings, self.stop_event, answering))
        waiter = asyncio.create_task(answering.wait())
        await asyncio.wait([task, waiter], return_when=asyncio.FIRST_COMPLETED)
        if task.done():
            self.failed = task.exception() or RuntimeError("the projector stopped")
            waiter.cancel()
        self.ready.set()
        if not task.done():
            await task

    def stop(self) -> None:
        """Ask the projector to stop and wait for its thread."""
        if self.loop is not None and self.stop_event is not None:
            with contextlib.suppress(RuntimeError):  # its loop is closed already: the projector has stopped
                self.loop.call_soon_threadsafe(self.stop_event.set)
        if self.thread.is_alive():
            self.thread.join(PROJECTOR_START_S)


def _stop(projector: _ProjectorThread, server: NatsServer, work: Path, owner: int) -> None:
    """Stop an in-memory store's projector and bus, then delete their files; in a forked child (a copy of the
    store, which owns neither), nothing."""
    if os.getpid() != owner:
        return
    try:
        projector.stop()
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)
