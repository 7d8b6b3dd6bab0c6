"""Wiring of the store server: Agent Lightning 0.3's store routes under ``/v1/agl``, OTLP/HTTP trace ingest at
``/v1/traces``, one store client on the bus (its lifespan), behind the token and Host/Origin checks (``guard``)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp

from voltbus.services.clients.store import connect
from voltbus.services.httpguard import check_exposure
from voltbus.services.serving import serve_until
from voltbus.services.settings import Settings

from . import handlers as h
from . import otlp
from .body import read_body
from .errors import HttpError, answer
from .guard import guard

log = logging.getLogger(__name__)
AGL = "/v1/agl"


async def traces(request: Request) -> Response:
    """``POST /v1/traces``: an OTLP/HTTP trace export (protobuf or JSON, gzip allowed)."""
    given = request.headers.get("content-type", "").split(";")[0].strip().lower()
    content_type = otlp.PROTOBUF if given == otlp.PROTOBUF else otlp.JSON  # the guard refused any other body
    try:
        body = await read_body(request, request.app.state.settings.max_body_bytes)
        batch = otlp.group(otlp.parse(body, content_type))
        result = await otlp.ingest(request.app.state.store, batch, request.app.state.known_attempts)
    except Exception as exc:  # the boundary: every error becomes its status here
        return answer(exc)
    return Response(otlp.answer(result, content_type), media_type=content_type)


async def not_implemented(request: Request) -> Response:
    """OTLP metrics, logs and profiles: not stored (501, as Agent Lightning answers)."""
    return answer(HttpError(501, "not_implemented", f"{request.url.path} is not stored by voltbus; /v1/traces is"))


def routes() -> list[Route]:
    """Every route (Agent Lightning's order matters where a fixed segment and a parameter share a place)."""
    agl = [
        ("GET", "/health", h.health),
        ("POST", "/queues/rollouts/enqueue", h.enqueue_rollouts),
        ("POST", "/queues/rollouts/dequeue", h.dequeue_rollouts),
        ("POST", "/rollouts", h.start_rollout),
        ("GET", "/rollouts", h.query_rollouts),
        ("POST", "/rollouts/search", h.search_rollouts),
        ("GET", "/rollouts/{rollout_id}", h.get_rollout),
        ("POST", "/rollouts/{rollout_id}", h.update_rollout),
        ("POST", "/rollouts/{rollout_id}/attempts", h.start_attempt),
        ("GET", "/rollouts/{rollout_id}/attempts", h.query_attempts),
        ("POST", "/rollouts/{rollout_id}/attempts/search", h.search_attempts),
        ("GET", "/rollouts/{rollout_id}/attempts/latest", h.latest_attempt),
        ("POST", "/rollouts/{rollout_id}/attempts/{attempt_id}", h.update_attempt),
        ("GET", "/workers", h.query_workers),
        ("POST", "/workers/search", h.search_workers),
        ("GET", "/workers/{worker_id}", h.get_worker),
        ("POST", "/workers/{worker_id}", h.update_worker),
        ("GET", "/statistics", h.statistics),
        ("GET", "/resources", h.query_resources),
        ("POST", "/resources", h.add_resources),
        ("GET", "/resources/latest", h.latest_resources),
        ("GET", "/resources/{resources_id}", h.get_resources),
        ("POST", "/resources/{resources_id}", h.update_resources),
        ("POST", "/spans", h.add_span),
        ("GET", "/spans", h.query_spans),
        ("POST", "/spans/search", h.search_spans),
        ("POST", "/spans/next", h.next_sequence_id),
        ("POST", "/waits/rollouts", h.wait_for_rollouts),
    ]
    otel = [Route("/v1/traces", traces, methods=["POST"])]
    otel += [Route(f"/v1/{p}", not_implemented, methods=["POST"]) for p in ("metrics", "logs", "development/profiles")]
    return [Route(AGL + path, fn, methods=[method]) for method, path, fn in agl] + otel


def build_app(settings: Settings) -> ASGIApp:
    """The store server's app; its lifespan connects the one store client it serves through."""
    cfg = settings.store_server

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        projector = settings.projector
        store = await connect(
            settings=settings.nats, projector_url=projector.url, projector_token=projector.token, name="store-server"
        )
        app.state.store, app.state.settings = store, cfg
        app.state.dequeue_lock, app.state.known_attempts = asyncio.Lock(), set()
        try:
            yield
        finally:
            await store.close()

    app = Starlette(routes=routes(), lifespan=lifespan)
    return guard(app, cfg.host, cfg.allowed_hosts, cfg.token)


async def run(settings: Settings, stop: asyncio.Event | None = None, ready: asyncio.Event | None = None) -> None:
    """Serve the store API until ``stop`` is set (or forever); ``ready`` is set once it accepts connections."""
    cfg = settings.store_server
    check_exposure("the store server", cfg.host, cfg.token, "VOLTBUS_STORE_SERVER__TOKEN")
    log.info("Agent Lightning store API on http://%s:%d%s, OTLP traces at /v1/traces", cfg.host, cfg.port, AGL)
    await serve_until(build_app(settings), cfg.host, cfg.port, "store server", stop, ready, http=settings.http)
