"""A store server (``voltbus store-server``) in this test's event loop, on the session's nats-server, with a real
projector behind its queries; ``http`` talks to it over real HTTP."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, NamedTuple

import httpx
import pytest

from voltbus.services.settings import NatsSettings, ProjectorSettings, Settings, StoreServerSettings
from voltbus.services.storeserver.app import run

from ...conftest import free_port, running
from ...store.conftest import projector

AGL = "/v1/agl"


class Served(NamedTuple):
    """A running store server and the projector its queries read."""

    url: str
    projector_url: str


@asynccontextmanager
async def store_server(nats: NatsSettings, db: Path, **config: Any) -> AsyncIterator[Served]:
    """A projector and a store server (``config``: StoreServerSettings fields) of ``nats``'s namespace."""
    async with projector(nats, db) as projector_url:
        port = free_port()
        settings = Settings(
            nats=nats,
            projector=ProjectorSettings(url=projector_url),
            store_server=StoreServerSettings(port=port, **config),
        )
        async with running(run, settings, within=30):
            yield Served(f"http://127.0.0.1:{port}", projector_url)


@pytest.fixture
async def served(nats_settings: NatsSettings, tmp_path: Path) -> AsyncIterator[Served]:
    """A store server with no token, on loopback."""
    async with store_server(nats_settings, tmp_path / "p.duckdb") as server:
        yield server


@pytest.fixture
def server_url(served: Served) -> str:
    """The store server's URL."""
    return served.url


@pytest.fixture
async def http(server_url: str) -> AsyncIterator[httpx.AsyncClient]:
    """An HTTP client of the store server (generous timeout: queries wait for the projector)."""
    async with httpx.AsyncClient(base_url=server_url, timeout=60) as client:
        yield client
