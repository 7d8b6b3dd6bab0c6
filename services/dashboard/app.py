"""Wiring of the dashboard: one page and the JSON it polls, read from the projector's ``/sql`` only.

``GET /`` is the page (``static/index.html`` with its own small JS; no build step, nothing fetched from
outside); with a token set, a browser signs in once at ``/?token=<token>`` (``/health`` needs none).
The page polls ``/api/overview`` (rollout and attempt statuses, live and stale runners, runs, failures, data
quality), ``/api/run?run_id=`` (sampled reward and staleness per step, validation reward, reward per resources
version), ``/api/rollouts`` (the picker) and ``/api/rollout?rollout_id=`` (spans, model calls as text and token
ids, rewards).
Each answers 503 with ``{"state": "down"}`` while no projector answers.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
from starlette.applications import Starlette
from starlette.routing import Route
from starlette.types import ASGIApp

from voltbus.services.httpguard import check_exposure, guard
from voltbus.services.serving import serve_until
from voltbus.services.settings import Settings

from . import handlers
from .reader import Projections

log = logging.getLogger(__name__)
COOKIE = "voltbus_dashboard"
"""The cookie that keeps the page's token once a browser opened ``/?token=<token>``."""


def routes() -> list[Route]:
    """Every route of the dashboard."""
    return [
        Route("/", handlers.page),
        Route("/health", handlers.health),
        Route("/static/{name}", handlers.static),
        Route("/api/config", handlers.config),
        Route("/api/overview", handlers.overview),
        Route("/api/run", handlers.run),
        Route("/api/rollouts", handlers.rollouts),
        Route("/api/rollout", handlers.rollout),
    ]


def build_app(settings: Settings) -> ASGIApp:
    """The dashboard app, behind the Host and Origin checks (``httpguard``); its lifespan opens the HTTP client to
    the projector."""
    cfg = settings.dashboard

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with httpx.AsyncClient(timeout=cfg.timeout_s, headers=settings.projector.auth_headers) as client:
            app.state.settings = cfg
            app.state.projections = Projections(cfg.projector_url or settings.projector.url, client)
            yield

    app = Starlette(routes=routes(), lifespan=lifespan)
    return guard(app, cfg.host, cfg.allowed_hosts, cfg.token, cookie=COOKIE)


async def run(settings: Settings, stop: asyncio.Event | None = None, ready: asyncio.Event | None = None) -> None:
    """Serve the dashboard until ``stop`` is set (or forever); ``ready`` is set once it accepts connections."""
    cfg = settings.dashboard
    check_exposure("the dashboard", cfg.host, cfg.token, "VOLTBUS_DASHBOARD__TOKEN")
    log.info("dashboard on http://%s:%d reading %s", cfg.host, cfg.port, cfg.projector_url or settings.projector.url)
    await serve_until(build_app(settings), cfg.host, cfg.port, "dashboard", stop, ready, http=settings.http)
