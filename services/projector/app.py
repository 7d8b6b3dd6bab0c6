"""Wiring of the projector service: live projection of both streams plus the read-only SQL endpoint.

``POST /sql`` takes ``{"sql": ..., "min_seq": {"control": n, "spans": m}, "timeout": s}`` and answers
with an Arrow IPC stream; with ``min_seq`` it first waits until the projection has applied those
sequences, so a caller reads its own writes. ``GET /health`` reports positions, ``GET /identity`` the bus
and namespace it follows.
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Annotated, Any

import duckdb
import msgspec
import pyarrow as pa
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp

from voltbus.projections import integrity
from voltbus.projections.adapter import AdapterSettings
from voltbus.projections.ipc import to_ipc
from voltbus.schemas.errors import QueryRefused
from voltbus.services.eventlog import EventLog
from voltbus.services.httpguard import check_exposure, guard
from voltbus.services.serving import build_server
from voltbus.services.settings import Settings
from voltbus.services.sockets import check_port

from .follow import project
from .forks import Forks, owned
from .identity import bus_id, identity
from .projector import Projector
from .sql import limits_of, query, truncated_to

log = logging.getLogger(__name__)
ARROW = "application/vnd.apache.arrow.stream"


class Progress:
    """Wakes requests waiting for the projection to reach a sequence."""

    def __init__(self, projector: Projector) -> None:
        self.projector = projector
        self.advanced = asyncio.Event()

    def __call__(self, stream: str, position: int, end: int) -> None:
        self.advanced.set()
        self.advanced = asyncio.Event()

    async def reach(self, min_seq: dict[str, int], timeout: float, training: bool = True) -> bool:
        """Wait until every stream's position is at least ``min_seq``; False at the deadline. With both streams named,
        also until no attempt that ended by the control sequence waits for its telemetry (``training.Held``: at
        most the projector's ``max_wait`` more), so that its training rows are there; a wait for one stream alone
        (a store client's read-your-writes) does not wait for the other stream's telemetry, nor one without
        ``training`` (a store client's queries, which read no training table)."""
        deadline = time.monotonic() + timeout
        while any(self.projector.positions.get(s, 0) < n for s, n in min_seq.items()) or (
            training and "spans" in min_seq and self.projector.held.blocks(min_seq.get("control", 0))
        ):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            try:
                await asyncio.wait_for(self.advanced.wait(), remaining)
            except TimeoutError:
                return False
        return True


class Queries:
    """Runs the endpoint's SQL: ``sql_slots`` at a time on threads of their own (the projector's own work never
    waits for a thread), each under the query limits; a query whose request is cancelled (the client left, the
    server stops) is interrupted, and so is every query still running when the projector stops."""

    def __init__(self, settings: Settings, projector: Projector) -> None:
        cfg = settings.projector
        self.con, self.limits = projector.con, limits_of(cfg)
        self.slots = asyncio.Semaphore(cfg.sql_slots)
        self.pool = ThreadPoolExecutor(cfg.sql_slots, thread_name_prefix="voltbus-sql")
        self.running: set[duckdb.DuckDBPyConnection] = set()

    async def run(self, sql: str, params: dict[str, object] | None, truncate: bool) -> pa.Table:
        """The rows of one query; QueryRefused ``busy`` when no slot frees within ``SLOT_WAIT_S``."""
        try:
            await asyncio.wait_for(self.slots.acquire(), SLOT_WAIT_S)
        except TimeoutError:
            raise QueryRefused("busy", f"{len(self.running)} queries are running (projector.sql_slots)") from None
        mine: set[duckdb.DuckDBPyConnection] = set()
        try:
            call = partial(query, self.con, sql, self.limits, params, truncate, _Both(mine, self.running), False)
            running = asyncio.get_running_loop().run_in_executor(self.pool, call)
            try:
                return await asyncio.wait_for(asyncio.shield(running), self.limits.timeout_s)
            except TimeoutError:
                return await _interrupted(running, mine)
            except asyncio.CancelledError:
                _keep_interrupting(mine, running.done)
                raise
        finally:
            self.slots.release()

    def stop(self) -> None:
        """Interrupt every running query, until it ends (the interpreter waits for its thread), and let threads go."""
        _keep_interrupting(self.running, lambda: not self.running)
        self.pool.shutdown(wait=False, cancel_futures=True)


def _keep_interrupting(cursors: set[duckdb.DuckDBPyConnection], done: Callable[[], bool]) -> None:
    """Interrupt these queries again and again until ``done``, on a thread of its own: an interrupt that comes
    before DuckDB starts a query is lost, and a busy machine makes that gap long."""

    def repeat() -> None:
        deadline = time.monotonic() + INTERRUPT_FOR_S
        while not done() and time.monotonic() < deadline:
            for cursor in list(cursors):
                cursor.interrupt()
            time.sleep(INTERRUPT_EVERY_S)

    threading.Thread(target=repeat, name="voltbus-sql-interrupt", daemon=True).start()


async def _interrupted(running: asyncio.Future[pa.Table], cursors: set[duckdb.DuckDBPyConnection]) -> pa.Table:
    """What a query past its deadline ends with once interrupted (again, until it ends, in case its cursor had not
    started yet): QueryRefused ``timeout``, or its rows if it finished meanwhile."""
    while not running.done():
        for cursor in list(cursors):
            cursor.interrupt()
        await asyncio.wait([running], timeout=0.05)
    return running.result()


class _Both(set[duckdb.DuckDBPyConnection]):
    """Two sets of running cursors kept at once: a request's own, and the endpoint's."""

    def __init__(self, *sets: set[duckdb.DuckDBPyConnection]) -> None:
        super().__init__()
        self.sets = sets

    def add(self, cursor: duckdb.DuckDBPyConnection) -> None:
        for each in self.sets:
            each.add(cursor)

    def discard(self, cursor: duckdb.DuckDBPyConnection) -> None:
        for each in self.sets:
            each.discard(cursor)


class SqlRequest(msgspec.Struct, kw_only=True):
    """The body of ``POST /sql``."""

    sql: str
    params: dict[str, Any] | None = None
    min_seq: dict[str, Annotated[int, msgspec.Meta(ge=0)]] = msgspec.field(default_factory=dict)
    timeout: Annotated[float, msgspec.Meta(ge=0, le=60)] = 10.0
    """Longest wait for ``min_seq`` (seconds)."""
    truncate: bool = False
    training: bool = True
    """With both streams in ``min_seq``, also wait for the training rows of attempts ended by then (``reach``); a
    store client's queries read no training table and say False."""


MAX_BODY = 1 << 20
"""Most bytes of a query's body (413 past it)."""


class _TooLarge(Exception):
    pass


async def _body(request: Request) -> bytes:
    """The request's body, read no further than ``MAX_BODY``."""
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY:
            raise _TooLarge
        chunks.append(chunk)
    return b"".join(chunks)


class Tables:
    """Which of the projection's tables are missing, checked at most every ``EVERY_S`` (``/health`` is open to
    every local process: a flood of it must not cost a catalog query each)."""

    EVERY_S = 2.0

    def __init__(self, projector: Projector) -> None:
        self.projector, self.checked_at, self.last = projector, -math.inf, list[str]()

    def missing(self) -> list[str]:
        if time.monotonic() - self.checked_at >= self.EVERY_S:
            with self.projector.con.cursor() as cursor:
                self.last = integrity.missing_tables(cursor)
            self.checked_at = time.monotonic()
        return self.last


SLOT_WAIT_S = 5.0
"""Longest a query waits for one of ``projector.sql_slots``."""
INTERRUPT_EVERY_S = 0.05
"""How often a query being stopped is interrupted again, until it ends."""
INTERRUPT_FOR_S = 60.0
"""How long a query being stopped is interrupted again at most (a query ignoring interrupts is left to its thread)."""
STATUS = {"read_only": 403, "busy": 503, "out_of_memory": 503, "timeout": 408}
"""HTTP status of each QueryRefused code; any other is 400."""


def build_app(
    settings: Settings,
    projector: Projector,
    progress: Progress,
    queries: Queries | None = None,
    bus_id: str = "",
) -> ASGIApp:
    """The HTTP app: /sql, /health and /identity (``identity.py``), behind the endpoint's token, Host and Origin
    checks (``httpguard``)."""
    queries = queries or Queries(settings, projector)
    who = identity(settings.nats, bus_id)
    tables = Tables(projector)

    async def sql(request: Request) -> Response:
        try:
            asked = msgspec.json.decode(await _body(request), type=SqlRequest)
        except (msgspec.ValidationError, msgspec.DecodeError, UnicodeDecodeError) as exc:
            shape = '{"sql": "...", "params": {...}, "min_seq": {"control": n, "spans": m}, "timeout": s}'
            return JSONResponse({"error": f"send JSON {shape}: {exc}", "code": "bad_request"}, 400)
        except _TooLarge:
            return JSONResponse({"error": f"a query body is at most {MAX_BODY} bytes", "code": "too_large"}, 413)
        text, params, truncate, min_seq = asked.sql, asked.params or None, asked.truncate, asked.min_seq
        if min_seq and not await progress.reach(min_seq, asked.timeout, asked.training):
            positions = projector.positions
            return JSONResponse({"error": f"projection at {positions}, not yet at {min_seq}"}, status_code=504)
        try:
            table = await queries.run(text, params, truncate)
        except QueryRefused as exc:
            headers = {"Retry-After": "1"} if exc.code == "busy" else None
            return JSONResponse({"error": str(exc), "code": exc.code}, STATUS.get(exc.code, 400), headers)
        cut = truncated_to(table)
        headers = {"X-Voltbus-Truncated-To": str(cut)} if cut is not None else None
        return Response(to_ipc(table), media_type=ARROW, headers=headers)

    async def health(_: Request) -> Response:
        missing = tables.missing()  # a table lost under a running projector: restart it
        status = "diverged" if projector.diverged else "degraded" if missing else "ok"
        body = {"status": status, "diverged": projector.diverged, "missing_tables": missing}
        body["positions"] = projector.positions
        return JSONResponse(
            body | {"applied": projector.applied, "db": str(projector.path), "queries": len(queries.running)}
        )

    async def whoami(_: Request) -> Response:
        return JSONResponse(who)

    routes = [Route("/sql", sql, methods=["POST"]), Route("/health", health), Route("/identity", whoami)]
    app = Starlette(routes=routes)
    cfg = settings.projector
    return guard(app, cfg.host, cfg.allowed_hosts, cfg.token)


async def run(
    settings: Settings,
    stop: asyncio.Event | None = None,
    ready: asyncio.Event | None = None,
    adapter: AdapterSettings | None = None,
) -> None:
    """Project the streams live and serve SQL until ``stop`` is set (or forever); ``ready`` is set once
    the SQL endpoint accepts connections. ``adapter``: the training tables' settings (``Trainer(adapter=...)``'s
    projector, on a new file); None: the defaults."""
    cfg = settings.projector
    check_exposure("the projector's SQL endpoint", cfg.host, cfg.token, "VOLTBUS_PROJECTOR__TOKEN")
    check_port(cfg.host, cfg.port, "projector SQL")
    async with owned(None, cfg.forks) as forks:  # the readers' fork server, the service's own: started once
        await _run(settings, stop or asyncio.Event(), ready, forks, adapter)


async def _run(
    settings: Settings,
    stop: asyncio.Event,
    ready: asyncio.Event | None,
    forks: Forks | None,
    adapter: AdapterSettings | None,
) -> None:
    cfg = settings.projector
    eventlog = await EventLog.connect(settings.nats, name="voltbus-projector")
    cfg.db.parent.mkdir(parents=True, exist_ok=True)
    projector = Projector(
        cfg.db,
        adapter,
        threads=cfg.duckdb_threads,
        refresh_interval=cfg.training_refresh_s,
        memory_limit=cfg.duckdb_memory_limit,
        checkpoint_threshold=cfg.duckdb_checkpoint_threshold,
    )
    progress, queries = Progress(projector), Queries(settings, projector)
    app = build_app(settings, projector, progress, queries, await bus_id(eventlog.nc, settings.nats))
    loop = asyncio.get_running_loop()
    on_exit = partial(loop.call_soon_threadsafe, stop.set)  # a SIGTERM ends the queries uvicorn would wait for
    server = build_server(app, cfg.host, cfg.port, settings.http, lifespan="off", on_exit=on_exit)
    log.info(
        "projector on %s from control seq %d, spans seq %d; SQL at http://%s:%d/sql",
        cfg.db,
        projector.positions["control"],
        projector.positions["spans"],
        cfg.host,
        cfg.port,
    )
    try:
        async with asyncio.TaskGroup() as tasks:
            serving = tasks.create_task(server.serve())
            while not server.started and not serving.done():  # noqa: ASYNC110
                await asyncio.sleep(0.01)  # uvicorn offers no start-up event
            if ready is not None:
                ready.set()
            tasks.create_task(project(projector, eventlog, stop=stop, progress=progress, forks=forks, **cfg.feeding))
            await stop.wait()
            queries.stop()
            server.should_exit = True
            await serving
    finally:
        queries.stop()
        projector.close()
        await eventlog.close()
