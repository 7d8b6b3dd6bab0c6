"""Wiring of the projector service: live projection of both streams plus the read-only SQL endpoint.

``POST /sql`` takes ``{"sql": ..., "min_seq": {"control": n, "spans": m}, "timeout": s}`` and answers
with an Arrow IPC stream; with ``min_seq`` it first waits until the projection has applied those
sequences, so a caller reads its own writes. ``GET /health`` reports positions.
"""

from __future__ import annotations

import asyncio
import logging
import time

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from voltbus.projections import forks
from voltbus.projections.follow import project
from voltbus.projections.ipc import to_ipc
from voltbus.projections.projector import Projector
from voltbus.schemas.errors import InvalidCommand
from voltbus.services.eventlog import EventLog
from voltbus.services.natsserver import check_port
from voltbus.services.serving import build_server
from voltbus.services.settings import Settings

from .sql import query, truncated_to

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

    async def reach(self, min_seq: dict[str, int], timeout: float) -> bool:
        """Wait until every stream's position is at least ``min_seq``; False at the deadline. With both streams named,
        also until no attempt that ended by the control sequence waits for its telemetry (``training.Held``: at
        most the projector's ``max_wait`` more), so that its training rows are there; a wait for one stream alone
        (a store client's read-your-writes) does not wait for the other stream's telemetry."""
        deadline = time.monotonic() + timeout
        while any(self.projector.positions.get(s, 0) < n for s, n in min_seq.items()) or (
            "spans" in min_seq and self.projector.held.blocks(min_seq.get("control", 0))
        ):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            try:
                await asyncio.wait_for(self.advanced.wait(), remaining)
            except TimeoutError:
                return False
        return True


def build_app(settings: Settings, projector: Projector, progress: Progress) -> Starlette:
    """The HTTP app: /sql and /health."""

    async def sql(request: Request) -> Response:
        try:
            body = await request.json()
            text, min_seq = str(body["sql"]), {str(k): int(v) for k, v in (body.get("min_seq") or {}).items()}
            params = body.get("params") or None
            truncate = bool(body.get("truncate", False))
        except (ValueError, KeyError, TypeError):
            return JSONResponse({"error": 'send JSON {"sql": "...", "min_seq": {...}}'}, status_code=400)
        if min_seq and not await progress.reach(min_seq, float(body.get("timeout", 10.0))):
            positions = projector.positions
            return JSONResponse({"error": f"projection at {positions}, not yet at {min_seq}"}, status_code=504)
        try:
            table = await asyncio.to_thread(query, projector.con, text, settings.projector.max_rows, params, truncate)
        except InvalidCommand as exc:
            status = 403 if str(exc).startswith("read-only") else 400
            return JSONResponse({"error": str(exc)}, status_code=status)
        cut = truncated_to(table)
        headers = {"X-Voltbus-Truncated-To": str(cut)} if cut is not None else None
        return Response(to_ipc(table), media_type=ARROW, headers=headers)

    async def health(_: Request) -> Response:
        status = "diverged" if projector.diverged else "ok"  # the log no longer holds what was applied
        body = {"status": status, "diverged": projector.diverged, "positions": projector.positions}
        return JSONResponse(body | {"applied": projector.applied, "db": str(projector.path)})

    return Starlette(routes=[Route("/sql", sql, methods=["POST"]), Route("/health", health)])


async def run(settings: Settings, stop: asyncio.Event | None = None, ready: asyncio.Event | None = None) -> None:
    """Project the streams live and serve SQL until ``stop`` is set (or forever); ``ready`` is set once
    the SQL endpoint accepts connections."""
    cfg = settings.projector
    check_port(cfg.host, cfg.port, "projector SQL")
    if cfg.forks:
        await asyncio.to_thread(forks.prestart)  # the readers' fork server, started once
    eventlog = await EventLog.connect(settings.nats, name="voltbus-projector")
    cfg.db.parent.mkdir(parents=True, exist_ok=True)
    projector = Projector(cfg.db, threads=cfg.duckdb_threads, refresh_interval=cfg.training_refresh_s)
    progress = Progress(projector)
    server = build_server(build_app(settings, projector, progress), cfg.host, cfg.port, settings.http, lifespan="off")
    stop = stop or asyncio.Event()
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
            tasks.create_task(project(projector, eventlog, stop=stop, progress=progress, **cfg.feeding))
            await stop.wait()
            server.should_exit = True
            await serving
    finally:
        projector.close()
        await eventlog.close()
