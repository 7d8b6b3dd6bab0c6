"""Wiring of the gateway: routes, and the lifespan that owns the bus connection and the engine client.

Model calls, in three URL shapes (each with ``/v1/chat/completions``, ``/v1/completions``,
``GET /v1/models``, and the OpenAI Responses and Anthropic Messages APIs, ``/v1/responses`` and
``/v1/messages``, forwarded as chat):

* ``/v1/...``: attribution from ``X-Voltbus-Rollout-Id`` / ``X-Voltbus-Attempt-Id`` (rollout only:
  its latest attempt; neither: recorded as ``unattributed``);
* ``/rollout/{rid}/attempt/{aid}/v1/...``: Agent Lightning 0.3 / agl-lite;
* ``/proxy/rollout/{rid}/attempt/{aid}/mode/{train|val}/openai/v1/...``: Agent Lightning 1.0.

Calls go to one of the engines (``upstream_urls``, or ``upstream_url``): see ``routing`` and ``upstream``.

Also ``POST /api/rollouts/{rid}/attempt/{aid}/events`` (rewards and custom events), ``/healthz``
(pause state and the engines' health),
and the admin routes ``/admin/pause|resume|inflight`` with AL 1.0's ``/proxy/pause|resume|state``,
and AL 1.0's rollout and model routes (``/api/rollouts``, ``/api/models``: ``agl_api``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from starlette.applications import Starlette
from starlette.routing import Route

from voltbus.schemas.errors import InvalidCommand
from voltbus.services import loop
from voltbus.services.clients.store import connect
from voltbus.services.eventlog import unsubscribe
from voltbus.services.serving import serve_until
from voltbus.services.settings import Settings

from . import admin, agl_api, events, handlers
from .anthropic_api import MESSAGES
from .attribution import Attribution
from .pause import PauseState
from .responses_api import RESPONSES
from .state import Gateway
from .upstream import Upstream

log = logging.getLogger(__name__)

PREFIXES = ("", "/rollout/{rid}/attempt/{aid}", "/proxy/rollout/{rid}/attempt/{aid}/mode/{mode}/openai")


def routes() -> list[Route]:
    """Every route of the gateway."""
    out = [Route("/healthz", handlers.healthz)]
    for prefix in PREFIXES:
        out += [
            Route(f"{prefix}/v1/chat/completions", handlers.proxy("chat"), methods=["POST"]),
            Route(f"{prefix}/v1/completions", handlers.proxy("completions"), methods=["POST"]),
            Route(f"{prefix}/v1/models", handlers.models, methods=["GET"]),
            Route(f"{prefix}/v1/responses", handlers.proxy("chat", RESPONSES), methods=["POST"]),
            Route(f"{prefix}/v1/messages", handlers.proxy("chat", MESSAGES), methods=["POST"]),
        ]
    out.append(Route("/api/rollouts/{rid}/attempt/{aid}/events", events.post_event, methods=["POST"]))
    out += agl_api.routes()  # AL 1.0's rollout and model routes
    for path, pause, resume, state in (
        ("/admin", "pause", "resume", "inflight"),
        ("/proxy", "pause", "resume", "state"),
    ):
        out += [
            Route(f"{path}/{pause}", admin.pause, methods=["POST"]),
            Route(f"{path}/{resume}", admin.resume, methods=["POST"]),
            Route(f"{path}/{state}", admin.inflight, methods=["GET"]),
        ]
    return out


def build_app(settings: Settings) -> Starlette:
    """The gateway app; its lifespan connects to the bus and opens the engine client."""

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        cfg = settings.gateway
        store = await connect(settings=settings.nats, name="voltbus-gateway")
        async with Upstream.make_client(cfg) as client:
            upstream = Upstream(cfg, client)
            attribution = Attribution(store, refuse_ended=cfg.refuse_ended_attempts)
            watching = await attribution.watch()
            app.state.gateway = Gateway(
                settings=cfg,
                store=store,
                upstream=upstream,
                attribution=attribution,
                pause=PauseState(cfg.pause_retry_after_s),
                gateway_id=cfg.gateway_id or f"gw-{cfg.port}",
            )
            probing = asyncio.create_task(upstream.probe_forever(cfg.health_check_s)) if cfg.health_check_s else None
            try:
                yield
            finally:
                if probing is not None:
                    probing.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await probing
                await unsubscribe(watching)
                await store.close()

    return Starlette(routes=routes(), lifespan=lifespan)


def main(settings: Settings) -> None:
    """Serve the gateway until interrupted, on uvloop's event loop (``services.loop``): its transports cost
    less CPU per call than asyncio's (BENCHMARKS.md, "Gateway")."""
    loop.run(run(settings))


async def run(settings: Settings, stop: asyncio.Event | None = None, ready: asyncio.Event | None = None) -> None:
    """Serve the gateway until ``stop`` is set (or forever); ``ready`` is set once it accepts calls."""
    cfg = settings.gateway
    if (cfg.tls_cert is None) != (cfg.tls_key is None):
        raise InvalidCommand("gateway TLS needs both tls_cert and tls_key")
    tls = {"ssl_certfile": str(cfg.tls_cert), "ssl_keyfile": str(cfg.tls_key)} if cfg.tls_cert else {}
    scheme = "https" if tls else "http"
    log.info("gateway on %s://%s:%d in front of %s", scheme, cfg.host, cfg.port, ", ".join(cfg.engines))
    await serve_until(build_app(settings), cfg.host, cfg.port, "gateway", stop, ready, http=settings.http, **tls)
