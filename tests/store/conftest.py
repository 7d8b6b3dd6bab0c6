"""A store client on the session's nats-server, in a fresh namespace; a projector running in the test, and a store
whose queries go to it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from voltbus.services.projector.app import run
from voltbus.services.settings import NatsSettings, ProjectorSettings, Settings
from voltbus.store import Store, connect

from ..conftest import free_port, running


@pytest.fixture
async def store(nats_settings: NatsSettings) -> AsyncIterator[Store]:
    """A connected store client."""
    client = await connect(settings=nats_settings)
    yield client
    await client.close()


@asynccontextmanager
async def projector(nats: NatsSettings, db: Path, **config: Any) -> AsyncIterator[str]:
    """A projector of ``nats``'s namespace running in this test (``config``: ProjectorSettings fields); yields the URL
    of its SQL endpoint."""
    port = free_port()
    settings = Settings(nats=nats, projector=ProjectorSettings(db=db, port=port, **config))
    async with running(run, settings, within=20):
        yield f"http://127.0.0.1:{port}"


@pytest.fixture
async def queried(nats_settings: NatsSettings, tmp_path: Path) -> AsyncIterator[Store]:
    """A store whose queries go to a projector running in this test."""
    async with projector(nats_settings, tmp_path / "p.duckdb") as url:
        store = await connect(settings=nats_settings, projector_url=url)
        yield store
        await store.close()
