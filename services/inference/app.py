"""Wiring of the inference server: routes, and the lifespan that loads the model and runs the batcher.

OpenAI-compatible ``/v1/completions``, ``/v1/chat/completions``, ``/v1/models``; ``/healthz`` (and
vLLM's ``/health``); ``/stats`` (batching counters, weights); vLLM-shaped control routes
``POST /update_weights``, ``POST /pause``, ``POST /resume``, ``GET /is_paused``. With
``follow_resources`` the server also follows resources versions on the bus (see ``follow``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import torch
from starlette.applications import Starlette
from starlette.routing import Route
from starlette.types import ASGIApp

from voltbus.services.clients.model import load_model_dir, shards
from voltbus.services.httpguard import guard
from voltbus.services.serving import serve_until
from voltbus.services.settings import Settings

from . import handlers
from .batching import Batcher
from .engine import Engine
from .follow import follow_forever
from .responses import TokenText
from .state import Served
from .swap import Weights, local_version, weights_file

log = logging.getLogger(__name__)


def routes() -> list[Route]:
    """Every route of the server."""
    return [
        Route("/v1/completions", handlers.generation("completions"), methods=["POST"]),
        Route("/v1/chat/completions", handlers.generation("chat"), methods=["POST"]),
        Route("/v1/models", handlers.models, methods=["GET"]),
        Route("/healthz", handlers.healthz),
        Route("/health", handlers.healthz),
        Route("/stats", handlers.stats),
        Route("/update_weights", handlers.update_weights, methods=["POST"]),
        Route("/pause", handlers.pause, methods=["POST"]),
        Route("/resume", handlers.resume, methods=["POST"]),
        Route("/is_paused", handlers.is_paused),
    ]


def load(settings: Settings) -> Served:
    """Load the model directory named in the settings (blocking: call it off the event loop)."""
    cfg = settings.inference
    if cfg.model_dir is None:
        raise ValueError("no model directory: pass --model DIR or set VOLTBUS_INFERENCE__MODEL_DIR")
    if cfg.torch_threads:
        torch.set_num_threads(cfg.torch_threads)
    model, tok = load_model_dir(cfg.model_dir, cfg.device)
    limit = model.config.max_position_embeddings
    cfg = cfg.model_copy(update={"max_model_len": min(cfg.max_model_len or limit, limit)})
    digest = shards.weights_sha256(weights_file(cfg.model_dir))  # one file's, or the set of its shards'
    weights = Weights(version=cfg.weight_version or local_version(digest), sha256=digest, base_sha256=digest)
    engine = Engine(model, tok, cfg.seed)
    name = cfg.served_model_name or cfg.model_dir.resolve().name
    batcher = Batcher(engine, weights, cfg)
    return Served(name, cfg.model_dir, model, tok, cfg, weights, batcher, TokenText(tok))


def build_app(settings: Settings) -> ASGIApp:
    """The server app, behind the Host, Origin and JSON checks (``httpguard``: no web page may swap or pause the
    policy); its lifespan loads the model, runs the batcher and, if asked, the resources follower."""

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        served = await asyncio.to_thread(load, settings)
        app.state.served = served
        log.info("serving %s (weights %s) from %s", served.name, served.weights.version, served.model_dir)
        tasks = [asyncio.create_task(served.batcher.run_forever())]
        if settings.inference.follow_resources:
            tasks.append(asyncio.create_task(follow_forever(settings, served.model, served.weights, served.name)))
        try:
            yield
        finally:
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    cfg = settings.inference
    app = Starlette(routes=routes(), lifespan=lifespan)
    return guard(app, cfg.host, cfg.allowed_hosts, cfg.admin_key, frozenset({"/update_weights", "/pause", "/resume"}))


async def run(settings: Settings, stop: asyncio.Event | None = None, ready: asyncio.Event | None = None) -> None:
    """Serve until ``stop`` is set (or forever); ``ready`` is set once it accepts requests."""
    cfg = settings.inference
    log.info("inference server on http://%s:%d/v1 for %s", cfg.host, cfg.port, cfg.model_dir)
    await serve_until(build_app(settings), cfg.host, cfg.port, "inference server", stop, ready, http=settings.http)
